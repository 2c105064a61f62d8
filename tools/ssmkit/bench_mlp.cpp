// `ssmkit bench mlp`: the MLP and MoE ops at the feed-forward shapes of granite-4.0-h-350m,
// granite-4.0-h-1b (their dense shared_mlp) and granite-4.0-h-tiny (64 experts of 512, top-6,
// shared_mlp of 1024), decode (T = 1) and prefill (T = 512), forward and forward+backward.
// Each case is timed interleaved with its floor (MedianMsInterleaved: run 1 of each, run 2 of
// each, ...), so that the ratio sees one machine state on a shared VM:
//   - prefill: the same products as bare OpenBLAS sgemm calls on f32 matrices of the case's
//     shapes, split over the same threads (the MoE's as one product over its T k routed rows);
//     forward+backward against 3x that (the backward's minimum is twice the forward's products;
//     ours recomputes gate and up on top),
//   - decode: a streaming read of the bytes the call must read (the weights, or the router, the
//     k selected experts and the shared one), from a 256 MB buffer so that they come from
//     memory; the decode cases themselves cycle over enough copies of the weights (and over 16
//     tokens for the MoE, so each call selects other experts) to leave the cache, as a model
//     whose layers do not fit in it does.
// The peer column's ratio is floor / ours: the share of the floor reached.
// Dimension legend: T tokens, d model width, F hidden width, E experts, k per token.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "core/dtype.hpp"
#include "core/parallel.hpp"
#include "ssmkit/mlp.hpp"
#include "train/gemm.hpp"

namespace ssmkit::bench {
namespace {

struct MlpBenchCase {
  const char* shape;  // the model whose feed-forward block this is
  const char* variant;
  int64_t T, d, F;
  int64_t E = 0, k = 0, Fs = 0;  // E > 0: a MoE of E experts of width F plus a shared one, Fs
  DType wdtype = DType::kF32;
  bool backward = false;  // also time forward+backward
};

constexpr MlpBenchCase kCases[] = {
    {"granite-4.0-h-350m", "decode f32", 1, 768, 2048},
    {"granite-4.0-h-350m", "decode bf16", 1, 768, 2048, 0, 0, 0, DType::kBF16},
    {"granite-4.0-h-350m", "prefill f32", 512, 768, 2048, 0, 0, 0, DType::kF32, true},
    {"granite-4.0-h-350m", "prefill bf16", 512, 768, 2048, 0, 0, 0, DType::kBF16},
    {"granite-4.0-h-1b", "decode f32", 1, 1536, 4096},
    {"granite-4.0-h-1b", "decode bf16", 1, 1536, 4096, 0, 0, 0, DType::kBF16},
    {"granite-4.0-h-1b", "prefill f32", 512, 1536, 4096, 0, 0, 0, DType::kF32, true},
    {"granite-4.0-h-1b", "prefill bf16", 512, 1536, 4096, 0, 0, 0, DType::kBF16},
    {"granite-4.0-h-tiny", "moe decode bf16", 1, 1536, 512, 64, 6, 1024, DType::kBF16},
    {"granite-4.0-h-tiny", "moe prefill bf16", 512, 1536, 512, 64, 6, 1024, DType::kBF16},
    {"granite-4.0-h-tiny", "moe prefill f32", 512, 1536, 512, 64, 6, 1024, DType::kF32, true},
};

// Bytes of weights a decode call cycles over: well past the last-level cache.
constexpr double kColdBytes = 256e6;
constexpr int kMoeTokens = 16;  // decode tokens cycled over, each routed its own way

struct Buffer {
  std::vector<uint8_t> bytes;
  Tensor view;
  Buffer(std::vector<int64_t> shape, DType dtype, std::mt19937& rng, float scale) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    bytes.resize(static_cast<size_t>(n * DTypeSize(dtype)));
    std::uniform_real_distribution<float> uniform(-scale, scale);
    for (int64_t i = 0; i < n; ++i) StoreFromF32(bytes.data(), dtype, i, uniform(rng));
    view.data = bytes.data();
    view.dtype = dtype;
    view.rank = static_cast<int>(shape.size());
    int64_t stride = 1;
    for (int r = view.rank - 1; r >= 0; --r) {
      view.shape[r] = shape[r];
      view.strides[r] = stride;
      stride *= shape[r];
    }
  }
};

// One MLP's weights (gated) and f32 gradient buffers, owned.
struct MlpSet {
  std::vector<std::unique_ptr<Buffer>> owned;
  MlpWeights w;
  MlpWeightGrads g;
  MlpSet(int64_t d, int64_t F, DType dtype, std::mt19937& rng, bool grads) {
    auto make = [&](std::vector<int64_t> shape, DType t, float scale) {
      owned.push_back(std::make_unique<Buffer>(std::move(shape), t, rng, scale));
      return owned.back()->view;
    };
    const float in = 1.7f / std::sqrt(static_cast<float>(d));
    const float out = 1.7f / std::sqrt(static_cast<float>(F));
    w = {make({F, d}, dtype, in), make({F, d}, dtype, in), make({d, F}, dtype, out)};
    if (grads) {
      g.dgate = make({F, d}, DType::kF32, 0);
      g.dup = make({F, d}, DType::kF32, 0);
      g.ddown = make({d, F}, DType::kF32, 0);
    }
  }
};

// One layer: a dense MLP, or a MoE (router, E experts, shared expert).
struct Layer {
  std::unique_ptr<MlpSet> dense, shared;
  std::vector<std::unique_ptr<MlpSet>> experts;
  std::vector<MlpWeights> expert_weights;
  std::vector<MlpWeightGrads> expert_grads;
  std::unique_ptr<Buffer> router, drouter;

