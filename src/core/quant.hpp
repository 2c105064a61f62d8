// llama.cpp's (GGML's) quantized weight formats, bit for bit: the block layouts, rows decoded to
// f32, and f32 rows encoded the way GGML's reference quantizers do (no importance matrix), so
// that a GGUF file's tensors are used as stored and our own quantized bytes are the ones
// llama.cpp would write. docs/quantization.md describes each layout and the error bounds.
//
// A row of n elements (n a multiple of DTypeBlockElements) is n / block consecutive blocks; a
// matrix (M, K) is M such rows, DTypeRowBytes(dtype, K) bytes apart. Scales are IEEE f16 bits.
// The K-quants group 256 elements into a super-block of sub-blocks (8 of 32 for Q4_K and Q5_K,
// 16 of 16 for Q6_K), each sub-block with a small integer scale (and min) of the super-block's
// f16 scale.
#pragma once

#include <cstdint>
#include <cstring>

#include "ssmkit/tensor.hpp"

namespace ssmkit::quant {

inline constexpr int kSuperBlock = 256;  // elements of a K-quant block (GGML's QK_K)

// Q8_0: x[i] = d * qs[i].
struct BlockQ8_0 {
  uint16_t d;  // f16
  int8_t qs[32];
};

// Q4_0: x[i] = d * (q[i] - 8), q[i] = qs[i] & 15 and q[i + 16] = qs[i] >> 4 for i < 16.
struct BlockQ4_0 {
  uint16_t d;  // f16
  uint8_t qs[16];
};

// Q4_1: x[i] = d * q[i] + m, q[i] in [0, 15] the nibbles as in Q4_0.
struct BlockQ4_1 {
  uint16_t d, m;  // f16
  uint8_t qs[16];
};

// Q5_0: x[i] = d * (q[i] - 16), q[i] in [0, 31]: the nibble of qs as in Q4_0, and as its fifth
// bit bit i of qh (a little-endian uint32: element i's bit is bit i % 8 of qh[i / 8]).
struct BlockQ5_0 {
  uint16_t d;  // f16
  uint8_t qh[4];
  uint8_t qs[16];
};

// Q5_1: x[i] = d * q[i] + m, q[i] in [0, 31] as in Q5_0.
struct BlockQ5_1 {
  uint16_t d, m;  // f16
  uint8_t qh[4];
  uint8_t qs[16];
};

// Q4_K: sub-block j (32 elements) has 6-bit scale sc[j] and min m[j] (ScaleMinK4);
// x = d * sc[j] * q - dmin * m[j]. Each 32 bytes of qs hold 64 elements: the low nibbles the
// first 32 (sub-block 2c), the high nibbles the next 32 (sub-block 2c + 1).
struct BlockQ4_K {
  uint16_t d, dmin;  // f16
  uint8_t scales[12];
  uint8_t qs[128];
};

// Q5_K: as Q4_K with q in [0, 31]; the fifth bit of element i of sub-block j is bit j of qh[i].
struct BlockQ5_K {
  uint16_t d, dmin;  // f16
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};

// Q6_K: 16 sub-blocks of 16, x = d * scales[j] * (q - 32), q in [0, 63]. Each half of 128
// elements uses 64 bytes of ql and 32 of qh: for l < 32, elements l, l + 32, l + 64, l + 96
// take the low nibble of ql[l], of ql[l + 32], the high nibble of ql[l], of ql[l + 32], and
// bits 0-1, 2-3, 4-5, 6-7 of qh[l] as their two high bits.
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;  // f16
};

// GGML's sizes (ggml-common.h), which DTypeBlockBytes returns (not constexpr: tensor.cpp);
// tests/quant_test.cpp checks that the two agree.
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);

// Level i (< 32) of a Q4_0 / Q4_1 / Q5_0 / Q5_1 block: its nibble of qs, with bit i of qh as
// the fifth bit when qh is not null.
inline int Level32(const uint8_t* qs, const uint8_t* qh, int i) {
  int q = i < 16 ? (qs[i] & 0xF) : (qs[i - 16] >> 4);
  if (qh != nullptr) q |= ((qh[i / 8] >> (i % 8)) & 1) << 4;
  return q;
}

// The 6-bit scale and min of sub-block j (< 8) of a Q4_K / Q5_K block: for j < 4 the low six
// bits of scales[j] and scales[j + 4]; for j >= 4 the nibbles of scales[j + 4] with the two
// top bits of scales[j - 4] (scale) and scales[j] (min) above them.
inline void ScaleMinK4(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

// ScaleMinK4 for all eight sub-blocks at once, four bytes per word: byte j of *sc and *m is
// sub-block j's scale and min. Sub-blocks 0-3 take the low six bits of bytes 0-3 (scales) and
// 4-7 (mins); 4-7 the nibbles of bytes 8-11 with the top two bits of bytes 0-3 (scales) and
// 4-7 (mins) above them.
inline void ScalesMinsK4(const uint8_t* scales, uint64_t* sc, uint64_t* m) {
  uint32_t w[3];
  std::memcpy(w, scales, sizeof w);
  const uint32_t sc_low = w[0] & 0x3f3f3f3fu, m_low = w[1] & 0x3f3f3f3fu;
  const uint32_t sc_high = (w[2] & 0x0f0f0f0fu) | ((w[0] >> 2) & 0x30303030u);
  const uint32_t m_high = ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u);
  *sc = uint64_t{sc_high} << 32 | sc_low;
  *m = uint64_t{m_high} << 32 | m_low;
}

// dst[i] = element i of the row at src, i < n: every quantized dtype, and f32 / bf16 / f16.
// n is a multiple of DTypeBlockElements(dtype) (the caller checks).
void DequantizeRow(DType dtype, const void* src, int64_t n, float* dst);

// Encodes src[0, n) as dtype (n a multiple of the block; the caller checks): GGML's reference
// quantizers, quantize_row_*_ref. Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 give GGML's bytes exactly;
// the K-quants run the same searches for their scales (and mins), so they match GGML's build
// without fused // multiply-adds. f32 / bf16 / f16 round to nearest.
void QuantizeRow(DType dtype, const float* src, int64_t n, void* dst);

// The dtype a matrix with rows of `cols` elements gets when `requested` is asked for: itself
// when the rows are whole blocks, else, for rows a multiple of 32, llama-quantize's fallback
// (q4_k -> q5_0, q5_k -> q5_1, q6_k -> q8_0), else f16; as `ssmkit quantize` and quantized
// random weights choose.
DType MatrixTypeFor(DType requested, int64_t cols);

}  // namespace ssmkit::quant
