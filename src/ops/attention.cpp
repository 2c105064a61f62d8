// Attention (dense forward and backward, paged KV append and paged forward): argument checking,
// the index values of kv_start / seq_lens / block_table checked before anything is written,
// then dispatch to the CPU kernels (CUDA: not yet, kUnsupported). Every rule here has a test in
// tests/attention_errors_test.cpp.
#include "ssmkit/attention.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "cpu/attention.hpp"
#include "ops/check.hpp"
#include "ops/tensor_span.hpp"
#include "params/attention_params.hpp"

namespace ssmkit {
namespace {

constexpr const char* kForwardOp = "attention";
constexpr const char* kBackwardOp = "attention_backward";
constexpr const char* kPagedOp = "attention_paged";
constexpr const char* kAppendOp = "paged_kv_append";
constexpr int64_t kMaxKeys = std::numeric_limits<int32_t>::max();

HeadsSeqView MakeView(const Tensor& t) {
  if (!t.defined()) return {};
  return {t.data, t.dtype, t.strides[0], t.strides[1], t.strides[2]};
}

Status NotOnCuda(const char* op) {
  return Status::Unsupported(std::string(op) +
                             ": CUDA tensors are not supported yet (attention and the paged KV "
                             "cache run on the CPU only)");
}

Status CheckOptions(const char* op, const AttentionOptions& o) {
  if (!std::isfinite(o.scale) || o.scale < 0.0f) {
    char given[32];
    std::snprintf(given, sizeof given, "%g", static_cast<double>(o.scale));
    return check::Mismatch(op, "options.scale", "a finite value >= 0 (0: 1/sqrt(E))", given);
  }
  if (o.window < 0) {
    return check::Mismatch(op, "options.window", "a window >= 0 (0: none)",
                           std::to_string(o.window));
  }
  return Status::Ok();
}

// A rank-4 tensor whose every dimension is >= 1; its shape is then read by the caller.
Status CheckRank4(const char* op, const char* name, const Tensor& t, const char* legend) {
  if (!t.defined()) return check::Mismatch(op, name, std::string("a tensor ") + legend, "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(op, name, t, {4}));
  for (int d = 0; d < 4; ++d) {
    if (t.shape[d] < 1) {
      return check::Mismatch(op, name, std::string("every dimension of ") + legend + " >= 1",
                             t.shape_string());
    }
  }
  return Status::Ok();
}

// kv heads Hk of k (or the cache) dividing the query heads H.
Status CheckGroups(const char* op, const char* name, int64_t heads, int64_t kv_heads) {
  if (heads % kv_heads == 0) return Status::Ok();
  return check::Mismatch(op, name, "kv heads Hk dividing H = " + std::to_string(heads),
                         "Hk = " + std::to_string(kv_heads));
}

// An output: shape, dtype, its own addresses, and memory apart from every input.
Status CheckOutput(const char* op, const char* name, const Tensor& t, check::ShapeSpec spec,
                   std::initializer_list<DType> dtypes,
                   std::initializer_list<check::NamedTensor> inputs) {
  SSMKIT_RETURN_IF_ERROR(check::Tensor(op, name, t, spec, dtypes));
  SSMKIT_RETURN_IF_ERROR(check::Writable(op, name, t));
  for (const check::NamedTensor& in : inputs) {
    SSMKIT_RETURN_IF_ERROR(check::Disjoint(op, name, t, in.name, in.tensor));
  }
  return Status::Ok();
}

// q, k, v, kv_start and the options of the dense forms; fills the shape and input fields.
Status CheckDenseInputs(const char* op, const AttentionInputs& in, const AttentionOptions& o,
                        AttentionParams* p) {
  SSMKIT_RETURN_IF_ERROR(CheckOptions(op, o));
  SSMKIT_RETURN_IF_ERROR(CheckRank4(op, "q", in.q, "(B, L, H, E)"));
  SSMKIT_RETURN_IF_ERROR(CheckRank4(op, "k", in.k, "(B, S, Hk, E)"));
  SSMKIT_RETURN_IF_ERROR(CheckRank4(op, "v", in.v, "(B, S, Hk, Ev)"));
  const int64_t B = in.q.shape[0], L = in.q.shape[1], H = in.q.shape[2], E = in.q.shape[3];
  const int64_t S = in.k.shape[1], Hk = in.k.shape[2], Ev = in.v.shape[3];
  const auto io = {DType::kF32, DType::kBF16};
  SSMKIT_RETURN_IF_ERROR(check::Tensor(op, "q", in.q, {"(B, L, H, E)", {B, L, H, E}}, io));
  if (S < L || S > kMaxKeys) {
    return check::Mismatch(op, "k",
                           "key length S in [L, 2^31 - 1] = [" + std::to_string(L) + ", " +
                               std::to_string(kMaxKeys) + "]",
                           "S = " + std::to_string(S));
  }
  SSMKIT_RETURN_IF_ERROR(CheckGroups(op, "k", H, Hk));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(op, "k", in.k, {"(B, S, Hk, E)", {B, S, Hk, E}}, io));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(op, "v", in.v, {"(B, S, Hk, Ev)", {B, S, Hk, Ev}}, io));
  SSMKIT_RETURN_IF_ERROR(check::Optional(op, "kv_start", in.kv_start, {"(B)", {B}}, {DType::kI32}));
  *p = {};
  p->batch = B;
  p->q_len = L;
  p->heads = H;
  p->kv_heads = Hk;
  p->head_dim = E;
  p->v_head_dim = Ev;
  p->kv_len = S;
  p->scale = o.scale > 0.0f ? o.scale : 1.0f / std::sqrt(static_cast<float>(E));
  p->window = o.window;
  p->q = MakeView(in.q);
  p->k = MakeView(in.k);
  p->v = MakeView(in.v);
  if (in.kv_start.defined()) {
    p->kv_start = static_cast<const int32_t*>(in.kv_start.data);
    p->kv_start_stride = in.kv_start.strides[0];
  }
  return Status::Ok();
}

// kv_start's values, read on the host (CPU tensors only).
Status CheckKvStartValues(const char* op, const AttentionParams& p) {
  if (!p.kv_start) return Status::Ok();
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t start = p.FirstKey(b);
    if (start < 0 || start > p.kv_len) {
      return check::Mismatch(op, "kv_start",
                             "values in [0, S] = [0, " + std::to_string(p.kv_len) + "]",
                             std::to_string(start) + " at b = " + std::to_string(b));
    }
  }
  return Status::Ok();
}