  Layer(const MlpBenchCase& c, std::mt19937& rng, bool grads) {
    if (c.E == 0) {
      dense = std::make_unique<MlpSet>(c.d, c.F, c.wdtype, rng, grads);
      return;
    }
    for (int64_t e = 0; e < c.E; ++e) {
      experts.push_back(std::make_unique<MlpSet>(c.d, c.F, c.wdtype, rng, grads));
      expert_weights.push_back(experts.back()->w);
      expert_grads.push_back(experts.back()->g);
    }
    shared = std::make_unique<MlpSet>(c.d, c.Fs, c.wdtype, rng, grads);
    router = std::make_unique<Buffer>(std::vector<int64_t>{c.E, c.d}, c.wdtype, rng,
                                      1.7f / std::sqrt(static_cast<float>(c.d)));
    if (grads)
      drouter = std::make_unique<Buffer>(std::vector<int64_t>{c.E, c.d}, DType::kF32, rng, 0);
  }
};

double WeightBytes(const MlpBenchCase& c, int64_t F) {
  return 3.0 * static_cast<double>(F * c.d * DTypeSize(c.wdtype));
}

// Bytes a decode call must read: the dense weights, or the router, k experts and the shared one.
double DecodeBytes(const MlpBenchCase& c) {
  if (c.E == 0) return WeightBytes(c, c.F);
  return static_cast<double>(c.E * c.d * DTypeSize(c.wdtype)) + c.k * WeightBytes(c, c.F) +
         WeightBytes(c, c.Fs);
}

// Multiply-adds x 2 of one forward: 2 T d F per projection.
double ForwardFlops(const MlpBenchCase& c) {
  const double T = static_cast<double>(c.T), d = static_cast<double>(c.d);
  if (c.E == 0) return 6.0 * T * d * static_cast<double>(c.F);
  return 2.0 * T * d * (static_cast<double>(c.E) + 3.0 * static_cast<double>(c.k * c.F + c.Fs));
}

// The forward's products as bare sgemm calls on f32 matrices: x (R, d) times each projection
// (gate and up (F, d), then h (R, F) times down (d, F)), R = T for a dense MLP, T k for the
// experts, plus the shared expert and the router on T rows.
class GemmFloor {
 public:
  explicit GemmFloor(const MlpBenchCase& c) : c_(c) {
    const int64_t R = c.E ? c.T * c.k : c.T, F_max = std::max(c.F, c.Fs);
    x_.assign(R * c.d, 0.5f);
    w_.assign(std::max(F_max, c.E) * c.d, 0.25f);
    h_.assign(R * F_max, 0.5f);
    y_.assign(R * c.d, 0.0f);
  }
  void operator()() {
    Mlp(c_.E ? c_.T * c_.k : c_.T, c_.F);
    if (c_.E == 0) return;
    Mlp(c_.T, c_.Fs);
    Gemm(c_.T, c_.E, c_.d, x_.data(), h_.data());  // the router
  }

