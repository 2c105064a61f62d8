// After warm-up, a decode step (the model's Decode and the sampler) performs no heap allocation.
// This executable replaces the global operator new / delete with counting versions; the count
// is taken over many decode steps of Mamba-1 and Mamba-2 models, f32 and bf16 weights, batch 1
// and 3, greedy and sampled, with 2 threads so the parallel paths (and their per-thread
// workspaces) run. malloc calls made directly by C libraries are not seen here; the library's
// own buffers all come from operator new (std::vector, make_unique).
#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "random_model_config.hpp"
#include "ssmkit/attention.hpp"
#include "ssmkit/mlp.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/rope.hpp"
#include "ssmkit/sampler.hpp"
#include "ssmkit/threads.hpp"
#include "test_util.hpp"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};

void* Allocate(std::size_t n, std::size_t align = 0) {
  if (g_counting.load(std::memory_order_relaxed))
    g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = align > alignof(std::max_align_t)
                ? std::aligned_alloc(align, (n + align - 1) / align * align)
                : std::malloc(n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) { return Allocate(n); }
void* operator new[](std::size_t n) { return Allocate(n); }
void* operator new(std::size_t n, std::align_val_t a) {
  return Allocate(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return Allocate(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return Allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return Allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace ssmkit::testing {
namespace {

// A small model, but with an LM head and projections large enough to be split over threads.
ModelConfig SmallConfig(ModelArch arch) {
  return arch == ModelArch::kMamba1 ? RandomModelConfig(arch, {128, 2, 1000, 16})
                                    : RandomModelConfig(arch, {128, 2, 1000, 32, 8, 2, 16});
}

void ExpectNoAllocationInDecode(const Model& model, int64_t batch, const SamplerOptions& sampling);

void ExpectNoAllocationInDecode(const ModelConfig& config, DType dtype, int64_t batch,
                                const SamplerOptions& sampling) {
  SCOPED_TRACE(std::string(ModelArchName(config.arch)) + " " + DTypeName(dtype));
  std::unique_ptr<Model> model;
  ASSERT_TRUE(Model::Random(config, dtype, 7, &model).ok());
  ExpectNoAllocationInDecode(*model, batch, sampling);
}

// Decode steps of `model` (prompts of 5 + 3 b tokens, 22 steps: at B = 3 the last slot of an
// attention model crosses into a new 32-token KV block during the counted steps).
void ExpectNoAllocationInDecode(const Model& model, int64_t batch, const SamplerOptions& sampling) {
  SCOPED_TRACE("B=" + std::to_string(batch) +
               " temperature=" + std::to_string(sampling.temperature));
  const ModelConfig& config = model.config();
  std::unique_ptr<Session> session;
  ASSERT_TRUE(Session::Create(model, batch, &session).ok());
  Sampler sampler;
  ASSERT_TRUE(Sampler::Create(sampling, config.vocab_size, &sampler).ok());
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t b = 0; b < batch; ++b) prompts.push_back(std::vector<int32_t>(5 + 3 * b, 17 + b));
  const int64_t V = config.vocab_size;
  std::vector<float> logits(batch * V);
  std::vector<int32_t> next(batch);
  ASSERT_TRUE(session->Prefill(prompts, logits).ok());
  auto step = [&] {
    for (int64_t b = 0; b < batch; ++b)
      next[b] = sampler.Sample(std::span<const float>(logits).subspan(b * V, V));
    return session->Decode(next, logits);
  };
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(step().ok());  // warm-up: per-thread workspaces grow
  g_allocations = 0;
  g_counting = true;
  bool ok = true;
  for (int i = 0; i < 20; ++i) ok = ok && step().ok();
  g_counting = false;
  EXPECT_TRUE(ok);
  EXPECT_EQ(g_allocations.load(), 0) << "heap allocations during 20 decode steps";
}

// Decoding a scattered subset of slots ({2, 0}: their states gathered and scattered around the
// ops) allocates nothing either.
void ExpectNoAllocationInScatteredDecode(const ModelConfig& config) {
  SCOPED_TRACE(std::string(ModelArchName(config.arch)) + " slots {2, 0}");
  std::unique_ptr<Model> model;
  ASSERT_TRUE(Model::Random(config, DType::kF32, 7, &model).ok());
  std::unique_ptr<Session> session;
  ASSERT_TRUE(Session::Create(*model, 3, &session).ok());
  const int64_t V = config.vocab_size;
  std::vector<float> logits(3 * V);
  const std::vector<int32_t> slots = {2, 0};
  ASSERT_TRUE(session->PrefillSlots(slots, {{1, 2, 3}, {4, 5}}, logits).ok());
  std::vector<int32_t> next = {6, 7};
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(session->DecodeSlots(slots, next, logits).ok());
  g_allocations = 0;
  g_counting = true;
  bool ok = true;
  for (int i = 0; i < 20; ++i) ok = ok && session->DecodeSlots(slots, next, logits).ok();
  g_counting = false;
  EXPECT_TRUE(ok);
  EXPECT_EQ(g_allocations.load(), 0) << "heap allocations during 20 decode steps";
}

TEST(DecodeAllocations, NoneAfterWarmUp) {
  SetNumThreads(2);
  const SamplerOptions greedy{};
  const SamplerOptions sampled{0.9f, 40, 0.9f, 5};
  for (ModelArch arch : {ModelArch::kMamba1, ModelArch::kMamba2}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      ExpectNoAllocationInDecode(SmallConfig(arch), dtype, 1, greedy);
      ExpectNoAllocationInDecode(SmallConfig(arch), dtype, 3, sampled);
    }
    ExpectNoAllocationInScatteredDecode(SmallConfig(arch));
  }
  SetNumThreads(0);
}

// The hybrid families' fixtures: attention over the paged KV cache, MLPs, MoE, Falcon-H1's
// parallel blocks, Zamba2's shared blocks.
TEST(DecodeAllocations, HybridsNoneAfterWarmUp) {
  SetNumThreads(2);
  const SamplerOptions greedy{};
  for (const char* name : {"granitemoehybrid-moe", "bamba", "nemotron_h", "nemotron_h-moe",
                           "nemotron_h-moe-latent", "falcon_h1-norm", "jamba", "zamba2"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Model> model;
    const Status s = Model::Load(std::string(SSMKIT_FIXTURES_DIR) + "/models/" + name, &model);
    ASSERT_TRUE(s.ok()) << s.message();
    ExpectNoAllocationInDecode(*model, 1, greedy);
    ExpectNoAllocationInDecode(*model, 3, greedy);
  }
  SetNumThreads(0);
}

// The MLP and MoE ops (a hybrid model's feed-forward blocks) allocate nothing once warm, at
// decode sizes (T = 1 and 3), bf16 weights, 2 threads, every optional output on.
TEST(DecodeAllocations, MlpAndMoeNoneAfterWarmUp) {
  SetNumThreads(2);
  Rng rng(FreshSeed());
  constexpr int64_t d = 256, F = 1024, E = 8, Fe = 256, k = 2, Fs = 512;
  std::vector<HostTensor> tensors;
  tensors.reserve(64);
  auto weight = [&](std::vector<int64_t> shape) -> Tensor {
    tensors.emplace_back(std::move(shape), DType::kBF16);
    tensors.back().Fill(rng.NormalVec(tensors.back().numel(), 0.05));
    return tensors.back().view();
  };
  const MlpWeights mlp{weight({F, d}), weight({F, d}), weight({d, F})};
  std::vector<MlpWeights> experts;
  for (int64_t e = 0; e < E; ++e)
    experts.push_back({weight({Fe, d}), weight({Fe, d}), weight({d, Fe})});
  const MlpWeights shared{weight({Fs, d}), weight({Fs, d}), weight({d, Fs})};
  const Tensor router = weight({E, d});
  for (int64_t T : {1, 3}) {
    HostTensor x({T, d}, DType::kF32), out({T, d}, DType::kF32), logits({T, E}, DType::kF32),
        counts({E}, DType::kI64), index({T, k}, DType::kI32), top({T, k}, DType::kF32);
    x.Fill(rng.NormalVec(T * d));
    MoeOptions moe;
    moe.top_k = k;
    auto step = [&] {
      const bool mlp_ok = MlpForward({x.view(), mlp}, out.view()).ok();
      const MoeInputs in{x.view(), router, Tensor{}, experts, shared};
      const MoeOutputs outs{out.view(), logits.view(), counts.view(), index.view(), top.view()};
      return mlp_ok && MoeForward(in, outs, moe).ok();
    };
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(step());  // warm-up: workspaces grow
    g_allocations = 0;
    g_counting = true;
    bool ok = true;
    for (int i = 0; i < 20; ++i) ok = ok && step();
    g_counting = false;
    EXPECT_TRUE(ok);
    EXPECT_EQ(g_allocations.load(), 0) << "heap allocations during 20 MLP + MoE calls, T=" << T;
  }
  SetNumThreads(0);
}

// The counter sees allocations: without this the test above could pass vacuously.
TEST(DecodeAllocations, CounterCounts) {
  g_allocations = 0;
  g_counting = true;
  auto* v = new std::vector<int>(100);
  g_counting = false;
  delete v;
  EXPECT_GE(g_allocations.load(), 2);
}

// An attention layer's decode step on a paged cache (rope on the new q and k, append, paged
// attention), two sequences at ~2000 tokens so that the flash-decoding split and both threads
// run: no allocation once warm, also as the context grows past a split boundary.
TEST(DecodeAllocations, NoneInAttentionDecode) {
  SetNumThreads(2);
  constexpr int64_t B = 2, H = 12, Hk = 4, E = 64, kBlock = 16, kMaxBlocks = 160;
  std::vector<float> q(B * H * E, 0.5f), k(B * Hk * E, 0.25f), v(B * Hk * E, 1.0f), out(B * H * E);
  std::vector<float> k_blocks(B * kMaxBlocks * kBlock * Hk * E), v_blocks(k_blocks.size());
  std::vector<int32_t> table(B * kMaxBlocks), lens{2000, 1500}, positions(B);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  const PagedKv kv{
      Tensor::Contiguous(k_blocks.data(), DType::kF32, {B * kMaxBlocks, kBlock, Hk, E}),
      Tensor::Contiguous(v_blocks.data(), DType::kF32, {B * kMaxBlocks, kBlock, Hk, E}),
      Tensor::Contiguous(table.data(), DType::kI32, {B, kMaxBlocks}),
      Tensor::Contiguous(lens.data(), DType::kI32, {B})};
  const Tensor q_t = Tensor::Contiguous(q.data(), DType::kF32, {B, 1, H, E});
  const Tensor k_t = Tensor::Contiguous(k.data(), DType::kF32, {B, 1, Hk, E});
  const Tensor v_t = Tensor::Contiguous(v.data(), DType::kF32, {B, 1, Hk, E});
  const Tensor out_t = Tensor::Contiguous(out.data(), DType::kF32, {B, 1, H, E});
  const Tensor pos_t = Tensor::Contiguous(positions.data(), DType::kI32, {B, 1});
  auto step = [&] {
    for (int64_t b = 0; b < B; ++b) positions[b] = lens[b]++;
    Status s = RopeForward({q_t, k_t, pos_t, Tensor{}}, q_t, k_t);
    if (s.ok()) s = PagedKvAppend(k_t, v_t, kv);
    if (s.ok()) s = AttentionPagedForward(q_t, kv, out_t);
    return s.ok();
  };
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(step());  // warm-up
  g_allocations = 0;
  g_counting = true;
  bool ok = true;
  for (int i = 0; i < 60; ++i) ok = ok && step();  // sequence 0 crosses 2048: one more piece
  g_counting = false;
  EXPECT_TRUE(ok);
  EXPECT_EQ(g_allocations.load(), 0) << "heap allocations during 60 attention decode steps";
  SetNumThreads(0);
}

}  // namespace
}  // namespace ssmkit::testing
