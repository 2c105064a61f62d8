// CPU rotary position embeddings, forward and backward.
// Dimension legend: B batch, L length, H heads, E head dim, R rotated dims, F = R / 2 pairs.
//
// Per token the angles a_f = float32(inv_freq[f] * position) are turned into per-dim
// multipliers (c, s) laid out like the pairs, so that one vector pass does every layout:
//   y[d] = x[d] c[d] + x[partner(d)] s[d]
// with partner(d) the other element of d's pair, s = -sin for the pair's first element and
// +sin for its second (negated again for the backward). cos and sin are evaluated in double
// from the f32 angle and rounded to f32, which is what torch's f32 cos / sin return to within
// an ulp: the angle itself, not the trigonometry, decides agreement with transformers at long
// positions, so it is formed in f32 exactly as transformers forms it.
#include "cpu/rope.hpp"

#include <algorithm>
#include <cmath>

#include "core/parallel.hpp"
#include "cpu/thread_scratch.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/rope.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

// Included once per target by foreach_target.h above (after highway.h).
#include "cpu/simd_math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ssmkit::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;

// Tuned for speed, does not affect the result: head rows per thread at least, so that a decode
// step stays on the calling thread.
constexpr int64_t kMinChunkRows = 256;

// The per-dim multipliers of one token: c (R), s (R).
void TokenMultipliers(const RopeParams& p, int64_t position, float* c, float* s) {
  const int64_t R = p.rotary_dim, F = R / 2;
  const float sign = p.backward ? -1.0f : 1.0f;
  for (int64_t f = 0; f < F; ++f) {
    const double angle = static_cast<double>(p.inv_freq[f] * static_cast<float>(position));
    const float cf = static_cast<float>(std::cos(angle)) * p.attention_scaling;
    const float sf = static_cast<float>(std::sin(angle)) * p.attention_scaling * sign;
    const int64_t d0 = p.interleaved ? 2 * f : f, d1 = p.interleaved ? 2 * f + 1 : f + F;
    c[d0] = c[d1] = cf;
    s[d0] = -sf;
    s[d1] = sf;
  }
}

// One head row: y = x c + partner(x) s over the first R dims, x past them.
void RotateRow(const RopeParams& p, const float* c, const float* s, float* x /* (E) */,
               float* partner /* (R) */) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df)), R = p.rotary_dim, F = R / 2;
  if (p.interleaved) {
    for (int64_t f = 0; f < F; ++f) {
      partner[2 * f] = x[2 * f + 1];
      partner[2 * f + 1] = x[2 * f];
    }
  } else {
    std::copy(x + F, x + R, partner);
    std::copy(x, x + F, partner + F);
  }
  int64_t d = 0;
  for (; d + N <= R; d += N) {
    const auto y = hn::MulAdd(hn::LoadU(df, x + d), hn::LoadU(df, c + d),
                              hn::Mul(hn::LoadU(df, partner + d), hn::LoadU(df, s + d)));
    hn::StoreU(y, df, x + d);
  }
  for (; d < R; ++d) x[d] = x[d] * c[d] + partner[d] * s[d];
}

Status RopeImpl(const RopeParams& p) {
  const int64_t tokens = p.batch * p.len;
  const int64_t heads = p.parts[0].heads + p.parts[1].heads;
  const int64_t chunks = std::max<int64_t>(1, std::min(tokens, tokens * heads / kMinChunkRows));
  ParallelFor(chunks, [&](int64_t begin, int64_t end, int) {
    const DF df;
    const int64_t R = p.rotary_dim, E = p.head_dim;
    float* c = ThreadScratch(ScratchSlot::kRope, 3 * R + E);
    float *s = c + R, *partner = s + R, *x = partner + R;
    for (int64_t n = tokens * begin / chunks; n < tokens * end / chunks; ++n) {
      const int64_t b = n / p.len, l = n % p.len;
      TokenMultipliers(p, p.positions[b * p.positions_stride_batch + l * p.positions_stride_seq], c,
                       s);
      for (const RopeParams::Part& part : p.parts) {
        if (!part.in.data) continue;
        for (int64_t h = 0; h < part.heads; ++h) {
          RowToF32Simd(df, part.in.data, part.in.dtype, part.in.Offset(b, l, h), E, x);
          RotateRow(p, c, s, x, partner);
          RowFromF32Simd(df, x, E, part.out.data, part.out.dtype, part.out.Offset(b, l, h));
        }
      }
    }
  });
  return Status::Ok();
}

}  // namespace ssmkit::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ssmkit::cpu {

HWY_EXPORT(RopeImpl);

Status Rope(const RopeParams& p) { return HWY_DYNAMIC_DISPATCH(RopeImpl)(p); }

}  // namespace ssmkit::cpu
#endif  // HWY_ONCE
