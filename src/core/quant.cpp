// Decoding llama.cpp's block formats (core/quant.hpp) to f32, one block at a time. Each product
// is evaluated in the order GGML's dequantize_row_* and gguf-py's dequantize write it (for the
// K-quants (d * sc) * q - dmin * m), in f32 without fused multiply-adds, so the floats are
// theirs bit for bit (python/tests/test_quant.py checks against gguf-py).
#include <cstring>

#include "core/dtype.hpp"
#include "core/quant.hpp"

namespace ssmkit::quant {
namespace {

void DecodeQ8_0(const BlockQ8_0& b, float* y) {  // y: (32)
  const float d = F16ToF32(b.d);
  for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(b.qs[i]) * d;
}

// Q4_0, Q4_1, Q5_0 and Q5_1: q = Level32 (qh null for the 4-bit ones); x = (q - offset) * d,
// + m for the formats with a min (m16 not null).
void DecodeQ32(uint16_t d16, const uint16_t* m16, const uint8_t* qh, const uint8_t* qs, int offset,
               float* y) {  // y: (32)
  const float d = F16ToF32(d16);
  for (int i = 0; i < 32; ++i) {
    y[i] = static_cast<float>(Level32(qs, qh, i) - offset) * d;
    if (m16 != nullptr) y[i] += F16ToF32(*m16);
  }
}

// Q4_K and Q5_K: qh is null for Q4_K.
void DecodeK4K5(uint16_t d16, uint16_t dmin16, const uint8_t* scales, const uint8_t* qh,
                const uint8_t* qs, float* y) {  // y: (256)
  const float d = F16ToF32(d16), dmin = F16ToF32(dmin16);
  for (int j = 0; j < 8; ++j) {  // sub-block j: nibble (j % 2) of qs[32 * (j / 2) + l]
    uint8_t sc, m;
    ScaleMinK4(j, scales, &sc, &m);
    const float dj = d * static_cast<float>(sc), mj = dmin * static_cast<float>(m);
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      int v = (q[l] >> shift) & 0xF;
      if (qh != nullptr) v |= ((qh[l] >> j) & 1) << 4;
      y[32 * j + l] = dj * static_cast<float>(v) - mj;
    }
  }
}

void DecodeQ6_K(const BlockQ6_K& b, float* y) {  // y: (256)
  const float d = F16ToF32(b.d);
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b.ql + 64 * half;
    const uint8_t* qh = b.qh + 32 * half;
    float* yh = y + 128 * half;
    for (int l = 0; l < 32; ++l) {
      // Elements l + 32 * r for r < 4: nibble r / 2 of ql[l + 32 * (r % 2)], bits 2r of qh[l].
      for (int r = 0; r < 4; ++r) {
        const int low = (ql[l + 32 * (r % 2)] >> (4 * (r / 2))) & 0xF;
        const int q = (low | (((qh[l] >> (2 * r)) & 3) << 4)) - 32;
        const int e = l + 32 * r;
        const float scale = d * static_cast<float>(b.scales[8 * half + e / 16]);
        yh[e] = scale * static_cast<float>(q);
      }
    }
  }
}

template <class Block, class Decode>
void DecodeBlocks(const void* src, int64_t n, int64_t block_elements, float* dst, Decode decode) {
  const uint8_t* bytes = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n / block_elements; ++i) {
    Block b;  // memcpy: a row need not be aligned for the block's f16 fields
    std::memcpy(&b, bytes + i * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
    decode(b, dst + i * block_elements);
  }
}

}  // namespace

void DequantizeRow(DType dtype, const void* src, int64_t n, float* dst) {
  switch (dtype) {
    case DType::kQ8_0:
      return DecodeBlocks<BlockQ8_0>(src, n, 32, dst, DecodeQ8_0);
    case DType::kQ4_0:
      return DecodeBlocks<BlockQ4_0>(src, n, 32, dst, [](const BlockQ4_0& b, float* y) {
        DecodeQ32(b.d, nullptr, nullptr, b.qs, 8, y);
      });
    case DType::kQ4_1:
      return DecodeBlocks<BlockQ4_1>(src, n, 32, dst, [](const BlockQ4_1& b, float* y) {
        DecodeQ32(b.d, &b.m, nullptr, b.qs, 0, y);
      });
    case DType::kQ5_0:
      return DecodeBlocks<BlockQ5_0>(src, n, 32, dst, [](const BlockQ5_0& b, float* y) {
        DecodeQ32(b.d, nullptr, b.qh, b.qs, 16, y);
      });
    case DType::kQ5_1:
      return DecodeBlocks<BlockQ5_1>(src, n, 32, dst, [](const BlockQ5_1& b, float* y) {
        DecodeQ32(b.d, &b.m, b.qh, b.qs, 0, y);
      });
    case DType::kQ4_K:
      return DecodeBlocks<BlockQ4_K>(src, n, kSuperBlock, dst, [](const BlockQ4_K& b, float* y) {
        DecodeK4K5(b.d, b.dmin, b.scales, nullptr, b.qs, y);
      });
    case DType::kQ5_K:
      return DecodeBlocks<BlockQ5_K>(src, n, kSuperBlock, dst, [](const BlockQ5_K& b, float* y) {
        DecodeK4K5(b.d, b.dmin, b.scales, b.qh, b.qs, y);
      });
    case DType::kQ6_K:
      return DecodeBlocks<BlockQ6_K>(src, n, kSuperBlock, dst, DecodeQ6_K);
    default:
      for (int64_t i = 0; i < n; ++i) dst[i] = LoadAsF32(src, dtype, i);
      return;
  }
}

DType MatrixTypeFor(DType requested, int64_t cols) {
  if (cols % DTypeBlockElements(requested) == 0) return requested;
  if (!DTypeIsQuantized(requested) || cols % 32 != 0) return DType::kF16;
  switch (requested) {  // llama-quantize's fallbacks (llama-quant.cpp)
    case DType::kQ4_K:
      return DType::kQ5_0;
    case DType::kQ5_K:
      return DType::kQ5_1;
    default:
      return DType::kQ8_0;
  }
}

}  // namespace ssmkit::quant
