// CPU SSD over packed sequences given by cu_seqlens (batch 1): each sequence runs on its own
// through the algorithm the op resolved, on views of its rows of every (1, L, ...) operand,
// from its initial state and into its varlen state. The sequences then see no boundary at
// all; the backward sums the per-sequence gradients of A, dt_bias and D in sequence order
// (deterministic). Cost: one pass per sequence, whose fixed overhead (packing B and C,
// dispatching the threads) shows only for sequences of a few steps.
//
// Dimension legend: L length, H heads, P head dim, N state size, S packed sequences.
#include <algorithm>
#include <vector>

#include "core/dtype.hpp"
#include "cpu/ssd.hpp"
#include "cpu/ssd_common.hpp"

namespace ssmkit::cpu::ssd {
namespace {

// Positions [l0, ...) of a (1, L, ...) operand.
SsdSeqView From(SsdSeqView v, int64_t l0) {
  if (v.data) v.data = static_cast<char*>(v.data) + l0 * v.stride_seq * DTypeSize(v.dtype);
  return v;
}
SsdDtView From(SsdDtView v, int64_t l0) {
  if (v.data) v.data = static_cast<char*>(v.data) + l0 * v.stride_seq * DTypeSize(v.dtype);
  return v;
}

// Row k of an (S, H, P, N) state view, as a (1, H, P, N) one.
SsdStateView Row(const SsdStateView& v, int64_t k) {
  SsdStateView r = v;
  if (r.data) r.data += k * v.stride_batch;
  return r;
}

// The forward half of the params of sequence k: [l0, l1).
void SequenceParams(const SsdParams& p, int64_t k, int64_t l0, int64_t l1, SsdParams* q) {
  q->seqlen = l1 - l0;
  q->x = From(p.x, l0);
  q->dt = From(p.dt, l0);
  q->B = From(p.B, l0);
  q->C = From(p.C, l0);
  q->z = From(p.z, l0);
  q->out = From(p.out, l0);
  q->seq_idx = nullptr;
  q->cu_seqlens = {};
  q->initial_states_per_sequence = false;
  q->initial_states = p.initial_states_per_sequence ? Row(p.initial_states, k)
                      : k == 0                      ? p.initial_states
                                                    : SsdStateView{};
  q->varlen_states = {};
  q->final_states = Row(p.varlen_states, k);
}

// Copies a (P, N)-per-head state of every head: dst = src.
void CopyStates(const SsdParams& p, const SsdStateView& src, const SsdStateView& dst) {
  for (int64_t h = 0; h < p.nheads; ++h)
    for (int64_t i = 0; i < p.headdim; ++i)
      std::copy(src.data + h * src.stride_head + i * src.stride_p,
                src.data + h * src.stride_head + i * src.stride_p + p.dstate,
                dst.data + h * dst.stride_head + i * dst.stride_p);
}

}  // namespace

void VarlenForward(const SsdParams& p, SsdAlgorithm algorithm) {
  const int64_t S = p.cu_seqlens.nseqs;
  for (int64_t k = 0; k < S; ++k) {
    SsdParams q = p;
    SequenceParams(p, k, CuSeqlensAt(p.cu_seqlens, k), CuSeqlensAt(p.cu_seqlens, k + 1), &q);
    if (k == S - 1 && !q.final_states.data) q.final_states = p.final_states;
    (void)SsdForward(q, algorithm);
  }
  // final_states is the last sequence's last state too.
  if (p.final_states.data && p.varlen_states.data)
    CopyStates(p, Row(p.varlen_states, S - 1), p.final_states);
}

void VarlenBackward(const SsdBwdParams& p, SsdAlgorithm algorithm) {
  const int64_t S = p.cu_seqlens.nseqs, H = p.nheads, P = p.headdim, N = p.dstate;
  const int64_t d_size = p.d_per_channel ? H * P : H;
  // One sequence's dA, ddt_bias, dD, and their sums over the sequences.
  std::vector<float> dA(H), ddt_bias(H), dD(d_size);
  std::vector<double> dA_sum(H, 0.0), ddt_bias_sum(H, 0.0), dD_sum(d_size, 0.0);
  // The last sequence's last state is both final_states and varlen_states[S - 1].
  std::vector<float> dlast;
  if (p.dfinal_states.data && p.dvarlen_states.data) dlast.assign(H * P * N, 0.0f);
  for (int64_t k = 0; k < S; ++k) {
    SsdBwdParams q = p;
    SequenceParams(p, k, CuSeqlensAt(p.cu_seqlens, k), CuSeqlensAt(p.cu_seqlens, k + 1), &q);
    const int64_t l0 = CuSeqlensAt(p.cu_seqlens, k);
    q.final_states = {};
    q.dout = From(p.dout, l0);
    q.dx = From(p.dx, l0);
    q.dz = From(p.dz, l0);
    q.ddt = From(p.ddt, l0);
    q.dB = From(p.dB, l0);
    q.dC = From(p.dC, l0);
    q.dinitial_states = p.initial_states_per_sequence ? Row(p.dinitial_states, k)
                        : k == 0                      ? p.dinitial_states
                                                      : SsdStateView{};
    q.dfinal_states = Row(p.dvarlen_states, k);
    if (k == S - 1 && p.dfinal_states.data) {
      if (dlast.empty()) {
        q.dfinal_states = p.dfinal_states;
      } else {
        const SsdStateView sum{dlast.data(), H * P * N, P * N, N};
        CopyStates(p, p.dfinal_states, sum);
        const SsdStateView v = Row(p.dvarlen_states, k);
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < P; ++i)
            for (int64_t n = 0; n < N; ++n)
              dlast[(h * P + i) * N + n] += v.data[h * v.stride_head + i * v.stride_p + n];
        q.dfinal_states = sum;
      }
    }
    q.dA = p.dA.data ? SsdHeadView{dA.data(), 1, 0} : SsdHeadView{};
    q.ddt_bias = p.ddt_bias.data ? SsdHeadView{ddt_bias.data(), 1, 0} : SsdHeadView{};
    q.dD = p.dD.data ? SsdHeadView{dD.data(), p.d_per_channel ? P : 1, p.d_per_channel ? 1 : 0}
                     : SsdHeadView{};
    (void)SsdBackward(q, algorithm);
    for (int64_t h = 0; h < H; ++h) {
      dA_sum[h] += dA[h];
      ddt_bias_sum[h] += ddt_bias[h];
    }
    for (int64_t i = 0; i < d_size; ++i) dD_sum[i] += dD[i];
  }
  for (int64_t h = 0; h < H; ++h) {
    if (p.dA.data) p.dA.data[h * p.dA.stride_head] = static_cast<float>(dA_sum[h]);
    if (p.ddt_bias.data)
      p.ddt_bias.data[h * p.ddt_bias.stride_head] = static_cast<float>(ddt_bias_sum[h]);
  }
  if (p.dD.data) {
    for (int64_t i = 0; i < d_size; ++i) {
      const int64_t h = p.d_per_channel ? i / P : i, j = p.d_per_channel ? i % P : 0;
      p.dD.data[h * p.dD.stride_head + j * p.dD.stride_p] = static_cast<float>(dD_sum[i]);
    }
  }
}

}  // namespace ssmkit::cpu::ssd
