// Encoding f32 rows in llama.cpp's block formats (core/quant.hpp): GGML's reference quantizers
// (quantize_row_*_ref in ggml-quants.c), rewritten from their description. Bit-exactness with
// GGML rests on doing the same f32 operations in the same order: every product and sum below is
// written as GGML evaluates it, one rounding each (this file is compiled without -mfma and in
// ISO C++ mode, where GCC does not contract a * b + c into a fused multiply-add).
//
// Rounding: Q8_0 rounds half away from zero (roundf); Q4_0 and Q5_0 truncate q + 8.5 or
// q + 16.5, Q4_1 and Q5_1 q + 0.5; the K-quants round half to even (NearestInt, GGML's
// nearest_int).
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/dtype.hpp"
#include "core/quant.hpp"

namespace ssmkit::quant {
namespace {

// Round to nearest, ties to even, for |v| < 2^22: adding 1.5 * 2^23 leaves v rounded to an
// integer in the low mantissa bits (GGML's nearest_int; also nearbyint's result, without the
// libm call that baseline x86-64, lacking SSE4.1's roundss, makes of it).
int NearestInt(float v) {
  const float shifted = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

int Clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Below this a group is all zero (GGML's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

void EncodeQ8_0(const float* x, BlockQ8_0* b) {  // x: (32)
  float amax = 0.0f;
  for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  b->d = F32ToF16(d);
  for (int i = 0; i < 32; ++i) b->qs[i] = static_cast<int8_t>(std::round(x[i] * id));
}

// The element of largest magnitude, the first of equals (its sign sets the scale's sign).
float SignedAbsMax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

// Q4_0 (half 8) and Q5_0 (half 16): d = max / -half, max the element of largest magnitude,
// maps it to level 0 (-half d = max) and leaves 2 half - 1 levels for the other side: one more
// step of resolution than a symmetric range. L: (32) levels trunc(x / d + half + 0.5), at most
// 2 half - 1. Returns d as f16.
uint16_t SymmetricLevels32(const float* x, int half, uint8_t* L) {  // x: (32)
  const float d = SignedAbsMax(x, 32) / -static_cast<float>(half);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const float shift = static_cast<float>(half) + 0.5f;  // 8.5f, 16.5f
  for (int i = 0; i < 32; ++i) {
    L[i] = static_cast<uint8_t>(
        std::min(2 * half - 1, static_cast<int>(static_cast<int8_t>(x[i] * id + shift))));
  }
  return F32ToF16(d);
}

// Q4_1 (nmax 15) and Q5_1 (nmax 31): d = (max - min) / nmax over the block, m = min (not
// clamped to 0: the levels span exactly [min, max]); L: (32) levels trunc((x - min) / d + 0.5),
// at most nmax. Returns d as f16, *m16 m.
uint16_t AffineLevels32(const float* x, int nmax, uint16_t* m16, uint8_t* L) {  // x: (32)
  float min = FLT_MAX, max = -FLT_MAX;
  for (int i = 0; i < 32; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
  }
  const float d = (max - min) / static_cast<float>(nmax);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int i = 0; i < 32; ++i) {
    L[i] = static_cast<uint8_t>(std::min(nmax, static_cast<int>((x[i] - min) * id + 0.5f)));
  }
  *m16 = F32ToF16(min);
  return F32ToF16(d);
}

// Levels L (32) into qs (16) and, for the 5-bit formats, qh (4): the layout of Level32.
void PackLevels32(const uint8_t* L, uint8_t* qs, uint8_t* qh) {
  for (int i = 0; i < 16; ++i)
    qs[i] = static_cast<uint8_t>((L[i] & 0xF) | ((L[i + 16] & 0xF) << 4));
  if (qh == nullptr) return;
  std::memset(qh, 0, 4);
  for (int i = 0; i < 32; ++i) qh[i / 8] |= static_cast<uint8_t>((L[i] >> 4) << (i % 8));
}

void EncodeQ4_0(const float* x, BlockQ4_0* b) {  // x: (32)
  uint8_t L[32];
  b->d = SymmetricLevels32(x, 8, L);
  PackLevels32(L, b->qs, nullptr);
}

void EncodeQ5_0(const float* x, BlockQ5_0* b) {  // x: (32)
  uint8_t L[32];
  b->d = SymmetricLevels32(x, 16, L);
  PackLevels32(L, b->qs, b->qh);
}

void EncodeQ4_1(const float* x, BlockQ4_1* b) {  // x: (32)
  uint8_t L[32];
  b->d = AffineLevels32(x, 15, &b->m, L);
  PackLevels32(L, b->qs, nullptr);
}

void EncodeQ5_1(const float* x, BlockQ5_1* b) {  // x: (32)
  uint8_t L[32];
  b->d = AffineLevels32(x, 31, &b->m, L);
  PackLevels32(L, b->qs, b->qh);
}

// GGML's make_qx_quants with rmse_type 1 and no importance weights: the symmetric scale of n
// values on levels [-nmax, nmax - 1] that minimizes sum x^2 (x - scale * l)^2, searched over
// 19 starting scales -(nmax + 0.1 k) / max, k in [-9, 9]. L receives l + nmax.
float SymmetricScale(int n, int nmax, const float* x, int8_t* L) {
  const float max = SignedAbsMax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  // The least-squares scale sum w x l / sum w l^2 (w = x^2) of the levels that iscale rounds to.
  const auto fit = [&](float iscale, float* sumlx, float* suml2) {
    *sumlx = 0.0f;
    *suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float l = static_cast<float>(Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1));
      const float w = x[i] * x[i];
      *sumlx += w * x[i] * l;
      *suml2 += w * l * l;
    }
  };
  const auto levels = [&](float iscale) {
    for (int i = 0; i < n; ++i) {
      L[i] = static_cast<int8_t>(nmax + Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1));
    }
  };
  float iscale = -static_cast<float>(nmax) / max;
  float sumlx, suml2;
  fit(iscale, &sumlx, &suml2);
  levels(iscale);
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int k = -9; k <= 9; ++k) {
    if (k == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(k)) / max;
    fit(iscale, &sumlx, &suml2);
    // sumlx^2 / suml2 is the weighted error removed by the fit: larger is better.
    if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
      levels(iscale);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// GGML's make_qkx2_quants (least squares, not mean absolute deviation): levels l in [0, nmax]
// for x ~ scale * l - the_min with the_min >= 0, minimizing sum w (scale l - the_min - x)^2.
// Starts from the range [min(x, 0), max(x)], then tries nstep + 1 level spacings
// (nmax + rmin + rdelta * s) / (max - min), refitting scale and min by weighted least squares
// for each and keeping the best.
float AsymmetricScale(int n, int nmax, const float* x, const float* w, uint8_t* L, float* the_min,
                      float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = x[i] < min ? x[i] : min;
    max = x[i] > max ? x[i] : max;
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0.0f) min = 0.0f;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1.0f / iscale;
  float best_error = 0.0f;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(Clamp(NearestInt(iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * static_cast<float>(L[i]) + min - x[i];
    best_error += w[i] * (diff * diff);
  }
  uint8_t trial[32];  // n <= 32
  for (int s = 0; s <= nstep; ++s) {
    iscale = (rmin + rdelta * static_cast<float>(s) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = Clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
      trial[i] = static_cast<uint8_t>(l);
      const float lf = static_cast<float>(l);
      sum_l += w[i] * lf;
      sum_l2 += w[i] * lf * lf;
      sum_xl += w[i] * lf * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0.0f)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0.0f) {  // the offset may only lower the levels: refit the scale alone
      this_min = 0.0f;
      this_scale = sum_xl / sum_l2;
    }
    float error = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * static_cast<float>(trial[i]) + this_min - x[i];
      error += w[i] * (diff * diff);
    }
    if (error < best_error) {
      std::memcpy(L, trial, static_cast<size_t>(n));
      best_error = error;
      scale = this_scale;
      min = this_min;
    }
  }
  *the_min = -min;
  return scale;
}