// lse (B, H, L) f32 with L contiguous.
check::ShapeSpec LseSpec(const AttentionParams& p) {
  return {"(B, H, L)", {p.batch, p.heads, p.q_len}};
}

void SetLse(const Tensor& lse, AttentionParams* p) {
  if (!lse.defined()) return;
  p->lse = static_cast<float*>(lse.data);
  p->lse_stride_batch = lse.strides[0];
  p->lse_stride_head = lse.strides[1];
}

Status CheckCache(const char* op, const PagedKv& kv, int64_t batch, PagedKvView* c,
                  int64_t* kv_heads, int64_t* E, int64_t* Ev) {
  SSMKIT_RETURN_IF_ERROR(
      CheckRank4(op, "kv.k_blocks", kv.k_blocks, "(num_blocks, block_size, Hk, E)"));
  SSMKIT_RETURN_IF_ERROR(
      CheckRank4(op, "kv.v_blocks", kv.v_blocks, "(num_blocks, block_size, Hk, Ev)"));
  const int64_t NB = kv.k_blocks.shape[0], BS = kv.k_blocks.shape[1];
  *kv_heads = kv.k_blocks.shape[2];
  *E = kv.k_blocks.shape[3];
  *Ev = kv.v_blocks.shape[3];
  SSMKIT_RETURN_IF_ERROR(check::Tensor(op, "kv.k_blocks", kv.k_blocks,
                                       {"(num_blocks, block_size, Hk, E)", {NB, BS, *kv_heads, *E}},
                                       {DType::kF32, DType::kBF16}));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(
      op, "kv.v_blocks", kv.v_blocks,
      {"(num_blocks, block_size, Hk, Ev)", {NB, BS, *kv_heads, *Ev}}, {kv.k_blocks.dtype}));
  if (!kv.block_table.defined()) {
    return check::Mismatch(op, "kv.block_table", "a tensor (B, max_blocks_per_seq)", "null");
  }
  SSMKIT_RETURN_IF_ERROR(check::RankIn(op, "kv.block_table", kv.block_table, {2}));
  const int64_t MB = kv.block_table.shape[1];
  SSMKIT_RETURN_IF_ERROR(check::Tensor(op, "kv.block_table", kv.block_table,
                                       {"(B, max_blocks_per_seq)", {batch, MB}}, {DType::kI32}));
  if (MB < 1) {
    return check::Mismatch(op, "kv.block_table", "max_blocks_per_seq >= 1",
                           kv.block_table.shape_string());
  }
  SSMKIT_RETURN_IF_ERROR(
      check::Tensor(op, "kv.seq_lens", kv.seq_lens, {"(B)", {batch}}, {DType::kI32}));
  c->k_blocks = MakeView(kv.k_blocks);
  c->v_blocks = MakeView(kv.v_blocks);
  c->block_table = static_cast<const int32_t*>(kv.block_table.data);
  c->table_stride = kv.block_table.strides[0];
  c->seq_lens = static_cast<const int32_t*>(kv.seq_lens.data);
  c->seq_lens_stride = kv.seq_lens.strides[0];
  c->block_size = BS;
  c->num_blocks = NB;
  return Status::Ok();
}

