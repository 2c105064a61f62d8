#include "train/lm.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "core/parallel.hpp"
#include "ssmkit/norm.hpp"
#include "train/cross_entropy.hpp"
#include "train/blocks.hpp"
#include "train/gemm.hpp"
#include "train/views.hpp"

namespace ssmkit::train {

struct TrainModel::Impl {
  ModelConfig config;
  ParamTable table;
  std::vector<float> params, grads;

  // The last forward's sizes and activations.
  int64_t batch = 0, seqlen = 0;
  std::vector<int32_t> inputs, targets;                  // (M)
  std::vector<float> h0;                                 // (M, d): the embedded inputs
  std::vector<std::vector<float>> normed, resid, mixed;  // per block (M, d)
  std::vector<std::unique_ptr<TrainBlock>> blocks;       // each keeps its own activations
  BlockScratch scratch;
  std::vector<float> hf, resid_f, logits;                 // (M, d), (M, d), (M, V)
  std::vector<float> g, g_next, dnormed, dhf, dnorm, gs;  // backward: (M, d) x 4, (d), (M, d)

  int64_t M() const { return batch * seqlen; }
  int64_t n_blocks() const { return static_cast<int64_t>(blocks.size()); }
  BlockArgs Block(int64_t i) {
    BlockArgs a;
    a.config = &config;
    a.batch = batch;
    a.seqlen = seqlen;
    a.params = params.data();
    a.grads = grads.data();
    a.layer = table.blocks()[i];
    return a;
  }
  // Block i's add + norm reads the previous block's output and residual (none before block 0).
  AddRmsNormInputs NormInputs(int64_t i) const {
    const int64_t d = config.d_model;
    AddRmsNormInputs in;
    in.x = F32Contiguous(i == 0 ? h0.data() : mixed[i - 1].data(), {M(), d});
    if (i > 0) in.residual = F32Contiguous(resid[i - 1].data(), {M(), d});
    const int64_t w = i < n_blocks() ? table.blocks()[i].norm : table.norm_f();
    in.weight = F32Contiguous(params.data() + w, {d});
    return in;
  }
  AddRmsNormOptions NormOptions() const {
    AddRmsNormOptions o;
    o.eps = config.norm_eps;
    return o;
  }

  Status Prepare(std::span<const int32_t> tokens, int64_t b, int64_t l, bool with_targets);
  Status Forward();
  Status Backward();  // expects `logits` to hold dloss/dlogits
};

Status TrainModel::Impl::Prepare(std::span<const int32_t> tokens, int64_t b, int64_t l,
                                 bool with_targets) {
  if (b < 1 || l < 1) {
    return Status::InvalidArgument("train: batch and seqlen: expected >= 1, given " +
                                   std::to_string(b) + " and " + std::to_string(l));
  }
  const int64_t row = with_targets ? l + 1 : l;
  if (static_cast<int64_t>(tokens.size()) != b * row) {
    return Status::InvalidArgument("train: tokens: expected " + std::to_string(b) + " x " +
                                   std::to_string(row) + " ids, given " +
                                   std::to_string(tokens.size()));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= config.vocab_size) {
      return Status::InvalidArgument(
          "train: tokens[" + std::to_string(i) + "]: expected an id in [0, " +
          std::to_string(config.vocab_size) + "), given " + std::to_string(tokens[i]));
    }
  }
  batch = b;
  seqlen = l;
  inputs.resize(static_cast<size_t>(b * l));
  targets.resize(with_targets ? static_cast<size_t>(b * l) : 0);
  for (int64_t i = 0; i < b; ++i) {
    std::copy_n(tokens.data() + i * row, l, inputs.data() + i * l);
    if (with_targets) std::copy_n(tokens.data() + i * row + 1, l, targets.data() + i * l);
  }
  return Status::Ok();
}

Status TrainModel::Impl::Forward() {
  const int64_t d = config.d_model, V = config.vocab_size, n = n_blocks(), m = M();
  const Multipliers& mult = config.multipliers;
  Resize(h0, m * d);
  const float* E = params.data() + table.embedding();
  ParallelFor(m, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      ScaleInto(E + inputs[t] * d, d, mult.embedding, h0.data() + t * d);
    }
  });
  normed.resize(n);
  resid.resize(n);
  mixed.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    Resize(normed[i], m * d);
    Resize(resid[i], m * d);
    Resize(mixed[i], m * d);
    SSMKIT_RETURN_IF_ERROR(AddRmsNormForward(NormInputs(i), F32Contiguous(normed[i].data(), {m, d}),
                                             F32Contiguous(resid[i].data(), {m, d}),
                                             NormOptions()));
    SSMKIT_RETURN_IF_ERROR(blocks[i]->Forward(Block(i), normed[i].data(), mixed[i].data()));
    if (mult.residual != 1.0f) ScaleInto(mixed[i].data(), m * d, mult.residual, mixed[i].data());
  }
  Resize(hf, m * d);
  Resize(resid_f, m * d);
  SSMKIT_RETURN_IF_ERROR(AddRmsNormForward(NormInputs(n), F32Contiguous(hf.data(), {m, d}),
                                           F32Contiguous(resid_f.data(), {m, d}), NormOptions()));
  Resize(logits, m * V);
  ParallelGemm(false, true, m, V, d, mult.logits, hf.data(), d, params.data() + table.lm_head(), d,
               0.0f, logits.data(), V);
  return Status::Ok();
}

