#include "cpu/scan_packing.hpp"

#include <algorithm>

#include "core/dtype.hpp"
#include "core/parallel.hpp"

namespace ssmkit::cpu {

PackedBC PackBC(const BCView& v, const SelectiveScanParams& p, int64_t padded_state,
                ScratchSlot slot) {
  PackedBC out;
  out.is_variable = v.is_variable;
  out.groups = v.groups;
  out.padded_state = padded_state;
  out.rows_per_group = v.is_variable ? p.seqlen : 1;
  out.channels_per_group = p.dim / v.groups;
  const int64_t batches = v.is_variable ? p.batch : 1;
  const int64_t slabs = batches * v.groups;  // one (Lv, Np) slab per (b, g)
  out.size = slabs * out.rows_per_group * padded_state;
  out.data = ThreadScratch(slot, out.size);
  std::fill(out.data, out.data + out.size, 0.0f);
  ParallelFor(slabs, [&](int64_t begin, int64_t end, int) {
    for (int64_t slab = begin; slab < end; ++slab) {
      const int64_t b = slab / v.groups, g = slab % v.groups;
      float* dst = out.data + slab * out.rows_per_group * padded_state;
      const int64_t base = b * v.stride_batch + g * v.stride_group;
      for (int64_t n = 0; n < p.dstate; ++n) {
        for (int64_t l = 0; l < out.rows_per_group; ++l) {
          dst[l * padded_state + n] =
              LoadAsF32(v.data, v.dtype, base + n * v.stride_state + l * v.stride_time);
        }
      }
    }
  });
  return out;
}

const float* PackA(const F32View& A, const SelectiveScanParams& p, int64_t padded_state) {
  float* out = ThreadScratch(ScratchSlot::kScanPackedA, p.dim * padded_state);
  std::fill(out, out + p.dim * padded_state, 0.0f);
  for (int64_t d = 0; d < p.dim; ++d) {
    for (int64_t n = 0; n < p.dstate; ++n) {
      out[d * padded_state + n] = A.data[d * A.stride_dim + n * A.stride_state];
    }
  }
  return out;
}

}  // namespace ssmkit::cpu
