// Scalar pieces shared by the CPU SSD kernels: B/C packing and the task split (see
// ssd_common.hpp).
// Dimension legend: B batch, L length, H heads, P head dim, G groups, N state size,
// Nn N padded to a multiple of 16.
#include "cpu/ssd_common.hpp"

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

}  // namespace ssmkit::cpu::ssd
