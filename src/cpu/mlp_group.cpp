// A group of MLPs on their own rows, forward and backward, on the linear op's row kernels
// (cpu::LinearRows: the matrix-vector kernel for <= 8 rows, OpenBLAS sgemm otherwise) and
// single-threaded sgemm calls (blas::Gemm) for the backward's products.
// Dimension legend: R rows of a member, d model width, F a member's hidden width, S hidden
// features per sub-panel, B thread blocks.
//
// Work split. The members' weight rows are laid end to end (member 0's F rows, member 1's,
// ...) and cut into B contiguous pieces of equal cost, a row of member m costing
// R_m + kWeightRowCost (its rows of x, plus reading the weight row itself: what dominates at
// decode). Pieces are whole multiples of kGranule rows. The split depends only on the members'
// shapes and B, so the same inputs and thread count give the same bits.
//
// Forward, two regions: (1) over hidden features: gate and up products of a piece's rows,
// S at a time, each followed at once by the activation while the block is in cache, giving
// h (R, F) per member; (2) over model features: down(h) * down_multiplier into y.
//
// Backward, one region over hidden features plus a reduction. For each sub-panel of S hidden
// features of a member, recomputed from x: a = gate-side pre-activation, u, h; then
//   dh = dy' Wd[:, S]                       (R, S), dy' = dy dm (the sgemm's alpha)
//   drw[r] += <h[r], dh[r]>; h, dh *= rw    (MoE routing weights, when given)
//   ddown[:, S] (+)= dy'^T h                 dg, du from dh (ActivateBackward)
//   dgate[S, :] (+)= dg^T x,  dup[S, :] (+)= du^T x,  biases: column sums
//   dx_partial[block] (+)= dg Wg[S, :] + du Wu[S, :]
// Every weight-gradient element belongs to one piece, so one thread writes it; dx sums over
// all hidden features, so each block keeps a partial and the blocks that touched a member
// are added in block order afterwards (with ddown_bias, in a region over model features).
#include "cpu/blas.hpp"
#include "cpu/mlp_group.hpp"

#include <algorithm>
#include <atomic>
#include <new>
#include <vector>

#include "core/dtype.hpp"
#include "core/parallel.hpp"
#include "cpu/linear.hpp"
#include "cpu/mlp_activation.hpp"
#include "params/linear_params.hpp"