// Q4_K (nmax 15) and Q5_K (nmax 31): each sub-block of 32 gets a scale and min from
// AsymmetricScale (weights |x| + rms of the sub-block), both quantized to 6 bits against the
// largest of the eight (d = max scale / 63, dmin = max min / 63); the levels are then recomputed
// against the stored scales. L: (256) levels in [0, nmax].
struct KScales {
  uint16_t d, dmin;
  uint8_t scales[12];
};
KScales EncodeK4K5(const float* x, int nmax, float rmin, int nstep, uint8_t* L) {  // x: (256)
  float scales[8], mins[8];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const float* xj = x + 32 * j;
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += xj[l] * xj[l];
    const float rms = std::sqrt(sum_x2 / 32.0f);
    float weights[32];
    for (int l = 0; l < 32; ++l) weights[l] = rms + std::fabs(xj[l]);
    scales[j] = AsymmetricScale(32, nmax, xj, weights, L + 32 * j, &mins[j], rmin, 0.1f, nstep);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
  KScales k{};
  for (int j = 0; j < 8; ++j) {
    // GGML stores nearest_int in a uint8_t before the min with 63: the same wrap here.
    const uint8_t ls =
        std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_scale * scales[j])));
    const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(NearestInt(inv_min * mins[j])));
    if (j < 4) {
      k.scales[j] = ls;
      k.scales[j + 4] = lm;
    } else {
      k.scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      k.scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      k.scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  k.d = F32ToF16(max_scale / 63.0f);
  k.dmin = F32ToF16(max_min / 63.0f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    ScaleMinK4(j, k.scales, &sc, &m);
    const float d = F16ToF32(k.d) * static_cast<float>(sc);
    if (d == 0.0f) continue;  // the levels are multiplied by 0: GGML keeps the search's
    const float dm = F16ToF32(k.dmin) * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      L[32 * j + l] = static_cast<uint8_t>(Clamp(NearestInt((x[32 * j + l] + dm) / d), 0, nmax));
    }
  }
  return k;
}

