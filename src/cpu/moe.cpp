// CPU mixture of experts. Dimension legend: T tokens, d model width, d_x the experts' width (d,
// or expert_x's: the router reads x, the experts expert_x), F an expert's hidden width, E
// experts, k experts per token, N = C k routed rows of a chunk of C tokens.
//
// Forward: router logits (the linear op), each token's routing (moe_routing.cpp), then chunks
// of C tokens: a counting sort of the chunk's C k assignments by expert (stable: token order
// within an expert), the expert_x rows (x when not given) gathered in that order, every active
// expert (and the shared expert on the chunk's rows as they are) as one MlpGroupForward, and the
// rows scattered back:
//   out[t] = sum over t's experts, ascending, of w * y  (+ shared(x[t]))
// in a region over model features, so each output element is summed by one thread in a fixed
// order. The chunk bounds the workspace (N rows of x and y) whatever T is.
//
// Backward: the same routing and sort; dout rows gathered like x; the group backward gives
// the experts' weight gradients (accumulated over chunks into zeroed gradients), dx of each
// gathered row, and d w = <dout, y> per row; the routing backward turns d w into d logits,
// and the router's gradients are two products over all T at the end:
//   drouter_weight = dlogits^T x,  drouter_bias = sum_t dlogits,  dx += dlogits W_r.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dtype.hpp"
#include "core/parallel.hpp"
#include "cpu/blas.hpp"
#include "cpu/linear.hpp"
#include "cpu/mlp.hpp"
#include "cpu/mlp_group.hpp"
#include "cpu/moe_routing.hpp"
#include "params/linear_params.hpp"

namespace ssmkit::cpu {
namespace {

// Floats of one chunk's gathered rows (N max(d, F)). Larger chunks give each expert more rows
// per product; smaller keep the workspace down. Tuned for speed only.
constexpr int64_t kMoeChunkFloats = int64_t{1} << 22;
// Below this many floats a pass stays on the calling thread. Tuned for speed only.
constexpr int64_t kMinParallelFloats = 1 << 14;

template <class T>
T* Grown(std::vector<T>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  return v.data();
}

// The routing of every token and the sort of one chunk.
struct MoeWorkspace {
  std::vector<float> logits;       // (T, E), when the caller does not want them
  std::vector<int32_t> index;      // (T, k)
  std::vector<float> weight;       // (T, k)
  std::vector<float> scratch;      // B blocks of RouteScratchFloats (+ k)
  std::vector<int64_t> offsets;    // (E + 1): the chunk's rows of expert e start at offsets[e]
  std::vector<int64_t> fill;       // (E)
  std::vector<int64_t> row_token;  // (N): the token of each sorted row
  std::vector<float> row_weight;   // (N)
  std::vector<int64_t> slot_row;   // (C, k): the sorted row of each assignment
  std::vector<float> rows_in;      // (N, d_x): gathered expert_x
  std::vector<float> rows_out;     // (N, d_x): y (forward) or dx (backward)
  std::vector<float> rows_dy;      // (N, d): gathered dout (backward)
  std::vector<float> drow_weight;  // (N)
  std::vector<float> shared_out;   // (C, d): shared expert's y or dx (d_x = d with one)
  std::vector<float> dlogits;      // (T, E)
  std::vector<float> router_f32;   // (E, d): a bf16/f16 router weight widened
  std::vector<MlpMember> members;  // E + 1
};

int64_t ChunkTokens(const MoeParams& p) {
  int64_t widest = p.expert_width;
  if (!p.expert_weights.empty()) widest = std::max(widest, p.expert_weights[0].up.shape[0]);
  if (p.has_shared) widest = std::max(widest, p.shared_weights.up.shape[0]);
  const int64_t rows_per_token = p.options.top_k + (p.has_shared ? 1 : 0);
  return std::max<int64_t>(1, kMoeChunkFloats / widest / rows_per_token);
}

// Runs fn(begin, end, block) over [0, n) on the library's threads (ParallelFor) when `floats`
// of work justify it, else fn(0, n, 0) here.
template <class Fn>
void MaybeParallel(int64_t n, int64_t floats, Fn&& fn) {
  if (floats < kMinParallelFloats) {
    fn(int64_t{0}, n, 0);
    return;
  }
  ParallelFor(n, fn);
}

// Router logits (T, E) into `logits` (row stride ld), then every token's routing.
Status Route(const MoeParams& p, float* logits, int64_t ld, MoeWorkspace& ws) {
  const int64_t T = p.rows, E = p.experts, k = p.options.top_k;
  LinearParams lp;
  lp.rows = T;
  lp.in_features = p.model;
  lp.out_features = E;
  lp.x = p.x;
  lp.x_stride_row = p.x_stride;
  lp.weight = p.router_weight;
  lp.weight_dtype = p.router_dtype;
  lp.bias = p.router_bias;
  lp.out = logits;
  lp.out_stride_row = ld;
  SSMKIT_RETURN_IF_ERROR(Linear(lp));
  int32_t* index = Grown(ws.index, T * k);
  float* weight = Grown(ws.weight, T * k);
  const int64_t per_block = RouteScratchFloats(E, k);
  float* scratch = Grown(ws.scratch, int64_t{NumThreads()} * per_block);
  ParallelFor(T, [&](int64_t t0, int64_t t1, int block) {
    for (int64_t t = t0; t < t1; ++t) {
      RouteToken(p.options, E, logits + t * ld, p.score_bias, index + t * k, weight + t * k,
                 scratch + block * per_block);
    }
  });
  return Status::Ok();
}

// Sorts chunk [t0, t0 + C) by expert: offsets, row_token, row_weight, slot_row. Returns N.
int64_t SortChunk(const MoeParams& p, int64_t t0, int64_t C, MoeWorkspace& ws) {
  const int64_t E = p.experts, k = p.options.top_k, N = C * k;
  int64_t* offsets = Grown(ws.offsets, E + 1);
  int64_t* fill = Grown(ws.fill, E);
  int64_t* row_token = Grown(ws.row_token, N);
  float* row_weight = Grown(ws.row_weight, N);
  int64_t* slot_row = Grown(ws.slot_row, N);
  const int32_t* index = ws.index.data() + t0 * k;
  const float* weight = ws.weight.data() + t0 * k;
  std::fill(fill, fill + E, int64_t{0});
  for (int64_t s = 0; s < N; ++s) ++fill[index[s]];
  offsets[0] = 0;
  for (int64_t e = 0; e < E; ++e) {
    offsets[e + 1] = offsets[e] + fill[e];
    fill[e] = offsets[e];
  }
  for (int64_t s = 0; s < N; ++s) {  // s = (t - t0) k + j: token order within each expert
    const int64_t row = fill[index[s]]++;
    row_token[row] = t0 + s / k;
    row_weight[row] = weight[s];
    slot_row[s] = row;
  }
  return N;
}

// dst[row] = src[row_token[row]] for the N sorted rows (d floats each).
void GatherRows(const float* src, int64_t src_stride, const int64_t* row_token, int64_t N,
                int64_t d, float* dst) {
  MaybeParallel(N, N * d, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      std::memcpy(dst + r * d, src + row_token[r] * src_stride, static_cast<size_t>(d) * 4);
    }
  });
}