// seq_lens within the table's capacity, and every block entry a sequence uses in [0, NB).
Status CheckCacheValues(const char* op, const PagedKvView& c, int64_t batch, int64_t max_blocks) {
  const int64_t capacity = max_blocks * c.block_size;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t len = c.seq_lens[b * c.seq_lens_stride];
    if (len < 0 || len > capacity) {
      return check::Mismatch(
          op, "kv.seq_lens",
          "values in [0, max_blocks_per_seq * block_size] = [0, " + std::to_string(capacity) + "]",
          std::to_string(len) + " at b = " + std::to_string(b));
    }
    for (int64_t i = 0; i < (len + c.block_size - 1) / c.block_size; ++i) {
      const int64_t block = c.block_table[b * c.table_stride + i];
      if (block < 0 || block >= c.num_blocks) {
        return check::Mismatch(op, "kv.block_table",
                               "block ids in [0, num_blocks) = [0, " +
                                   std::to_string(c.num_blocks) +
                                   ") for the blocks a sequence uses",
                               std::to_string(block) + " at (b, i) = (" + std::to_string(b) + ", " +
                                   std::to_string(i) + ")");
      }
    }
  }
  return Status::Ok();
}

// The blocks a PagedKvAppend writes: no block written by two sequences (they would race).
// `writer` is per thread and reset after use: no allocation once it has grown (decode).
Status CheckAppendTargets(const PagedAppendParams& p) {
  thread_local std::vector<int64_t> writer;
  const PagedKvView& c = p.cache;
  if (static_cast<int64_t>(writer.size()) < c.num_blocks) {
    writer.assign(static_cast<size_t>(c.num_blocks), -1);
  }
  auto blocks_of = [&](int64_t b, auto&& fn) {  // fn(block id) for each block b writes
    const int64_t len = c.seq_lens[b * c.seq_lens_stride];
    const int64_t first = std::max<int64_t>(0, len - p.new_len);
    for (int64_t i = first / c.block_size; len > first && i <= (len - 1) / c.block_size; ++i) {
      if (!fn(c.block_table[b * c.table_stride + i])) return false;
    }
    return true;
  };
  Status status = Status::Ok();
  int64_t b = 0;
  for (; b < p.batch && status.ok(); ++b) {
    blocks_of(b, [&](int64_t block) {
      if (writer[block] >= 0 && writer[block] != b) {
        status = check::Mismatch(kAppendOp, "kv.block_table", "blocks written by one sequence only",
                                 "block " + std::to_string(block) +
                                     " written by b = " + std::to_string(writer[block]) +
                                     " and b = " + std::to_string(b));
        return false;
      }
      writer[block] = b;
      return true;
    });
  }
  for (int64_t r = 0; r < b; ++r) {
    blocks_of(r, [&](int64_t block) { return (writer[block] = -1), true; });
  }
  return status;
}

}  // namespace

Status AttentionForward(const AttentionInputs& inputs, const Tensor& out, const Tensor& lse,
                        const AttentionOptions& options) {
  const char* op = kForwardOp;
  Device device;
  SSMKIT_RETURN_IF_ERROR(check::Devices(
      op, {{"q", inputs.q}, {"k", inputs.k}, {"v", inputs.v}, {"kv_start", inputs.kv_start}},
      {{"out", out}, {"lse", lse}}, &device));
  AttentionParams p;
  SSMKIT_RETURN_IF_ERROR(CheckDenseInputs(op, inputs, options, &p));
  const std::initializer_list<check::NamedTensor> ins = {
      {"q", inputs.q}, {"k", inputs.k}, {"v", inputs.v}, {"kv_start", inputs.kv_start}};
  SSMKIT_RETURN_IF_ERROR(CheckOutput(op, "out", out,
                                     {"(B, L, H, Ev)", {p.batch, p.q_len, p.heads, p.v_head_dim}},
                                     {DType::kF32, DType::kBF16}, ins));
  if (lse.defined()) {
    SSMKIT_RETURN_IF_ERROR(CheckOutput(op, "lse", lse, LseSpec(p), {DType::kF32}, ins));
    SSMKIT_RETURN_IF_ERROR(check::Disjoint(op, "lse", lse, "out", out));
  }
  if (device == Device::kCuda) return NotOnCuda(op);
  SSMKIT_RETURN_IF_ERROR(CheckKvStartValues(op, p));
  p.out = MakeView(out);
  SetLse(lse, &p);
  return check::RunGuarded(op, [&] { return cpu::AttentionForward(p); });
}