namespace ssmkit::cpu {
namespace {

// Below this many weight elements in a region it stays on the calling thread: waking the pool
// costs more than the work. Tuned for speed only.
constexpr int64_t kMinParallelWeights = 1 << 15;
// Pieces are multiples of this many weight rows (the GEMV's row blocks, whole vectors of the
// activation). Tuned for speed only.
constexpr int64_t kGranule = 8;
// Reading a weight row costs about as much as multiplying this many rows of x into it (at
// decode the weights' bandwidth is the cost). Tuned for speed only.
constexpr int64_t kWeightRowCost = 8;
// Hidden features per forward activation pass and per backward sub-panel (S): a block of S
// columns stays in L2 between the products and the elementwise pass. Tuned for speed only.
constexpr int64_t kPanel = 128;
// Floats of hidden values per chunk of rows. Tuned for speed only.
constexpr int64_t kChunkFloats = int64_t{1} << 20;

int64_t CeilDiv(int64_t a, int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; }

// Calls fn(member, begin, end) for the pieces of block b of `blocks`, in member order. Member
// m has count(m) rows costing cost(m) each.
template <class Count, class Cost, class Fn>
void ForEachPiece(int64_t members, Count&& count, Cost&& cost, int blocks, int b, Fn&& fn) {
  int64_t total = 0;
  for (int64_t m = 0; m < members; ++m) total += CeilDiv(count(m), kGranule) * cost(m);
  const int64_t lo = total / blocks * b + total % blocks * b / blocks;
  const int64_t hi = total / blocks * (b + 1) + total % blocks * (b + 1) / blocks;
  int64_t start = 0;  // cumulative cost before member m
  for (int64_t m = 0; m < members && start < hi; ++m) {
    const int64_t units = CeilDiv(count(m), kGranule), c = cost(m);
    const int64_t u0 = std::min(CeilDiv(lo - start, c), units);
    const int64_t u1 = std::min(CeilDiv(hi - start, c), units);
    if (u0 < u1) fn(m, u0 * kGranule, std::min(u1 * kGranule, count(m)));
    start += units * c;
  }
}

// Blocks for a region over `weights` weight elements.
int RegionBlocks(int64_t weights) { return weights < kMinParallelWeights ? 1 : NumThreads(); }

// Runs body(block) for each of `blocks` blocks on the library's threads (ParallelFor), with
// OpenBLAS single-threaded inside; a std::bad_alloc from a worker is reported after the region.
template <class Body>
Status RunBlocks(int blocks, Body&& body) {
  std::atomic<bool> out_of_memory{false};
  {
    blas::SingleThread single;
    ParallelFor(blocks, [&](int64_t begin, int64_t end, int) {
      for (int64_t b = begin; b < end; ++b) {
        try {
          body(static_cast<int>(b));
        } catch (const std::bad_alloc&) {
          out_of_memory.store(true, std::memory_order_relaxed);
        }
      }
    });
  }
  if (out_of_memory) return Status::OutOfMemory("mlp: could not allocate a weight panel");
  return Status::Ok();
}

// x (R, K) times rows of a weight (M, K), as cpu::Linear would: out (R, M).
LinearParams Projection(int64_t rows, int64_t K, int64_t M, const float* x, int64_t x_stride,
                        const void* weight, DType dtype, const float* bias, float* out,
                        int64_t out_stride) {
  LinearParams p;
  p.rows = rows;
  p.in_features = K;
  p.out_features = M;
  p.x = x;
  p.x_stride_row = x_stride;
  p.weight = weight;
  p.weight_dtype = dtype;
  p.bias = bias;
  p.out = out;
  p.out_stride_row = out_stride;
  return p;
}

template <class T>
T* Grown(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

// ------------------------------------------------------------------ forward

struct ForwardWorkspace {
  std::vector<float> gate, up;   // each member's (R, F) block, end to end
  std::vector<int64_t> offsets;  // per member: its first element in gate / up
};

// Hidden features [f0, f1) of member m: gate and up products, then the activation into h
// (the gate block when gated, else the up block).
void HiddenPiece(int64_t d, const MlpOptions& options, const MlpMember& mb, float* gate, float* up,
                 int64_t f0, int64_t f1) {
  const MlpWeightParams& w = mb.weights;
  const int64_t F = w.hidden;
  const LinearParams pu =
      Projection(mb.rows, d, F, mb.x, mb.x_stride, w.up, w.up_dtype, w.up_bias, up, F);
  const LinearParams pg =
      Projection(mb.rows, d, F, mb.x, mb.x_stride, w.gate, w.gate_dtype, w.gate_bias, gate, F);
  for (int64_t s0 = f0; s0 < f1; s0 += kPanel) {
    const int64_t s1 = std::min(s0 + kPanel, f1);
    LinearRows(pu, s0, s1);
    if (w.gated()) LinearRows(pg, s0, s1);
    HiddenBlock hb;
    hb.rows = mb.rows;
    hb.cols = s1 - s0;
    hb.gate = w.gated() ? gate + s0 : nullptr;
    hb.gate_stride = F;
    hb.gate_add = mb.gate_add ? mb.gate_add + s0 : nullptr;
    hb.gate_add_stride = mb.gate_add_stride;
    hb.up = up + s0;
    hb.up_stride = F;
    hb.up_add = mb.up_add ? mb.up_add + s0 : nullptr;
    hb.up_add_stride = mb.up_add_stride;
    ActivateForward(hb, options, w.gated() ? hb.gate : hb.up, F, /*keep_pre=*/false);
  }
}

}  // namespace

int64_t MlpChunkRows(int64_t d, int64_t hidden) {
  return std::max<int64_t>(kGranule, kChunkFloats / std::max(d, hidden));
}

Status MlpGroupForward(int64_t d, const MlpOptions& options, std::span<const MlpMember> members) {
  const int64_t M = static_cast<int64_t>(members.size());
  // The calling thread's workspace, named through a reference: inside a parallel region a
  // thread_local's name would mean the worker's own (empty) instance.
  thread_local ForwardWorkspace storage;
  ForwardWorkspace& ws = storage;
  int64_t* offsets = Grown(ws.offsets, M + 1);
  int64_t weights = 0;
  offsets[0] = 0;
  for (int64_t m = 0; m < M; ++m) {
    offsets[m + 1] = offsets[m] + members[m].rows * members[m].weights.hidden;
    weights += members[m].weights.hidden * d;
  }
  float* gate = Grown(ws.gate, offsets[M]);
  float* up = Grown(ws.up, offsets[M]);
  const int blocks = RegionBlocks(weights);
  auto count_hidden = [&](int64_t m) { return members[m].weights.hidden; };
  auto count_model = [&](int64_t) { return d; };
  auto row_cost = [&](int64_t m) { return members[m].rows + kWeightRowCost; };

  SSMKIT_RETURN_IF_ERROR(RunBlocks(blocks, [&](int b) {
    ForEachPiece(M, count_hidden, row_cost, blocks, b, [&](int64_t m, int64_t f0, int64_t f1) {
      HiddenPiece(d, options, members[m], gate + offsets[m], up + offsets[m], f0, f1);
    });
  }));

  auto down_cost = [&](int64_t m) {
    return (members[m].rows + kWeightRowCost) * members[m].weights.hidden;
  };
  return RunBlocks(blocks, [&](int b) {
    ForEachPiece(M, count_model, down_cost, blocks, b, [&](int64_t m, int64_t i0, int64_t i1) {
      const MlpMember& mb = members[m];
      const MlpWeightParams& w = mb.weights;
      const float* h = (w.gated() ? gate : up) + offsets[m];
      LinearRows(Projection(mb.rows, w.hidden, d, h, w.hidden, w.down, w.down_dtype, w.down_bias,
                            mb.y, mb.y_stride),
                 i0, i1);
      if (options.down_multiplier != 1.0f) {
        for (int64_t r = 0; r < mb.rows; ++r) {
          float* y = mb.y + r * mb.y_stride;
          for (int64_t i = i0; i < i1; ++i) y[i] *= options.down_multiplier;
        }
      }
    });
  });
}

// ------------------------------------------------------------------ backward

namespace {

// One block's scratch: the sub-panel's hidden values and widened weights.
struct PanelScratch {
  float* a;   // (R, S): gate pre-activation, then dg
  float* u;   // (R, S): up value, then du
  float* h;   // (R, S)
  float* dh;  // (R, S)
  float* wg;  // (S, d) widened gate rows (bf16/f16 weights)
  float* wu;  // (S, d) widened up rows
  float* wd;  // (d, S) widened down columns
};

struct BackwardWorkspace {
  std::vector<float> scratch;       // B blocks of PanelScratch
  std::vector<float> dx_partial;    // B blocks of (sum_m R_m, d)
  std::vector<float> drw_partial;   // B blocks of (sum_m R_m)
  std::vector<uint8_t> touched;     // (B, members): block b has a piece of member m
  std::vector<int64_t> row_offset;  // per member: its first row in the partials
};

// f32 weights are used in place; others are widened into the panel: rows [s0, s1) of a
// (F, d) weight, or columns [s0, s1) of a (d, F) one. Returns the matrix and its row stride.
struct Matrix {
  const float* data;
  int64_t stride;
};
Matrix WeightRows(const void* w, DType dtype, int64_t d, int64_t s0, int64_t s1, float* panel) {
  if (dtype == DType::kF32) return {static_cast<const float*>(w) + s0 * d, d};
  WidenToF32(static_cast<const uint8_t*>(w) + s0 * d * DTypeSize(dtype), dtype, (s1 - s0) * d,
             panel);
  return {panel, d};
}
Matrix WeightColumns(const void* w, DType dtype, int64_t d, int64_t F, int64_t s0, int64_t s1,
                     float* panel) {
  if (dtype == DType::kF32) return {static_cast<const float*>(w) + s0, F};
  const int64_t S = s1 - s0, esize = DTypeSize(dtype);
  for (int64_t i = 0; i < d; ++i) {
    WidenToF32(static_cast<const uint8_t*>(w) + (i * F + s0) * esize, dtype, S, panel + i * S);
  }
  return {panel, S};
}

// sum over rows of m (R, S) into bias[0, S): overwritten or accumulated.
void ColumnSums(const float* m, int64_t rows, int64_t cols, float* bias, bool accumulate) {
  for (int64_t c = 0; c < cols; ++c) {
    float sum = accumulate ? bias[c] : 0.0f;
    for (int64_t r = 0; r < rows; ++r) sum += m[r * cols + c];
    bias[c] = sum;
  }
}

void CopyRows(const float* src, int64_t rows, int64_t cols, float* dst, int64_t dst_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(src + r * cols, src + (r + 1) * cols, dst + r * dst_stride);
  }
}

// The backward of hidden features [s0, s1) of member mb (see the file comment). dx_partial:
// this block's (R, d) rows of the member, overwritten when `first_panel`.
void BackwardPanel(int64_t d, const MlpOptions& options, const MlpMember& mb, int64_t s0,
                   int64_t s1, const PanelScratch& ps, float* dx_partial, bool first_panel,
                   float* drw_partial, bool accumulate) {
  const MlpWeightParams& w = mb.weights;
  const int64_t R = mb.rows, F = w.hidden, S = s1 - s0;
  const float dm = options.down_multiplier, beta = accumulate ? 1.0f : 0.0f;
  const MlpWeightGradParams& g = mb.grads;
  const Matrix wu = WeightRows(w.up, w.up_dtype, d, s0, s1, ps.wu);
  const Matrix wg = w.gated() ? WeightRows(w.gate, w.gate_dtype, d, s0, s1, ps.wg) : Matrix{};
  const Matrix wd = WeightColumns(w.down, w.down_dtype, d, F, s0, s1, ps.wd);

  // a, u, h: recomputed as the forward computes them.
  LinearRows(Projection(R, d, S, mb.x, mb.x_stride, wu.data, DType::kF32,
                        w.up_bias ? w.up_bias + s0 : nullptr, ps.u, S),
             0, S);
  if (w.gated()) {
    LinearRows(Projection(R, d, S, mb.x, mb.x_stride, wg.data, DType::kF32,
                          w.gate_bias ? w.gate_bias + s0 : nullptr, ps.a, S),
               0, S);
  }
  HiddenBlock hb;
  hb.rows = R;
  hb.cols = S;
  hb.gate = w.gated() ? ps.a : nullptr;
  hb.gate_stride = S;
  hb.gate_add = mb.gate_add ? mb.gate_add + s0 : nullptr;
  hb.gate_add_stride = mb.gate_add_stride;
  hb.up = ps.u;
  hb.up_stride = S;
  hb.up_add = mb.up_add ? mb.up_add + s0 : nullptr;
  hb.up_add_stride = mb.up_add_stride;
  ActivateForward(hb, options, ps.h, S, /*keep_pre=*/true);

  // dh = dy' Wd[:, S]; routing weights; ddown[:, S] = dy'^T h.
  blas::Gemm(false, false, R, S, d, dm, mb.dy, mb.dy_stride, wd.data, wd.stride, 0.0f, ps.dh, S);
  if (mb.row_weight != nullptr)
    DotAndScaleRows(R, S, ps.h, S, ps.dh, S, mb.row_weight, drw_partial);
  if (g.ddown != nullptr) {
    blas::Gemm(true, false, d, S, R, dm, mb.dy, mb.dy_stride, ps.h, S, beta, g.ddown + s0, F);
  }

  // dg (into a), du (into u); the gate and up weights' gradients.
  ActivateBackward(hb, options, ps.dh, S);
  if (g.dup != nullptr) {
    blas::Gemm(true, false, S, d, R, 1.0f, ps.u, S, mb.x, mb.x_stride, beta, g.dup + s0 * d, d);
  }
  if (g.dup_bias != nullptr) ColumnSums(ps.u, R, S, g.dup_bias + s0, accumulate);
  if (mb.dup_add != nullptr) CopyRows(ps.u, R, S, mb.dup_add + s0, mb.dup_add_stride);
  if (w.gated()) {
    if (g.dgate != nullptr) {
      blas::Gemm(true, false, S, d, R, 1.0f, ps.a, S, mb.x, mb.x_stride, beta, g.dgate + s0 * d, d);
    }
    if (g.dgate_bias != nullptr) ColumnSums(ps.a, R, S, g.dgate_bias + s0, accumulate);
    if (mb.dgate_add != nullptr) CopyRows(ps.a, R, S, mb.dgate_add + s0, mb.dgate_add_stride);
  }

  // dx_partial (+)= du Wu[S, :] + dg Wg[S, :]
  if (dx_partial != nullptr) {
    blas::Gemm(false, false, R, d, S, 1.0f, ps.u, S, wu.data, wu.stride, first_panel ? 0.0f : 1.0f,
               dx_partial, d);
    if (w.gated()) {
      blas::Gemm(false, false, R, d, S, 1.0f, ps.a, S, wg.data, wg.stride, 1.0f, dx_partial, d);
    }
  }
}

}  // namespace

Status MlpGroupBackward(int64_t d, const MlpOptions& options, std::span<const MlpMember> members,
                        bool accumulate) {
  const int64_t M = static_cast<int64_t>(members.size());
  // The calling thread's workspace, named through a reference: inside a parallel region a
  // thread_local's name would mean the worker's own (empty) instance.
  thread_local BackwardWorkspace storage;
  BackwardWorkspace& ws = storage;
  int64_t* row_offset = Grown(ws.row_offset, M + 1);
  int64_t weights = 0, max_rows = 0;
  bool want_dx = false, routed = false;
  row_offset[0] = 0;
  for (int64_t m = 0; m < M; ++m) {
    const MlpMember& mb = members[m];
    row_offset[m + 1] = row_offset[m] + mb.rows;
    weights += mb.weights.hidden * d;
    max_rows = std::max(max_rows, mb.rows);
    want_dx = want_dx || mb.dx != nullptr;
    routed = routed || mb.row_weight != nullptr;
  }
  const int64_t rows = row_offset[M];
  const int blocks = RegionBlocks(weights);
  const int64_t scratch_floats = 4 * max_rows * kPanel + 3 * kPanel * d;
  float* scratch = Grown(ws.scratch, blocks * scratch_floats);
  float* dx_partial = want_dx ? Grown(ws.dx_partial, blocks * rows * d) : nullptr;
  float* drw_partial = routed ? Grown(ws.drw_partial, blocks * rows) : nullptr;
  uint8_t* touched = Grown(ws.touched, blocks * M);
  std::fill(touched, touched + blocks * M, uint8_t{0});
  if (routed) std::fill(drw_partial, drw_partial + blocks * rows, 0.0f);

  auto count_hidden = [&](int64_t m) { return members[m].weights.hidden; };
  auto row_cost = [&](int64_t m) { return members[m].rows + kWeightRowCost; };
  SSMKIT_RETURN_IF_ERROR(RunBlocks(blocks, [&](int b) {
    float* base = scratch + b * scratch_floats;
    const PanelScratch ps{base,
                          base + max_rows * kPanel,
                          base + 2 * max_rows * kPanel,
                          base + 3 * max_rows * kPanel,
                          base + 4 * max_rows * kPanel,
                          base + 4 * max_rows * kPanel + kPanel * d,
                          base + 4 * max_rows * kPanel + 2 * kPanel * d};
    ForEachPiece(M, count_hidden, row_cost, blocks, b, [&](int64_t m, int64_t f0, int64_t f1) {
      touched[b * M + m] = 1;
      const int64_t r0 = row_offset[m];
      float* dxp = want_dx && members[m].dx ? dx_partial + (b * rows + r0) * d : nullptr;
      float* drw = routed ? drw_partial + b * rows + r0 : nullptr;
      for (int64_t s0 = f0; s0 < f1; s0 += kPanel) {
        BackwardPanel(d, options, members[m], s0, std::min(s0 + kPanel, f1), ps, dxp, s0 == f0, drw,
                      accumulate);
      }
    });
  }));

  // dx = the touching blocks' partials in block order; ddown_bias = dm sum_r rw[r] dy[r, :];
  // both split over model features.
  const float dm = options.down_multiplier;
  ParallelFor(d, [&](int64_t i0, int64_t i1, int) {
    for (int64_t m = 0; m < M; ++m) {
      const MlpMember& mb = members[m];
      if (mb.dx != nullptr) {
        for (int64_t r = 0; r < mb.rows; ++r) {
          float* dx = mb.dx + r * mb.dx_stride;
          std::fill(dx + i0, dx + i1, 0.0f);
          for (int b = 0; b < blocks; ++b) {
            if (!touched[b * M + m]) continue;
            const float* part = dx_partial + (b * rows + row_offset[m] + r) * d;
            for (int64_t i = i0; i < i1; ++i) dx[i] += part[i];
          }
        }
      }
      if (mb.grads.ddown_bias != nullptr) {
        for (int64_t i = i0; i < i1; ++i) {
          float sum = 0.0f;
          for (int64_t r = 0; r < mb.rows; ++r) {
            sum += (mb.row_weight ? mb.row_weight[r] : 1.0f) * mb.dy[r * mb.dy_stride + i];
          }
          mb.grads.ddown_bias[i] = (accumulate ? mb.grads.ddown_bias[i] : 0.0f) + dm * sum;
        }
      }
    }
  });

  // drw[r] = sum of the blocks' <h, dy' Wd> + dm <dy[r], down_bias>
  if (routed) {
    for (int64_t m = 0; m < M; ++m) {
      const MlpMember& mb = members[m];
      if (mb.row_weight == nullptr) continue;
      for (int64_t r = 0; r < mb.rows; ++r) {
        float sum = 0.0f;
        for (int b = 0; b < blocks; ++b) sum += drw_partial[b * rows + row_offset[m] + r];
        if (mb.weights.down_bias != nullptr) {
          float bias_dot = 0.0f;
          for (int64_t i = 0; i < d; ++i)
            bias_dot += mb.dy[r * mb.dy_stride + i] * mb.weights.down_bias[i];
          sum += dm * bias_dot;
        }
        mb.drow_weight[r] = sum;
      }
    }
  }
  return Status::Ok();
}

}  // namespace ssmkit::cpu