 private:
  void Gemm(int64_t M, int64_t N, int64_t K, const float* a, float* out) {
    train::ParallelGemm(false, true, M, N, K, 1.0f, a, K, w_.data(), K, 0.0f, out, N);
  }
  void Mlp(int64_t R, int64_t F) {
    Gemm(R, F, c_.d, x_.data(), h_.data());  // gate
    Gemm(R, F, c_.d, x_.data(), h_.data());  // up
    Gemm(R, c_.d, F, h_.data(), y_.data());  // down
  }
  const MlpBenchCase& c_;
  std::vector<float> x_, w_, h_, y_;
};

int RunMlpBench(const Options& options) {
  if (!options.ggml.empty()) {
    std::fprintf(stderr, "bench mlp: --ggml: no ggml case here (the peers are floors)\n");
    return 2;
  }
  ColdRead cold_read(kColdBytes);
  std::vector<Result> results;
  for (const MlpBenchCase& c : kCases) {
    if (!options.shape.empty() && options.shape != c.shape) continue;
    if (!options.algo.empty() && options.algo != c.variant) continue;
    std::mt19937 rng(1234);
    const bool decode = c.T == 1;
    const double layer_bytes = c.E ? DecodeBytes(c) * c.E / c.k : DecodeBytes(c);
    const int layers =
        decode ? static_cast<int>(std::clamp(kColdBytes / layer_bytes, 1.0, 64.0)) : 1;
    std::vector<std::unique_ptr<Layer>> stack;
    for (int l = 0; l < layers; ++l) stack.push_back(std::make_unique<Layer>(c, rng, c.backward));
    const int64_t tokens = c.E && decode ? kMoeTokens : c.T;
    Buffer x({tokens, c.d}, DType::kF32, rng, 1.0f), out({c.T, c.d}, DType::kF32, rng, 0),
        dout({c.T, c.d}, DType::kF32, rng, 1.0f), dx({c.T, c.d}, DType::kF32, rng, 0);
    MoeOptions moe;
    moe.top_k = c.k;
    moe.routing = MoeRouting::kTopKSoftmax;
    Status status = Status::Ok();
    int call = 0;
    auto x_rows = [&] {
      Tensor v = x.view;
      if (tokens != c.T) {  // the next decode token
        v.data = static_cast<float*>(x.view.data) + (call % tokens) * c.d;
        v.shape[0] = 1;
      }
      return v;
    };
    auto forward = [&] {
      const Layer& layer = *stack[call % stack.size()];
      if (c.E == 0) {
        status = MlpForward({x_rows(), layer.dense->w}, out.view);
      } else {
        status = MoeForward(
            {x_rows(), layer.router->view, Tensor{}, layer.expert_weights, layer.shared->w},
            {out.view}, moe);
      }
      ++call;
    };
    auto backward = [&] {
      const Layer& layer = *stack[0];
      if (c.E == 0) {
        const MlpGrads g{dx.view, Tensor{}, Tensor{}, layer.dense->g};
        status = MlpBackward({x.view, layer.dense->w}, dout.view, g);
      } else {
        const MoeGrads g{dx.view, layer.drouter->view, Tensor{}, layer.expert_grads,
                         layer.shared->g};
        status = MoeBackward(
            {x.view, layer.router->view, Tensor{}, layer.expert_weights, layer.shared->w},
            dout.view, Tensor{}, g, moe);
      }
    };
    std::unique_ptr<GemmFloor> gemm;
    if (!decode) gemm = std::make_unique<GemmFloor>(c);
    auto floor = [&] {
      if (decode) {
        cold_read(DecodeBytes(c));
      } else {
        (*gemm)();
      }
    };
    const char* op = c.E ? "moe" : "mlp";
    const char* peer = decode ? "read of its weight bytes" : "its products as bare sgemm";
    std::vector<double> ms = MedianMsInterleaved(options, {forward, floor});
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.message().c_str());
      return 1;
    }
    Result fwd{op,   c.shape, c.variant, "fwd", ms[0], DecodeBytes(c), static_cast<double>(c.T),
               "tok"};
    fwd.peer_ms = ms[1];
    fwd.peer = peer;
    results.push_back(fwd);
    if (!c.backward) continue;
    call = 0;
    ms = MedianMsInterleaved(options, {[&] {
                                         forward();
                                         if (status.ok()) backward();
                                       },
                                       floor});
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.message().c_str());
      return 1;
    }
    Result both{
        op, c.shape, c.variant, "fwd+bwd", ms[0], DecodeBytes(c), static_cast<double>(c.T), "tok"};
    both.peer_ms = 3.0 * ms[1];
    both.peer = "3x its forward products as bare sgemm";
    results.push_back(both);
  }
  Print(options, results);
  return 0;
}

const SuiteRegistration kRegistration{
    {"mlp",
     "MLP and MoE: granite-4.0-h-350m, granite-4.0-h-1b (shared_mlp), granite-4.0-h-tiny "
     "(MoE); decode and prefill against the read and GEMM floors",
     RunMlpBench}};

}  // namespace
}  // namespace ssmkit::bench
