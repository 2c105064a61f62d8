// `ssmkit bench train`: one optimizer step of the trainer (zero grads, forward + backward over
// the whole model, gradient clipping, AdamW) on random bytes, for the `ssmkit train` sizes
// and archs (Mamba-1, Mamba-2, and the hybrid: Mamba-2 and attention layers every second
// layer, each followed by a SwiGLU MLP). ns/token is per trained token. The PyTorch peer needs
// Python: it is bench/train_vs_pytorch.sh (docs/benchmarks.md), which times the same steps side by
// side.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "ssmkit/train.hpp"
#include "train/init.hpp"
#include "train/lm.hpp"
#include "train/optimizer.hpp"
#include "train/random.hpp"

namespace ssmkit::bench {
namespace {

struct TrainCase {
  const char* shape;  // "<size>-train": ssmkit train --size <size>, one micro-batch
  const char* size;
  ModelArch arch;
  int64_t batch, seqlen;
  int64_t attention_every = 0;  // > 0: the hybrid (--arch hybrid --attention-every)
};

constexpr TrainCase kCases[] = {
    {"tiny-train", "tiny", ModelArch::kMamba1, 8, 256},
    {"tiny-train", "tiny", ModelArch::kMamba2, 8, 256},
    {"tiny-train", "tiny", ModelArch::kMamba2, 8, 256, 2},
    {"small-train", "small", ModelArch::kMamba1, 16, 256},
    {"small-train", "small", ModelArch::kMamba2, 16, 256},
    {"small-train", "small", ModelArch::kMamba2, 16, 256, 2},
};

int RunTrainBench(const Options& options) {
  std::vector<Result> results;
  for (const TrainCase& c : kCases) {
    const std::string algo = c.attention_every > 0 ? "hybrid" : ModelArchName(c.arch);
    if (!options.shape.empty() && options.shape != c.shape) continue;
    if (!options.algo.empty() && options.algo != algo) continue;
    ModelConfig config;
    std::unique_ptr<train::TrainModel> model;
    Status status = c.attention_every > 0
                        ? TrainHybridSizeConfig(c.size, c.attention_every, &config)
                        : TrainSizeConfig(c.arch, c.size, &config);
    if (status.ok()) status = train::TrainModel::Create(config, &model);
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.message().c_str());
      return 1;
    }
    train::InitParams(config, model->table(), 1, model->params().data());
    train::AdamW adamw(model->table(), {});
    train::SplitMix64 rng(7);
    std::vector<int32_t> tokens(static_cast<size_t>(c.batch * (c.seqlen + 1)));
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng.Next() % 256);
    const float scale = 1.0f / static_cast<float>(c.batch * c.seqlen);
    const double ms = MedianMs(options, [&] {
      model->ZeroGrads();
      double loss = 0.0;
      if (status.ok()) status = model->ForwardBackward(tokens, c.batch, c.seqlen, scale, &loss);
      train::ClipGradNorm(model->grads(), 1.0);
      adamw.Step(1e-4f, model->params(), model->grads());
    });
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.message().c_str());
      return 1;
    }
    Result r{"train_step",
             c.shape,
             algo,
             "fwd+bwd+adamw",
             ms,
             0.0,
             static_cast<double>(c.batch * c.seqlen),
             "token"};
    results.push_back(r);
  }
  Print(options, results);
  return 0;
}

const SuiteRegistration kRegistration{
    {"train",
     "one training step (forward, backward, clipping, AdamW) of the tiny and small byte models, "
     "Mamba-1 and Mamba-2",
     RunTrainBench}};

}  // namespace
}  // namespace ssmkit::bench