void EncodeQ4_K(const float* x, BlockQ4_K* b) {  // x: (256)
  uint8_t L[kSuperBlock];
  const KScales k = EncodeK4K5(x, 15, -1.0f, 20, L);
  b->d = k.d;
  b->dmin = k.dmin;
  std::memcpy(b->scales, k.scales, sizeof k.scales);
  for (int c = 0; c < 4; ++c) {  // 64 elements per 32 bytes: low nibble first
    for (int l = 0; l < 32; ++l) {
      b->qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | (L[64 * c + l + 32] << 4));
    }
  }
}

void EncodeQ5_K(const float* x, BlockQ5_K* b) {  // x: (256)
  uint8_t L[kSuperBlock];
  const KScales k = EncodeK4K5(x, 31, -0.5f, 15, L);
  b->d = k.d;
  b->dmin = k.dmin;
  std::memcpy(b->scales, k.scales, sizeof k.scales);
  std::memset(b->qh, 0, sizeof b->qh);
  for (int j = 0; j < 8; ++j) {  // sub-block j: nibble j % 2 of qs[32 * (j / 2) + l], bit j of qh
    for (int l = 0; l < 32; ++l) {
      const int q = L[32 * j + l];
      b->qh[l] |= static_cast<uint8_t>((q >> 4) << j);
      uint8_t& byte = b->qs[32 * (j / 2) + l];
      byte = static_cast<uint8_t>(j % 2 == 0 ? (q & 0xF) : (byte | ((q & 0xF) << 4)));
    }
  }
}

void EncodeQ6_K(const float* x, BlockQ6_K* b) {  // x: (256)
  int8_t L[kSuperBlock];
  float scales[16];
  float max_scale = 0.0f, max_abs_scale = 0.0f;
  for (int j = 0; j < 16; ++j) {
    scales[j] = SymmetricScale(16, 32, x + 16 * j, L + 16 * j);
    if (std::fabs(scales[j]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  std::memset(b, 0, sizeof *b);
  if (max_abs_scale < kGroupMaxEps) return;  // all zero: d = 0
  // The sub-block scales become int8 with the largest at -128 (its sign taken into iscale).
  const float iscale = -128.0f / max_scale;
  b->d = F32ToF16(1.0f / iscale);
  for (int j = 0; j < 16; ++j) {
    b->scales[j] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[j])));
  }
  for (int j = 0; j < 16; ++j) {
    const float d = F16ToF32(b->d) * static_cast<float>(b->scales[j]);
    if (d == 0.0f) continue;
    for (int l = 0; l < 16; ++l) {
      L[16 * j + l] = static_cast<int8_t>(Clamp(NearestInt(x[16 * j + l] / d), -32, 31) + 32);
    }
  }
  for (int half = 0; half < 2; ++half) {  // the layout of BlockQ6_K
    const int8_t* Lh = L + 128 * half;
    uint8_t* ql = b->ql + 64 * half;
    uint8_t* qh = b->qh + 32 * half;
    for (int l = 0; l < 32; ++l) {
      ql[l] = static_cast<uint8_t>((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
      qh[l] = static_cast<uint8_t>((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) |
                                   ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
    }
  }
}

template <class Block, class Encode>
void EncodeBlocks(const float* src, int64_t n, int64_t block_elements, void* dst, Encode encode) {
  uint8_t* bytes = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n / block_elements; ++i) {
    Block b{};
    encode(src + i * block_elements, &b);
    std::memcpy(bytes + i * static_cast<int64_t>(sizeof(Block)), &b, sizeof(Block));
  }
}

}  // namespace

void QuantizeRow(DType dtype, const float* src, int64_t n, void* dst) {
  switch (dtype) {
    case DType::kQ8_0:
      return EncodeBlocks<BlockQ8_0>(src, n, 32, dst, EncodeQ8_0);
    case DType::kQ4_0:
      return EncodeBlocks<BlockQ4_0>(src, n, 32, dst, EncodeQ4_0);
    case DType::kQ4_1:
      return EncodeBlocks<BlockQ4_1>(src, n, 32, dst, EncodeQ4_1);
    case DType::kQ5_0:
      return EncodeBlocks<BlockQ5_0>(src, n, 32, dst, EncodeQ5_0);
    case DType::kQ5_1:
      return EncodeBlocks<BlockQ5_1>(src, n, 32, dst, EncodeQ5_1);
    case DType::kQ4_K:
      return EncodeBlocks<BlockQ4_K>(src, n, kSuperBlock, dst, EncodeQ4_K);
    case DType::kQ5_K:
      return EncodeBlocks<BlockQ5_K>(src, n, kSuperBlock, dst, EncodeQ5_K);
    case DType::kQ6_K:
      return EncodeBlocks<BlockQ6_K>(src, n, kSuperBlock, dst, EncodeQ6_K);
    default:
      for (int64_t i = 0; i < n; ++i) StoreFromF32(dst, dtype, i, src[i]);
      return;
  }
}

}  // namespace ssmkit::quant