// out[t] = sum over the sorted rows of t, in row order (ascending expert), of w * rows[row]
// (w = 1 when row_weight is null), plus shared[t - t0] when given; for t in [t0, t0 + C). Rows
// of d_x floats.
void ScatterRows(const MoeParams& p, int64_t t0, int64_t C, int64_t N, const float* rows,
                 const float* row_weight, const float* shared, const MoeWorkspace& ws, float* out,
                 int64_t out_stride) {
  const int64_t d = p.expert_width;
  const int64_t* row_token = ws.row_token.data();
  MaybeParallel(d, (N + C) * d, [&](int64_t i0, int64_t i1, int) {
    for (int64_t t = t0; t < t0 + C; ++t)
      std::fill(out + t * out_stride + i0, out + t * out_stride + i1, 0.0f);
    for (int64_t r = 0; r < N; ++r) {
      const float w = row_weight ? row_weight[r] : 1.0f;
      float* o = out + row_token[r] * out_stride;
      const float* y = rows + r * d;
      for (int64_t i = i0; i < i1; ++i) o[i] += w * y[i];
    }
    if (shared == nullptr) return;
    for (int64_t t = t0; t < t0 + C; ++t) {
      float* o = out + t * out_stride;
      const float* y = shared + (t - t0) * d;
      for (int64_t i = i0; i < i1; ++i) o[i] += y[i];
    }
  });
}

// Sorts chunk [t0, t0 + C) and gathers its expert_x rows into ws.rows_in. Returns N.
int64_t BeginChunk(const MoeParams& p, int64_t t0, int64_t C, MoeWorkspace& ws) {
  const int64_t N = SortChunk(p, t0, C, ws), dx = p.expert_width;
  GatherRows(p.expert_x, p.expert_x_stride, ws.row_token.data(), N, dx, Grown(ws.rows_in, N * dx));
  return N;
}

