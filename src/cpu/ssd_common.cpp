// Scalar pieces shared by the CPU SSD kernels: B/C packing, the task split, and the
// fixed-order reductions of per-task gradient partials (see ssd_common.hpp).
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size,
// Nn N padded to a multiple of 16.
#include "cpu/ssd_common.hpp"

#include <algorithm>

#include "core/dtype.hpp"
#include "core/parallel.hpp"

namespace ssmkit::cpu::ssd {

void PackBC(const SsdParams& p, const SsdSeqView& view, PackedBC* out) {
  const int64_t N = p.dstate, Nn = RoundUp(N, 16), L = p.seqlen, G = p.ngroups;
  if (view.dtype == DType::kF32 && N == Nn) {  // already f32 rows of Nn floats: read in place
    out->storage.clear();
    out->base = static_cast<const float*>(view.data);
    out->stride_b = view.stride_batch;
    out->stride_g = view.stride_head;
    out->ld = view.stride_seq;
    return;
  }
  out->storage.assign(static_cast<size_t>(p.batch * G * L * Nn), 0.0f);
  out->base = out->storage.data();
  out->ld = Nn;
  out->stride_g = L * Nn;
  out->stride_b = G * L * Nn;
  float* dst = out->storage.data();
  const int64_t rows = p.batch * G * L;
  ParallelFor(rows, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {  // r = (b * G + g) * L + l
      const int64_t l = r % L, bg = r / L, g = bg % G, b = bg / G;
      RowToF32(view.data, view.dtype, view.Offset(b, l, g), N, dst + r * Nn);
    }
  });
}

TaskSplit MakeTaskSplit(const SsdParams& p) {
  TaskSplit s;
  s.batch = p.batch;
  s.ngroups = p.ngroups;
  s.heads_per_group = p.heads_per_group();
  const int64_t threads = NumThreads(), bg = p.batch * p.ngroups;
  // Tuned for speed, does not affect correctness: the fewest head blocks that split evenly
  // over the threads (or leave at most 1/8 imbalance). Fewer blocks mean larger GEMMs and
  // fewer dB/dC partials.
  s.blocks = s.heads_per_group;
  for (int64_t k = 1; k <= s.heads_per_group; ++k) {
    if ((bg * k) % threads == 0 || bg * k >= 8 * threads) {
      s.blocks = k;
      break;
    }
  }
  return s;
}

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

}  // namespace ssmkit::cpu::ssd