Status AttentionBackward(const AttentionInputs& inputs, const Tensor& out, const Tensor& lse,
                         const Tensor& dout, const AttentionGrads& grads,
                         const AttentionOptions& options) {
  const char* op = kBackwardOp;
  Device device;
  SSMKIT_RETURN_IF_ERROR(check::Devices(op,
                                        {{"q", inputs.q},
                                         {"k", inputs.k},
                                         {"v", inputs.v},
                                         {"kv_start", inputs.kv_start},
                                         {"out", out},
                                         {"lse", lse},
                                         {"dout", dout}},
                                        {{"dq", grads.dq}, {"dk", grads.dk}, {"dv", grads.dv}},
                                        &device));
  AttentionBwdParams p;
  SSMKIT_RETURN_IF_ERROR(CheckDenseInputs(op, inputs, options, &p));
  const check::ShapeSpec out_spec{"(B, L, H, Ev)", {p.batch, p.q_len, p.heads, p.v_head_dim}};
  SSMKIT_RETURN_IF_ERROR(check::Tensor(op, "out", out, out_spec, {DType::kF32, DType::kBF16}));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(op, "lse", lse, LseSpec(p), {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(op, "dout", dout, out_spec, {DType::kF32, DType::kBF16}));
  const std::initializer_list<check::NamedTensor> ins = {
      {"q", inputs.q}, {"k", inputs.k}, {"v", inputs.v}, {"kv_start", inputs.kv_start},
      {"out", out},    {"lse", lse},    {"dout", dout}};
  const struct {
    const char* name;
    const Tensor& grad;
    const char* input_name;
    const Tensor& input;
  } outputs[] = {{"dq", grads.dq, "q", inputs.q},
                 {"dk", grads.dk, "k", inputs.k},
                 {"dv", grads.dv, "v", inputs.v}};
  for (const auto& g : outputs) {
    if (!g.grad.defined()) continue;
    SSMKIT_RETURN_IF_ERROR(check::GradLike(op, g.name, g.grad, g.input_name, g.input));
    SSMKIT_RETURN_IF_ERROR(check::Writable(op, g.name, g.grad));
    for (const check::NamedTensor& in : ins) {
      SSMKIT_RETURN_IF_ERROR(check::Disjoint(op, g.name, g.grad, in.name, in.tensor));
    }
  }
  SSMKIT_RETURN_IF_ERROR(check::Disjoint(op, "dk", grads.dk, "dq", grads.dq));
  SSMKIT_RETURN_IF_ERROR(check::Disjoint(op, "dv", grads.dv, "dq", grads.dq));
  SSMKIT_RETURN_IF_ERROR(check::Disjoint(op, "dv", grads.dv, "dk", grads.dk));
  if (device == Device::kCuda) return NotOnCuda(op);
  SSMKIT_RETURN_IF_ERROR(CheckKvStartValues(op, p));
  p.out = MakeView(out);
  SetLse(lse, &p);
  p.dout = MakeView(dout);
  p.dq = MakeView(grads.dq);
  p.dk = MakeView(grads.dk);
  p.dv = MakeView(grads.dv);
  return check::RunGuarded(op, [&] { return cpu::AttentionBackward(p); });
}

Status PagedKvAppend(const Tensor& k, const Tensor& v, const PagedKv& kv) {
  const char* op = kAppendOp;
  Device device;
  SSMKIT_RETURN_IF_ERROR(check::Devices(
      op, {{"k", k}, {"v", v}, {"kv.block_table", kv.block_table}, {"kv.seq_lens", kv.seq_lens}},
      {{"kv.k_blocks", kv.k_blocks}, {"kv.v_blocks", kv.v_blocks}}, &device));
  SSMKIT_RETURN_IF_ERROR(CheckRank4(op, "k", k, "(B, L, Hk, E)"));
  PagedAppendParams p;
  p.batch = k.shape[0];
  p.new_len = k.shape[1];
  SSMKIT_RETURN_IF_ERROR(
      CheckCache(op, kv, p.batch, &p.cache, &p.kv_heads, &p.head_dim, &p.v_head_dim));
  const auto io = {DType::kF32, DType::kBF16};
  SSMKIT_RETURN_IF_ERROR(check::Tensor(
      op, "k", k, {"(B, L, Hk, E)", {p.batch, p.new_len, p.kv_heads, p.head_dim}}, io));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(
      op, "v", v, {"(B, L, Hk, Ev)", {p.batch, p.new_len, p.kv_heads, p.v_head_dim}}, io));
  const std::initializer_list<check::NamedTensor> ins = {
      {"k", k}, {"v", v}, {"kv.block_table", kv.block_table}, {"kv.seq_lens", kv.seq_lens}};
  for (const check::NamedTensor& blocks :
       {check::NamedTensor{"kv.k_blocks", kv.k_blocks}, {"kv.v_blocks", kv.v_blocks}}) {
    SSMKIT_RETURN_IF_ERROR(check::Writable(op, blocks.name, blocks.tensor));
    for (const check::NamedTensor& in : ins) {
      SSMKIT_RETURN_IF_ERROR(check::Disjoint(op, blocks.name, blocks.tensor, in.name, in.tensor));
    }
  }
  SSMKIT_RETURN_IF_ERROR(
      check::Disjoint(op, "kv.v_blocks", kv.v_blocks, "kv.k_blocks", kv.k_blocks));
  if (device == Device::kCuda) return NotOnCuda(op);
  SSMKIT_RETURN_IF_ERROR(CheckCacheValues(op, p.cache, p.batch, kv.block_table.shape[1]));
  SSMKIT_RETURN_IF_ERROR(CheckAppendTargets(p));
  p.k = MakeView(k);
  p.v = MakeView(v);
  return check::RunGuarded(op, [&] { return cpu::PagedKvAppend(p); });
}