// The members of one chunk: every expert with rows (in expert order), then the shared expert.
// Fills each member's weights and input rows, then calls routed(member, e, first_row) or
// shared(member) for the rest.
template <class Routed, class Shared>
std::span<MlpMember> ChunkMembers(const MoeParams& p, int64_t t0, int64_t C, MoeWorkspace& ws,
                                  Routed&& routed, Shared&& shared) {
  const int64_t E = p.experts, d = p.expert_width;
  MlpMember* members = Grown(ws.members, E + 1);
  int64_t n = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t row = ws.offsets[e], rows = ws.offsets[e + 1] - row;
    if (rows == 0) continue;
    MlpMember& m = members[n++];
    m = MlpMember{};
    m.weights = WeightParamsOf(p.expert_weights[e]);
    m.rows = rows;
    m.x = ws.rows_in.data() + row * d;
    m.x_stride = d;
    routed(m, e, row);
  }
  if (p.has_shared) {
    MlpMember& m = members[n++];
    m = MlpMember{};
    m.weights = WeightParamsOf(p.shared_weights);
    m.rows = C;
    m.x = p.x + t0 * p.x_stride;
    m.x_stride = p.x_stride;
    shared(m);
  }
  return {members, static_cast<size_t>(n)};
}

void ZeroIfWanted(float* v, int64_t n) {
  if (v != nullptr) std::fill(v, v + n, 0.0f);
}

void ZeroGrads(const MlpWeightGradParams& g, int64_t d, int64_t F) {
  ZeroIfWanted(g.dgate, F * d);
  ZeroIfWanted(g.dup, F * d);
  ZeroIfWanted(g.ddown, d * F);
  ZeroIfWanted(g.dgate_bias, F);
  ZeroIfWanted(g.dup_bias, F);
  ZeroIfWanted(g.ddown_bias, d);
}

}  // namespace

Status MoeForward(const MoeParams& p) {
  const int64_t T = p.rows, E = p.experts, k = p.options.top_k, d = p.expert_width;
  // The calling thread's workspace, named through a reference: inside a parallel region a
  // thread_local's name would mean the worker's own (empty) instance.
  thread_local MoeWorkspace storage;
  MoeWorkspace& ws = storage;
  float* logits = p.router_logits ? p.router_logits : Grown(ws.logits, T * E);
  SSMKIT_RETURN_IF_ERROR(Route(p, logits, p.router_logits ? p.router_logits_stride : E, ws));
  if (p.expert_counts != nullptr) {
    std::fill(p.expert_counts, p.expert_counts + E, int64_t{0});
    for (int64_t s = 0; s < T * k; ++s) ++p.expert_counts[ws.index[s]];
  }
  for (int64_t t = 0; t < T; ++t) {
    if (p.top_k_index != nullptr) {
      std::copy_n(ws.index.data() + t * k, k, p.top_k_index + t * p.top_k_index_stride);
    }
    if (p.top_k_weight != nullptr) {
      std::copy_n(ws.weight.data() + t * k, k, p.top_k_weight + t * p.top_k_weight_stride);
    }
  }
  const int64_t chunk = ChunkTokens(p);
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t C = std::min(chunk, T - t0);
    const int64_t N = BeginChunk(p, t0, C, ws);
    float* rows_out = Grown(ws.rows_out, N * d);
    float* shared_out = p.has_shared ? Grown(ws.shared_out, C * d) : nullptr;
    const std::span<MlpMember> members = ChunkMembers(
        p, t0, C, ws,
        [&](MlpMember& m, int64_t, int64_t row) {
          m.y = rows_out + row * d;
          m.y_stride = d;
        },
        [&](MlpMember& m) {
          m.y = shared_out;
          m.y_stride = d;
        });
    SSMKIT_RETURN_IF_ERROR(MlpGroupForward(d, p.options.mlp, members));
    ScatterRows(p, t0, C, N, rows_out, ws.row_weight.data(), shared_out, ws, p.out, p.out_stride);
  }
  return Status::Ok();
}

