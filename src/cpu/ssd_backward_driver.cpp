// The CPU SSD backward driver (see ssd_backward_driver.hpp).
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size,
// Nn N padded to a multiple of 16.
#include "cpu/ssd_backward_driver.hpp"

#include <algorithm>
#include <vector>

#include "core/dtype.hpp"
#include "core/parallel.hpp"

namespace ssmkit::cpu::ssd {
namespace {

// The backward's f32 gradient partials: dB, dC (tasks, L, Nn), dA, ddt_bias (B, H),
// dD (B, H, P). One set per calling thread, kept between calls (sized on first use), so a
// training loop does not pay page faults for them on every step.
struct GradPartials {
  std::vector<float> dB, dC, dA, ddt_bias, dD;
};

GradPartials& ThreadGradPartials(const SsdParams& p, const TaskSplit& split) {
  thread_local GradPartials partials;
  const size_t bc = static_cast<size_t>(split.count() * p.seqlen * RoundUp(p.dstate, 16));
  const size_t heads = static_cast<size_t>(p.batch * p.nheads);
  partials.dB.resize(bc);  // each task zeroes its own slice
  partials.dC.resize(bc);
  partials.dA.resize(heads);
  partials.ddt_bias.resize(heads);
  partials.dD.resize(heads * static_cast<size_t>(p.headdim));
  return partials;
}

// Per-task f32 partials of dB and dC, (tasks, L, Nn) each, reduced over the head blocks of
// each (b, g) in block order and written to dB / dC in their dtype.
void ReduceBCGrads(const SsdBwdParams& p, const TaskSplit& split, const std::vector<float>& dB_part,
                   const std::vector<float>& dC_part, int64_t Nn) {
  const int64_t L = p.seqlen, N = p.dstate, G = p.ngroups, blocks = split.blocks;
  const int64_t rows = p.batch * G * L;
  ParallelFor(rows, [&](int64_t begin, int64_t end, int) {
    std::vector<float> acc(static_cast<size_t>(N));
    for (int64_t r = begin; r < end; ++r) {  // r = (b * G + g) * L + l
      const int64_t l = r % L, bg = r / L, g = bg % G, b = bg / G;
      for (int which = 0; which < 2; ++which) {
        const SsdSeqView& dst = which == 0 ? p.dB : p.dC;
        const std::vector<float>& part = which == 0 ? dB_part : dC_part;
        if (!dst.data) continue;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t blk = 0; blk < blocks; ++blk) {  // task order: fixed
          const float* src = part.data() + ((bg * blocks + blk) * L + l) * Nn;
          for (int64_t n = 0; n < N; ++n) acc[n] += src[n];
        }
        RowFromF32(acc.data(), N, dst.data, dst.dtype, dst.Offset(b, l, g));
      }
    }
  });
}

// Per-(b, h) f32 partials of dA, ddt_bias (B, H) and dD (B, H, P), summed over b in order.
void ReduceHeadGrads(const SsdBwdParams& p, const std::vector<float>& dA_part,
                     const std::vector<float>& ddt_bias_part, const std::vector<float>& dD_part) {
  const int64_t H = p.nheads, P = p.headdim;
  for (int64_t h = 0; h < H; ++h) {
    float dA = 0.0f, ddt_bias = 0.0f;
    for (int64_t b = 0; b < p.batch; ++b) {
      dA += dA_part[b * H + h];
      ddt_bias += ddt_bias_part[b * H + h];
    }
    if (p.dA.data) p.dA.data[h * p.dA.stride_head] = dA;
    if (p.ddt_bias.data) p.ddt_bias.data[h * p.ddt_bias.stride_head] = ddt_bias;
    if (!p.dD.data) continue;
    if (!p.d_per_channel) {  // D (H): sum over p as well
      float dD = 0.0f;
      for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t i = 0; i < P; ++i) dD += dD_part[(b * H + h) * P + i];
      p.dD.data[h * p.dD.stride_head] = dD;
    } else {
      for (int64_t i = 0; i < P; ++i) {
        float dD = 0.0f;
        for (int64_t b = 0; b < p.batch; ++b) dD += dD_part[(b * H + h) * P + i];
        p.dD.data[h * p.dD.stride_head + i * p.dD.stride_p] = dD;
      }
    }
  }
}

}  // namespace

void RunBackwardTasks(const SsdBwdParams& p, const std::function<void(const BackwardTask&)>& task) {
  const int64_t L = p.seqlen, Nn = RoundUp(p.dstate, 16);
  PackedBC Bp, Cp;
  PackBC(p, p.B, &Bp);
  PackBC(p, p.C, &Cp);
  const TaskSplit split = MakeTaskSplit(p);
  GradPartials& part = ThreadGradPartials(p, split);
  ParallelFor(split.count(), [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      int64_t b, g, h_begin, h_end;
      split.Decode(t, &b, &g, &h_begin, &h_end);
      // dB and dC partials are per task (reduced over the head blocks of a group below), the
      // others per head: a head belongs to one task, so no two tasks write one entry.
      float* dB = part.dB.data() + t * L * Nn;
      float* dC = part.dC.data() + t * L * Nn;
      std::fill(dB, dB + L * Nn, 0.0f);
      std::fill(dC, dC + L * Nn, 0.0f);
      const TaskGrads grads{dB, dC, part.dA.data(), part.ddt_bias.data(), part.dD.data()};
      task({Bp, Cp, b, g, h_begin, h_end, grads});
    }
  });
  ReduceBCGrads(p, split, part.dB, part.dC, Nn);
  ReduceHeadGrads(p, part.dA, part.ddt_bias, part.dD);
}

}  // namespace ssmkit::cpu::ssd