Status AttentionPagedForward(const Tensor& q, const PagedKv& kv, const Tensor& out,
                             const AttentionOptions& options) {
  const char* op = kPagedOp;
  Device device;
  SSMKIT_RETURN_IF_ERROR(check::Devices(op,
                                        {{"q", q},
                                         {"kv.k_blocks", kv.k_blocks},
                                         {"kv.v_blocks", kv.v_blocks},
                                         {"kv.block_table", kv.block_table},
                                         {"kv.seq_lens", kv.seq_lens}},
                                        {{"out", out}}, &device));
  SSMKIT_RETURN_IF_ERROR(CheckOptions(op, options));
  SSMKIT_RETURN_IF_ERROR(CheckRank4(op, "q", q, "(B, L, H, E)"));
  AttentionParams p;
  p.batch = q.shape[0];
  p.q_len = q.shape[1];
  p.heads = q.shape[2];
  SSMKIT_RETURN_IF_ERROR(
      CheckCache(op, kv, p.batch, &p.cache, &p.kv_heads, &p.head_dim, &p.v_head_dim));
  SSMKIT_RETURN_IF_ERROR(CheckGroups(op, "kv.k_blocks", p.heads, p.kv_heads));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(op, "q", q,
                                       {"(B, L, H, E)", {p.batch, p.q_len, p.heads, p.head_dim}},
                                       {DType::kF32, DType::kBF16}));
  SSMKIT_RETURN_IF_ERROR(CheckOutput(op, "out", out,
                                     {"(B, L, H, Ev)", {p.batch, p.q_len, p.heads, p.v_head_dim}},
                                     {DType::kF32, DType::kBF16},
                                     {{"q", q},
                                      {"kv.k_blocks", kv.k_blocks},
                                      {"kv.v_blocks", kv.v_blocks},
                                      {"kv.block_table", kv.block_table},
                                      {"kv.seq_lens", kv.seq_lens}}));
  if (device == Device::kCuda) return NotOnCuda(op);
  SSMKIT_RETURN_IF_ERROR(CheckCacheValues(op, p.cache, p.batch, kv.block_table.shape[1]));
  p.scale = options.scale > 0.0f ? options.scale : 1.0f / std::sqrt(static_cast<float>(p.head_dim));
  p.window = options.window;
  p.paged = true;
  p.q = MakeView(q);
  p.out = MakeView(out);
  return check::RunGuarded(op, [&] { return cpu::AttentionForward(p); });
}

}  // namespace ssmkit
