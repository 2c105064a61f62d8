#include "model/gpu_decoder.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <numeric>
#include <string>

#include "cuda/decode_kernels.hpp"
#include "model/mamba2_block.hpp"
#include "model/seq_batch.hpp"
#include "ssmkit/cuda.hpp"

namespace ssmkit::model {
namespace {

constexpr const char* kWhat = "session: device cuda: ";

// Points the calling thread's ops at the decoder's stream for a scope, then back.
class StreamScope {
 public:
  explicit StreamScope(void* stream) : previous_(GetCudaStream()) { SetCudaStream(stream); }
  StreamScope(const StreamScope&) = delete;
  StreamScope& operator=(const StreamScope&) = delete;
  ~StreamScope() { SetCudaStream(previous_); }

 private:
  void* previous_;
};

bool GraphsWanted() {
  const char* v = std::getenv("SSMKIT_CUDA_GRAPHS");
  return !(v && std::strcmp(v, "0") == 0);
}

// The model's weights on the device, uploaded by its first CUDA session.
Status DeviceWeightsOf(const Model::Impl& model, const ModelWeights** weights) {
  std::lock_guard<std::mutex> lock(model.device_mutex);
  if (!model.device_weights) {
    SSMKIT_RETURN_IF_ERROR(DeviceWeights::Upload(model.weights, &model.device_weights));
  }
  *weights = &model.device_weights->weights();
  return Status::Ok();
}

}  // namespace

Status CheckRunsOnCuda(const ModelConfig& c, const ModelWeights& w) {
  for (size_t i = 0; i < w.blocks.size(); ++i) {
    const BlockSpec& spec = w.blocks[i].spec;
    if (spec.kind == BlockKind::kMamba1 || spec.kind == BlockKind::kMamba2) continue;
    return Status::Unsupported(
        std::string(kWhat) + "block " + std::to_string(i) + " (layer " +
        std::to_string(spec.layer) + ") is a " + BlockKindName(spec.kind) +
        " block; the GPU engine runs Mamba-1 and Mamba-2 blocks only (attention, MLP and MoE "
        "have no CUDA kernels yet): run this " +
        (c.family.empty() ? std::string("model") : c.family) + " model on the CPU");
  }
  const Multipliers& m = c.multipliers;
  if (m.embedding != 1.0f || m.residual != 1.0f || m.logits != 1.0f) {
    return Status::Unsupported(std::string(kWhat) +
                               "embedding, residual or logits multipliers (muP) run on the CPU "
                               "only");
  }
  for (const Block& b : w.blocks) {
    if (b.spec.kind != BlockKind::kMamba2) continue;
    if (b.mamba2.in_proj_scale.defined()) {
      return Status::Unsupported(std::string(kWhat) +
                                 "in_proj multipliers (Falcon-H1's) run on the CPU only");
    }
    if (HasDtLimit(c)) {
      return Status::Unsupported(std::string(kWhat) +
                                 "a time_step_limit other than (0, inf) runs on the CPU only");
    }
  }
  return Status::Ok();
}

GpuDecoder::GpuDecoder(const ModelConfig& config, const ModelWeights& weights, int64_t max_batch)
    : config_(config), weights_(weights), max_batch_(max_batch) {}

GpuDecoder::~GpuDecoder() {
  // Work still queued reads the buffers about to be freed.
  if (stream_.get()) (void)cuda::SynchronizeStream(stream_.get());
}

Status GpuDecoder::Create(const Model::Impl& model, int64_t max_batch,
                          std::unique_ptr<GpuDecoder>* out) {
  SSMKIT_RETURN_IF_ERROR(CheckRunsOnCuda(model.config, model.weights));
  if (!CudaBuilt()) {
    return Status::Unsupported(std::string(kWhat) +
                               "this build has no CUDA backend (configure with SSMKIT_CUDA=ON "
                               "where nvcc is installed)");
  }
  if (CudaDeviceCount() == 0) {
    return Status::Unsupported(std::string(kWhat) + "no usable CUDA device here");
  }
  const ModelWeights* weights = nullptr;
  SSMKIT_RETURN_IF_ERROR(DeviceWeightsOf(model, &weights));
  try {
    std::unique_ptr<GpuDecoder> g(new GpuDecoder(model.config, *weights, max_batch));
    SSMKIT_RETURN_IF_ERROR(g->Allocate());
    *out = std::move(g);
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory(std::string(kWhat) + "out of host memory");
  }
  return Status::Ok();
}

Status GpuDecoder::Allocate() {
  const ModelConfig& c = config_;
  const int64_t B = max_batch_, d = c.d_model, V = c.vocab_size;
  sampled_vocab_ = c.config_vocab_size > 0 ? std::min(V, c.config_vocab_size) : V;
  use_graphs_ = GraphsWanted();
  SSMKIT_RETURN_IF_ERROR(stream_.Create());
  SSMKIT_RETURN_IF_ERROR(states_.AllocateOnDevice(c, weights_.ssm_caches, B));
  const int64_t act_elements = 2 * B * d + BlockActsElements(c, weights_, B, /*decode=*/true);
  SSMKIT_RETURN_IF_ERROR(acts_.Allocate("session: activations", act_elements * 2));
  SSMKIT_RETURN_IF_ERROR(residual_.Allocate("session: residual stream", B * d * 4));
  SSMKIT_RETURN_IF_ERROR(logits_.Allocate("session: logits", B * V * 4));
  SSMKIT_RETURN_IF_ERROR(tokens_.Allocate("session: token ids", B * 4));
  SSMKIT_RETURN_IF_ERROR(next_.Allocate("session: greedy ids", B * 4));
  SSMKIT_RETURN_IF_ERROR(tokens_in_.Allocate("session: token ids (host)", B * 4));
  SSMKIT_RETURN_IF_ERROR(next_out_.Allocate("session: greedy ids (host)", B * 4));
  slots_.resize(static_cast<size_t>(B));
  std::iota(slots_.begin(), slots_.end(), 0);
  positions_.assign(static_cast<size_t>(B), 0);
  offsets_.resize(static_cast<size_t>(B + 1));
  std::iota(offsets_.begin(), offsets_.end(), 0);
  starts_.assign(static_cast<size_t>(B), 0);
  graphs_.resize(static_cast<size_t>(B));
  order_.reserve(static_cast<size_t>(B));
  return Status::Ok();
}

ForwardBuffers GpuDecoder::Carve(int64_t n) const {
  const int64_t d = config_.d_model;
  const ActBuffer acts{acts_.data(), DType::kBF16, Device::kCuda};
  ForwardBuffers b;
  b.hidden = acts;
  b.normed = acts + n * d;
  b.acts = acts + 2 * n * d;
  b.residual = {residual_.data(), DType::kF32, Device::kCuda};
  return b;
}

Status GpuDecoder::Launch(int64_t n) {
  const ModelConfig& c = config_;
  const ForwardBuffers buf = Carve(n);
  cuda::EmbedParams embed;
  embed.table = weights_.embedding.data;
  embed.table_dtype = weights_.embedding.dtype;
  embed.vocab = weights_.embedding.shape[0];
  embed.d = c.d_model;
  embed.ids = static_cast<const int32_t*>(tokens_.data());
  embed.rows = n;
  embed.out = buf.hidden.data;
  embed.out_dtype = buf.hidden.dtype;
  embed.out_stride = c.d_model;
  SSMKIT_RETURN_IF_ERROR(cuda::EmbedRows(embed));
  SeqBatch batch;
  batch.n = n;
  batch.T = n;
  batch.slots = slots_.data();
  batch.offset = offsets_.data();
  batch.start = starts_.data();
  batch.positions = positions_.data();
  batch.decode = true;
  const ForwardContext ctx{c, weights_, states_, kv_, KvBatch{nullptr, nullptr}};
  SSMKIT_RETURN_IF_ERROR(RunBlocks(ctx, batch, buf));
  const ActBuffer logits{logits_.data(), DType::kF32, Device::kCuda};
  SSMKIT_RETURN_IF_ERROR(LmHead(c, weights_, buf.normed, n, logits));
  cuda::ArgmaxParams argmax;
  argmax.logits = static_cast<const float*>(logits_.data());
  argmax.rows = n;
  argmax.cols = sampled_vocab_;
  argmax.stride = c.vocab_size;
  argmax.out = static_cast<int32_t*>(next_.data());
  return cuda::ArgmaxRows(argmax);
}

Status GpuDecoder::Step(int64_t n) {
  cuda::Graph& graph = graphs_[static_cast<size_t>(n - 1)];
  if (graph.ready()) return graph.Launch(stream_.get());
  SSMKIT_RETURN_IF_ERROR(Launch(n));
  if (!use_graphs_) return Status::Ok();
  // Recorded only now, after an eager step made cuBLAS's handle and workspace and loaded every
  // kernel (calls a capture forbids); the recording runs nothing.
  SSMKIT_RETURN_IF_ERROR(cuda::Graph::BeginCapture(stream_.get()));
  const Status launched = Launch(n);
  const Status ended = graph.EndCapture(stream_.get());
  SSMKIT_RETURN_IF_ERROR(launched);
  return ended;
}

Status GpuDecoder::Fetch(int64_t n, std::span<float> logits, std::span<int32_t> next) {
  void* stream = stream_.get();
  const int64_t V = config_.vocab_size;
  SSMKIT_RETURN_IF_ERROR(cuda::CopyToHost(next_out_.data(), next_.data(), n * 4, stream));
  const float* rows = static_cast<const float*>(logits_.data());
  for (int64_t r = 0; r < n && !logits.empty(); ++r) {
    SSMKIT_RETURN_IF_ERROR(
        cuda::CopyToHost(logits.data() + order_[r] * V, rows + r * V, V * 4, stream));
  }
  SSMKIT_RETURN_IF_ERROR(cuda::SynchronizeStream(stream));
  const int32_t* ids = static_cast<const int32_t*>(next_out_.data());
  for (int64_t r = 0; r < n && !next.empty(); ++r) next[order_[r]] = ids[r];
  return Status::Ok();
}

Status GpuDecoder::Prefill(const std::vector<std::vector<int32_t>>& prompts,
                           std::span<float> logits) {
  const int64_t B = static_cast<int64_t>(prompts.size()), V = config_.vocab_size;
  auto length = [&](int64_t r) { return static_cast<int64_t>(prompts[order_[r]].size()); };
  StreamScope scope(stream_.get());
  void* stream = stream_.get();
  batch_ = 0;  // a failure below leaves no usable batch
  order_.resize(static_cast<size_t>(B));
  std::iota(order_.begin(), order_.end(), 0);
  std::stable_sort(order_.begin(), order_.end(),
                   [&](int32_t a, int32_t b) { return prompts[a].size() > prompts[b].size(); });
  const int64_t L = length(0);
  SSMKIT_RETURN_IF_ERROR(states_.ClearOnDevice(0, B, stream));
  // Every step's ids, time-major (L, B) in row order, uploaded at once: each step copies its
  // row on the device, so the host waits only where a prompt ends (for its logits).
  std::vector<int32_t> ids;
  cuda::DeviceMemory all;
  try {
    ids.assign(static_cast<size_t>(L * B), 0);
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("prefill: out of memory for " + std::to_string(L * B) + " ids");
  }
  for (int64_t r = 0; r < B; ++r) {
    for (int64_t t = 0; t < length(r); ++t) ids[t * B + r] = prompts[order_[r]][t];
  }
  SSMKIT_RETURN_IF_ERROR(all.Allocate("prefill: token ids", L * B * 4));
  SSMKIT_RETURN_IF_ERROR(cuda::CopyToDevice(all.data(), ids.data(), L * B * 4, stream));
  const float* rows = static_cast<const float*>(logits_.data());
  int64_t n = B;  // rows still running: those whose prompt is longer than t
  for (int64_t t = 0; t < L; ++t) {
    while (length(n - 1) <= t) --n;
    SSMKIT_RETURN_IF_ERROR(cuda::CopyOnDevice(
        tokens_.data(), static_cast<const int32_t*>(all.data()) + t * B, n * 4, stream));
    SSMKIT_RETURN_IF_ERROR(Step(n));
    for (int64_t r = 0; r < n; ++r) {
      if (length(r) != t + 1) continue;
      // To pageable memory: returns once the step is done and the row copied.
      SSMKIT_RETURN_IF_ERROR(
          cuda::CopyToHost(logits.data() + order_[r] * V, rows + r * V, V * 4, stream));
    }
  }
  SSMKIT_RETURN_IF_ERROR(cuda::SynchronizeStream(stream));
  batch_ = B;
  return Status::Ok();
}

Status GpuDecoder::Decode(std::span<const int32_t> tokens, std::span<float> logits,
                          std::span<int32_t> next) {
  const int64_t n = batch_;
  if (n == 0 || static_cast<int64_t>(tokens.size()) != n) {
    return Status::Internal("gpu decoder: decode without a prefilled batch of that size");
  }
  StreamScope scope(stream_.get());
  int32_t* in = static_cast<int32_t*>(tokens_in_.data());
  for (int64_t r = 0; r < n; ++r) in[r] = tokens[order_[r]];
  SSMKIT_RETURN_IF_ERROR(cuda::CopyToDevice(tokens_.data(), in, n * 4, stream_.get()));
  SSMKIT_RETURN_IF_ERROR(Step(n));
  return Fetch(n, logits, next);
}

}  // namespace ssmkit::model
