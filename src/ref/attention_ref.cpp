// fp64 oracle of causal attention. Per query row, over its visible keys J = [lo, pos]:
//   s_j = scale q . k_j,  p_j = exp(s_j - max s) / sum exp(s - max s),  out = sum_j p_j v_j,
//   lse = max s + log sum exp(s - max s).
// Backward of one row (dout the gradient of out):
//   dv_j += p_j dout,  dp_j = dout . v_j,  D = sum_j p_j dp_j (= dout . out),
//   ds_j = p_j (dp_j - D),  dq = scale sum_j ds_j k_j,  dk_j += scale ds_j q.
#include "ref/attention_ref.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace ssmkit::ref {
namespace {

// Where the keys and values of one (sequence, kv head) live: dense rows (S, Hk, E | Ev)
// already offset to the sequence, or (table non-null) a block pool and the sequence's table.
struct KeyRows {
  const double *k, *v;
  int64_t kv_heads, E, Ev, head;
  const int32_t* table = nullptr;  // (max_blocks)
  int64_t block_size = 1;
  int64_t Row(int64_t j) const {
    return table ? table[j / block_size] * block_size + j % block_size : j;
  }
  const double* Key(int64_t j) const { return k + (Row(j) * kv_heads + head) * E; }     // (E)
  const double* Value(int64_t j) const { return v + (Row(j) * kv_heads + head) * Ev; }  // (Ev)
};

double Dot(const double* a, const double* b, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// The softmax of one query row over keys [lo, hi]: p (hi - lo + 1); returns lse (-inf when
// the interval is empty).
double RowSoftmax(const double* q, const KeyRows& rows, int64_t E, double scale, int64_t lo,
                  int64_t hi, std::vector<double>* p) {
  p->assign(static_cast<size_t>(std::max<int64_t>(0, hi - lo + 1)), 0.0);
  if (lo > hi) return -std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  for (int64_t j = lo; j <= hi; ++j) {
    (*p)[j - lo] = scale * Dot(q, rows.Key(j), E);
    max = std::max(max, (*p)[j - lo]);
  }
  double sum = 0.0;
  for (double& x : *p) sum += (x = std::exp(x - max));
  for (double& x : *p) x /= sum;
  return max + std::log(sum);
}

// out (Ev) = sum_j p_j v_j; zeros for an empty row.
void RowOutput(const KeyRows& rows, int64_t Ev, int64_t lo, const std::vector<double>& p,
               double* out) {
  std::fill(out, out + Ev, 0.0);
  for (size_t t = 0; t < p.size(); ++t) {
    const double* vj = rows.Value(lo + static_cast<int64_t>(t));
    for (int64_t e = 0; e < Ev; ++e) out[e] += p[t] * vj[e];
  }
}

}  // namespace

int64_t FirstVisibleKey(int64_t pos, int64_t window, int64_t kv_start) {
  int64_t lo = std::max<int64_t>(0, kv_start);
  if (window > 0) lo = std::max(lo, pos - window + 1);
  return lo;
}

void AttentionForward(const AttentionShape& s, const double* q, const double* k, const double* v,
                      const int32_t* kv_start, double* out, double* lse) {
  const int64_t B = s.batch, L = s.q_len, S = s.kv_len, H = s.heads, Hk = s.kv_heads;
  const int64_t E = s.head_dim, Ev = s.v_head_dim, group = H / Hk;
  std::vector<double> p;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const KeyRows rows{k + b * S * Hk * E, v + b * S * Hk * Ev, Hk, E, Ev, h / group};
      for (int64_t i = 0; i < L; ++i) {
        const int64_t pos = S - L + i;
        const int64_t lo = FirstVisibleKey(pos, s.window, kv_start ? kv_start[b] : 0);
        const double row_lse =
            RowSoftmax(q + ((b * L + i) * H + h) * E, rows, E, s.scale, lo, pos, &p);
        RowOutput(rows, Ev, lo, p, out + ((b * L + i) * H + h) * Ev);
        if (lse) lse[(b * H + h) * L + i] = row_lse;
      }
    }
  }
}

void AttentionBackward(const AttentionShape& s, const double* q, const double* k, const double* v,
                       const int32_t* kv_start, const double* dout, double* dq, double* dk,
                       double* dv) {
  const int64_t B = s.batch, L = s.q_len, S = s.kv_len, H = s.heads, Hk = s.kv_heads;
  const int64_t E = s.head_dim, Ev = s.v_head_dim, group = H / Hk;
  if (dq) std::fill(dq, dq + B * L * H * E, 0.0);
  if (dk) std::fill(dk, dk + B * S * Hk * E, 0.0);
  if (dv) std::fill(dv, dv + B * S * Hk * Ev, 0.0);
  std::vector<double> p, dp;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / group;
      const KeyRows rows{k + b * S * Hk * E, v + b * S * Hk * Ev, Hk, E, Ev, hk};
      for (int64_t i = 0; i < L; ++i) {
        const int64_t pos = S - L + i;
        const int64_t lo = FirstVisibleKey(pos, s.window, kv_start ? kv_start[b] : 0);
        const double* qi = q + ((b * L + i) * H + h) * E;
        const double* doi = dout + ((b * L + i) * H + h) * Ev;
        RowSoftmax(qi, rows, E, s.scale, lo, pos, &p);
        dp.assign(p.size(), 0.0);
        double D = 0.0;
        for (size_t t = 0; t < p.size(); ++t) {
          dp[t] = Dot(doi, rows.Value(lo + static_cast<int64_t>(t)), Ev);
          D += p[t] * dp[t];
        }
        for (size_t t = 0; t < p.size(); ++t) {
          const int64_t j = lo + static_cast<int64_t>(t);
          const double ds = p[t] * (dp[t] - D);
          const double* kj = rows.Key(j);
          if (dq) {
            for (int64_t e = 0; e < E; ++e)
              dq[((b * L + i) * H + h) * E + e] += s.scale * ds * kj[e];
          }
          if (dk) {
            for (int64_t e = 0; e < E; ++e)
              dk[((b * S + j) * Hk + hk) * E + e] += s.scale * ds * qi[e];
          }
          if (dv) {
            for (int64_t e = 0; e < Ev; ++e) dv[((b * S + j) * Hk + hk) * Ev + e] += p[t] * doi[e];
          }
        }
      }
    }
  }
}

void AttentionPagedForward(const AttentionShape& s, const PagedLayout& layout, const double* q,
                           const double* k_blocks, const double* v_blocks,
                           const int32_t* block_table, const int32_t* seq_lens, double* out) {
  const int64_t B = s.batch, L = s.q_len, H = s.heads, Hk = s.kv_heads;
  const int64_t E = s.head_dim, Ev = s.v_head_dim, group = H / Hk;
  std::vector<double> p;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const KeyRows rows{
          k_blocks,         v_blocks, Hk, E, Ev, h / group, block_table + b * layout.max_blocks,
          layout.block_size};
      for (int64_t i = 0; i < L; ++i) {
        const int64_t pos = seq_lens[b] - L + i;  // < 0: a left-pad row, no visible key
        const int64_t lo = FirstVisibleKey(pos, s.window, 0);
        RowSoftmax(q + ((b * L + i) * H + h) * E, rows, E, s.scale, lo, pos, &p);
        RowOutput(rows, Ev, lo, p, out + ((b * L + i) * H + h) * Ev);
      }
    }
  }
}

}  // namespace ssmkit::ref