Status MoeBackward(const MoeBackwardParams& p) {
  // d_x = d: the op takes no expert_x here.
  const int64_t T = p.rows, E = p.experts, k = p.options.top_k, d = p.model;
  // The calling thread's workspace, named through a reference: inside a parallel region a
  // thread_local's name would mean the worker's own (empty) instance.
  thread_local MoeWorkspace storage;
  MoeWorkspace& ws = storage;
  float* logits = Grown(ws.logits, T * E);
  SSMKIT_RETURN_IF_ERROR(Route(p, logits, E, ws));
  if (!p.expert_grads.empty()) {
    for (int64_t e = 0; e < E; ++e) {
      ZeroGrads(GradParamsOf(p.expert_grads[e]), d, p.expert_weights[e].up.shape[0]);
    }
  }
  if (p.has_shared) ZeroGrads(GradParamsOf(p.shared_grads), d, p.shared_weights.up.shape[0]);
  float* dlogits = Grown(ws.dlogits, T * E);
  const int64_t per_block = RouteScratchFloats(E, k) + k;  // the routing's, then dweight (k)
  float* scratch = Grown(ws.scratch, int64_t{NumThreads()} * per_block);

  const int64_t chunk = ChunkTokens(p);
  for (int64_t t0 = 0; t0 < T; t0 += chunk) {
    const int64_t C = std::min(chunk, T - t0);
    const int64_t N = BeginChunk(p, t0, C, ws);
    float* rows_dy = Grown(ws.rows_dy, N * d);
    float* rows_dx = Grown(ws.rows_out, N * d);
    float* drow_weight = Grown(ws.drow_weight, N);
    float* shared_dx = p.has_shared ? Grown(ws.shared_out, C * d) : nullptr;
    GatherRows(p.dout, p.dout_stride, ws.row_token.data(), N, d, rows_dy);
    const std::span<MlpMember> members = ChunkMembers(
        p, t0, C, ws,
        [&](MlpMember& m, int64_t e, int64_t row) {
          m.dy = rows_dy + row * d;
          m.dy_stride = d;
          m.row_weight = ws.row_weight.data() + row;
          m.drow_weight = drow_weight + row;
          m.dx = p.dx ? rows_dx + row * d : nullptr;
          m.dx_stride = d;
          if (!p.expert_grads.empty()) m.grads = GradParamsOf(p.expert_grads[e]);
        },
        [&](MlpMember& m) {
          m.dy = p.dout + t0 * p.dout_stride;
          m.dy_stride = p.dout_stride;
          m.dx = p.dx ? shared_dx : nullptr;
          m.dx_stride = d;
          m.grads = GradParamsOf(p.shared_grads);
        });
    SSMKIT_RETURN_IF_ERROR(MlpGroupBackward(d, p.options.mlp, members, /*accumulate=*/true));

    // d logits of the chunk's tokens from d w (the sorted rows' drow_weight).
    MaybeParallel(C, C * E * 8, [&](int64_t c0, int64_t c1, int block) {
      float* sc = scratch + block * per_block;
      float* dweight = sc + RouteScratchFloats(E, k);  // (k)
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t t = t0 + c;
        for (int64_t j = 0; j < k; ++j) dweight[j] = drow_weight[ws.slot_row[c * k + j]];
        float* dl = dlogits + t * E;
        RouteTokenBackward(p.options, E, logits + t * E, ws.index.data() + t * k,
                           ws.weight.data() + t * k, dweight, dl, sc);
        if (p.drouter_logits != nullptr) {
          const float* extra = p.drouter_logits + t * p.drouter_logits_stride;
          for (int64_t e = 0; e < E; ++e) dl[e] += extra[e];
        }
      }
    });
    if (p.dx != nullptr)
      ScatterRows(p, t0, C, N, rows_dx, nullptr, shared_dx, ws, p.dx, p.dx_stride);
  }

  // The router: drouter_weight = dlogits^T x, drouter_bias = column sums, dx += dlogits W_r.
  const float* router = static_cast<const float*>(p.router_weight);
  if (p.dx != nullptr && p.router_dtype != DType::kF32) {
    float* widened = Grown(ws.router_f32, E * d);
    WidenToF32(p.router_weight, p.router_dtype, E * d, widened);
    router = widened;
  }
  {
    blas::SingleThread single;
    MaybeParallel(d, T * d, [&](int64_t i0, int64_t i1, int) {
      if (p.drouter_weight != nullptr) {
        blas::Gemm(true, false, E, i1 - i0, T, 1.0f, dlogits, E, p.x + i0, p.x_stride, 0.0f,
                   p.drouter_weight + i0, d);
      }
      if (p.dx != nullptr) {
        blas::Gemm(false, false, T, i1 - i0, E, 1.0f, dlogits, E, router + i0, d, 1.0f, p.dx + i0,
                   p.dx_stride);
      }
    });
  }
  if (p.drouter_bias != nullptr) {
    for (int64_t e = 0; e < E; ++e) {
      float sum = 0.0f;
      for (int64_t t = 0; t < T; ++t) sum += dlogits[t * E + e];
      p.drouter_bias[e] = sum;
    }
  }
  return Status::Ok();
}

}  // namespace ssmkit::cpu