Status TrainModel::Impl::Backward() {
  const int64_t d = config.d_model, V = config.vocab_size, n = n_blocks(), m = M();
  const Multipliers& mult = config.multipliers;
  float* G = grads.data();
  Resize(dhf, m * d);
  Resize(g, m * d);
  Resize(g_next, m * d);
  Resize(dnormed, m * d);
  Resize(dnorm, d);
  const float* W_head = params.data() + table.lm_head();
  ParallelGemm(true, false, V, d, m, mult.logits, logits.data(), V, hf.data(), d, 1.0f,
               G + table.lm_head(), d);
  ParallelGemm(false, false, m, d, V, mult.logits, logits.data(), V, W_head, d, 0.0f, dhf.data(),
               d);

  AddRmsNormGrads fg;
  fg.dx = F32Contiguous(g.data(), {m, d});
  fg.dweight = F32Contiguous(dnorm.data(), {d});
  SSMKIT_RETURN_IF_ERROR(
      AddRmsNormBackward(NormInputs(n), F32Contiguous(dhf.data(), {m, d}), {}, fg, NormOptions()));
  AddInto(G + table.norm_f(), dnorm.data(), d);

  for (int64_t i = n - 1; i >= 0; --i) {
    // g is the gradient reaching both the block's (scaled) output and resid_i.
    const float* dout = g.data();
    if (mult.residual != 1.0f) {
      Resize(gs, m * d);
      ScaleInto(g.data(), m * d, mult.residual, gs.data());
      dout = gs.data();
    }
    SSMKIT_RETURN_IF_ERROR(blocks[i]->Backward(Block(i), normed[i].data(), dout, dnormed.data()));
    AddRmsNormGrads ng;
    ng.dx = F32Contiguous(g_next.data(), {m, d});
    ng.dweight = F32Contiguous(dnorm.data(), {d});
    SSMKIT_RETURN_IF_ERROR(AddRmsNormBackward(NormInputs(i), F32Contiguous(dnormed.data(), {m, d}),
                                              F32Contiguous(g.data(), {m, d}), ng, NormOptions()));
    AddInto(G + table.blocks()[i].norm, dnorm.data(), d);
    std::swap(g, g_next);
  }

  // Embedding rows: split over columns so that every element is summed by one thread, in
  // token order.
  float* dE = G + table.embedding();
  const float e = mult.embedding;
  ParallelFor(d, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = 0; t < m; ++t) {
      float* row = dE + inputs[t] * d;
      const float* src = g.data() + t * d;
      for (int64_t c = begin; c < end; ++c) row[c] += src[c] * e;
    }
  });
  return Status::Ok();
}

TrainModel::TrainModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TrainModel::~TrainModel() = default;

Status TrainModel::Create(const ModelConfig& config, std::unique_ptr<TrainModel>* model) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  SSMKIT_RETURN_IF_ERROR(ParamTable::Build(config, &impl->table));
  for (const BlockSpec& b : config.block_list()) {
    impl->blocks.push_back(MakeTrainBlock(b.kind, &impl->scratch));
    if (impl->blocks.back() == nullptr) {
      return Status::InvalidArgument(std::string("train: no trainer block for ") +
                                     BlockKindName(b.kind));
    }
  }
  impl->params.assign(static_cast<size_t>(impl->table.total()), 0.0f);
  impl->grads.assign(static_cast<size_t>(impl->table.total()), 0.0f);
  model->reset(new TrainModel(std::move(impl)));
  return Status::Ok();
}

const ModelConfig& TrainModel::config() const { return impl_->config; }
const ParamTable& TrainModel::table() const { return impl_->table; }
std::span<float> TrainModel::params() { return impl_->params; }
std::span<const float> TrainModel::params() const { return impl_->params; }
std::span<float> TrainModel::grads() { return impl_->grads; }
void TrainModel::ZeroGrads() { std::fill(impl_->grads.begin(), impl_->grads.end(), 0.0f); }

Status TrainModel::ForwardBackward(std::span<const int32_t> tokens, int64_t batch, int64_t seqlen,
                                   float grad_scale, double* loss_sum) {
  Impl& s = *impl_;
  SSMKIT_RETURN_IF_ERROR(s.Prepare(tokens, batch, seqlen, true));
  SSMKIT_RETURN_IF_ERROR(s.Forward());
  *loss_sum = SoftmaxCrossEntropy(s.logits.data(), s.targets.data(), s.M(), s.config.vocab_size,
                                  grad_scale, s.logits.data());
  return s.Backward();
}

Status TrainModel::Loss(std::span<const int32_t> tokens, int64_t batch, int64_t seqlen,
                        double* loss_sum) {
  Impl& s = *impl_;
  SSMKIT_RETURN_IF_ERROR(s.Prepare(tokens, batch, seqlen, true));
  SSMKIT_RETURN_IF_ERROR(s.Forward());
  *loss_sum = SoftmaxCrossEntropy(s.logits.data(), s.targets.data(), s.M(), s.config.vocab_size,
                                  0.0f, nullptr);
  return Status::Ok();
}

Status TrainModel::Logits(std::span<const int32_t> inputs, int64_t batch, int64_t seqlen,
                          std::vector<float>* logits) {
  Impl& s = *impl_;
  SSMKIT_RETURN_IF_ERROR(s.Prepare(inputs, batch, seqlen, false));
  SSMKIT_RETURN_IF_ERROR(s.Forward());
  *logits = s.logits;
  return Status::Ok();
}

}  // namespace ssmkit::train
