// llama.cpp's block formats (core/quant.hpp) and the public QuantizeWeight / DequantizeWeight:
// decoding random valid blocks against a decoder written here from the layout description
// (docs/quantization.md), element by element, bit for bit; encode-then-decode error bounds
// for each format; the ops' argument checks. (python/tests/test_quant.py checks the bytes and
// floats against gguf-py, llama.cpp's own Python implementation.)
#include "core/quant.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "ssmkit/quant.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

constexpr DType kQuantized[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K,
                                DType::kQ6_K, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1};

TEST(QuantFormats, BlockSizesAreGgmls) {
  EXPECT_EQ(sizeof(quant::BlockQ8_0), DTypeBlockBytes(DType::kQ8_0));
  EXPECT_EQ(sizeof(quant::BlockQ4_0), DTypeBlockBytes(DType::kQ4_0));
  EXPECT_EQ(sizeof(quant::BlockQ4_K), DTypeBlockBytes(DType::kQ4_K));
  EXPECT_EQ(sizeof(quant::BlockQ5_K), DTypeBlockBytes(DType::kQ5_K));
  EXPECT_EQ(sizeof(quant::BlockQ6_K), DTypeBlockBytes(DType::kQ6_K));
  EXPECT_EQ(sizeof(quant::BlockQ4_1), DTypeBlockBytes(DType::kQ4_1));
  EXPECT_EQ(sizeof(quant::BlockQ5_0), DTypeBlockBytes(DType::kQ5_0));
  EXPECT_EQ(sizeof(quant::BlockQ5_1), DTypeBlockBytes(DType::kQ5_1));
  for (DType d : {DType::kQ4_1, DType::kQ5_0, DType::kQ5_1}) EXPECT_EQ(DTypeBlockElements(d), 32);
  EXPECT_EQ(DTypeBlockElements(DType::kQ4_K), quant::kSuperBlock);
}

uint16_t F16Bits(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// Element i of one block at `b`, from the layout as docs/quantization.md states it, in f32
// with GGML's order of operations (so the floats must agree bit for bit).
float ReferenceElement(DType dtype, const uint8_t* b, int i) {
  switch (dtype) {
    case DType::kQ8_0: {  // d (f16) | qs[32] int8
      return static_cast<float>(static_cast<int8_t>(b[2 + i])) * F16ToF32(F16Bits(b));
    }
    case DType::kQ4_0: {  // d | qs[16]: element i < 16 the low nibble of qs[i], i + 16 the high
      const int nibble = i < 16 ? (b[2 + i] & 15) : (b[2 + i - 16] >> 4);
      return static_cast<float>(nibble - 8) * F16ToF32(F16Bits(b));
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {  // d | dmin | scales[12] | (qh[32] for Q5_K) | qs[128]
      const uint8_t* scales = b + 4;
      const int j = i / 32;  // sub-block
      // 6-bit scale and min: sub-blocks 0-3 in the low 6 bits of bytes j and j + 4; 4-7 in the
      // nibbles of byte j + 4 with the top 2 bits of bytes j - 4 (scale) and j (min) above.
      const int sc = j < 4 ? scales[j] % 64 : scales[j + 4] % 16 + (scales[j - 4] / 64) * 16;
      const int m = j < 4 ? scales[j + 4] % 64 : scales[j + 4] / 16 + (scales[j] / 64) * 16;
      const bool q5 = dtype == DType::kQ5_K;
      const uint8_t* qs = b + 16 + (q5 ? 32 : 0);
      const int byte = qs[(i / 64) * 32 + i % 32];
      int q = (i / 32) % 2 == 0 ? byte % 16 : byte / 16;
      if (q5) q += ((b[16 + i % 32] >> j) & 1) * 16;
      const float d = F16ToF32(F16Bits(b)), dmin = F16ToF32(F16Bits(b + 2));
      return d * static_cast<float>(sc) * static_cast<float>(q) - dmin * static_cast<float>(m);
    }
    case DType::kQ6_K: {  // ql[128] | qh[64] | scales[16] int8 | d
      const int half = i / 128, r = (i % 128) / 32, l = i % 32;
      const uint8_t low_byte = b[64 * half + l + (r % 2 == 1 ? 32 : 0)];
      const int low = r < 2 ? low_byte % 16 : low_byte / 16;
      const int high = (b[128 + 32 * half + l] >> (2 * r)) % 4;
      const int q = low + 16 * high - 32;
      const float d = F16ToF32(F16Bits(b + 208));
      const auto scale = static_cast<float>(static_cast<int8_t>(b[192 + i / 16]));
      return d * scale * static_cast<float>(q);
    }
    case DType::kQ4_1:    // d | m | qs[16]
    case DType::kQ5_0:    // d | qh[4] | qs[16]
    case DType::kQ5_1: {  // d | m | qh[4] | qs[16]
      // The nibble as in Q4_0; the fifth bit of element i is bit i of qh read as a
      // little-endian uint32.
      const bool min = dtype != DType::kQ5_0, five = dtype != DType::kQ4_1;
      const uint8_t* qh = b + (min ? 4 : 2);
      const uint8_t* qs = qh + (five ? 4 : 0);
      int q = i < 16 ? (qs[i] & 15) : (qs[i - 16] >> 4);
      if (five) {
        const uint32_t bits = qh[0] | (qh[1] << 8) | (qh[2] << 16) | (uint32_t{qh[3]} << 24);
        q += static_cast<int>((bits >> i) & 1) * 16;
      }
      const float d = F16ToF32(F16Bits(b));
      if (!min) return static_cast<float>(q - 16) * d;
      return static_cast<float>(q) * d + F16ToF32(F16Bits(b + 2));
    }
    default:
      return std::nanf("");
  }
}

TEST(QuantFormats, DequantizeMatchesTheLayoutBitForBit) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  for (DType dtype : kQuantized) {
    SCOPED_TRACE(DTypeName(dtype));
    const int64_t blocks = 7, n = blocks * DTypeBlockElements(dtype);
    const std::vector<uint8_t> bytes = RandomBlocks(dtype, blocks, rng);
    std::vector<float> got(static_cast<size_t>(n), std::nanf(""));
    quant::DequantizeRow(dtype, bytes.data(), n, got.data());
    int64_t mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t block = i / DTypeBlockElements(dtype);
      const float want = ReferenceElement(dtype, bytes.data() + block * DTypeBlockBytes(dtype),
                                          static_cast<int>(i % DTypeBlockElements(dtype)));
      if (std::memcmp(&got[i], &want, sizeof want) != 0 && mismatches++ < 5) {
        ADD_FAILURE() << "element " << i << ": got " << got[i] << ", layout says " << want;
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

// The f32 / bf16 / f16 conveniences are the dtype conversions.
TEST(QuantFormats, UnquantizedRowsRoundTrip) {
  const std::vector<float> x = {1.0f, -2.5f, 3.25f, 0.1f};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<uint8_t> bytes(x.size() * DTypeSize(dtype));
    std::vector<float> back(x.size(), std::nanf(""));
    quant::QuantizeRow(dtype, x.data(), 4, bytes.data());
    quant::DequantizeRow(dtype, bytes.data(), 4, back.data());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(back[i], LoadAsF32(bytes.data(), dtype, static_cast<int64_t>(i)));
      EXPECT_NEAR(back[i], x[i], std::fabs(x[i]) * 0.01f) << DTypeName(dtype);
    }
  }
}

// The f32 scale by which sub-block j (of sub elements) of the block at b multiplies its levels,
// and the offset subtracted (Q4_K / Q5_K's min); the levels' range [lo, hi].
struct SubBlock {
  float scale, offset;
  int lo, hi, elements;
};
SubBlock SubBlockOf(DType dtype, const uint8_t* b, int j) {
  switch (dtype) {
    case DType::kQ8_0:
      return {F16ToF32(F16Bits(b)), 0.0f, -127, 127, 32};
    case DType::kQ4_0:
      return {F16ToF32(F16Bits(b)), 0.0f, -8, 7, 32};
    case DType::kQ5_0:
      return {F16ToF32(F16Bits(b)), 0.0f, -16, 15, 32};
    case DType::kQ4_1:
    case DType::kQ5_1:  // x = d q + m: the offset is -m
      return {F16ToF32(F16Bits(b)), -F16ToF32(F16Bits(b + 2)), 0, dtype == DType::kQ4_1 ? 15 : 31,
              32};
    case DType::kQ4_K:
    case DType::kQ5_K: {
      uint8_t sc, m;
      quant::ScaleMinK4(j, b + 4, &sc, &m);
      return {F16ToF32(F16Bits(b)) * sc, F16ToF32(F16Bits(b + 2)) * m, 0,
              dtype == DType::kQ4_K ? 15 : 31, 32};
    }
    default:
      return {F16ToF32(F16Bits(b + 208)) * static_cast<int8_t>(b[192 + j]), 0.0f, -32, 31, 16};
  }
}

// Encode then decode: every element's level is the nearest one the stored scales offer (so the
// error is at most half a step, or the distance to the end of the levels' range when clamped;
// Q8_0 never clamps, Q4_0 only on the side opposite its largest element, by at most one step),
// and over a row of normal values the rms error relative to the rms value stays within what
// each format's bits allow.
TEST(QuantFormats, QuantizeThenDequantizeErrorBounds) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  // rms error / rms value for N(0, 1) rows; measured 0.0052-0.0055, 0.084-0.090, 0.070-0.073,
  // 0.035-0.037, 0.0176-0.0180, 0.076-0.081 (q4_1), 0.041-0.045 (q5_0), 0.037-0.039 (q5_1)
  // over 9 seeds; bound with 20-25% margin.
  const double kMaxRelativeRms[] = {0.0065, 0.105, 0.085, 0.045, 0.022, 0.1, 0.055, 0.048};
  static_assert(std::size(kMaxRelativeRms) == std::size(kQuantized));
  for (int f = 0; f < static_cast<int>(std::size(kQuantized)); ++f) {
    const DType dtype = kQuantized[f];
    SCOPED_TRACE(DTypeName(dtype));
    const int64_t B = DTypeBlockElements(dtype), n = 16 * 256;
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      // Mostly N(0, 1), a few blocks scaled far down and one block all zero.
      const int64_t block = i / B;
      const double scale = block == 3 ? 0.0 : (block % 5 == 1 ? 1e-3 : 1.0);
      x[i] = static_cast<float>(scale * rng.Normal());
    }
    std::vector<uint8_t> bytes(static_cast<size_t>(DTypeRowBytes(dtype, n)));
    std::vector<float> back(static_cast<size_t>(n), std::nanf(""));
    quant::QuantizeRow(dtype, x.data(), n, bytes.data());
    quant::DequantizeRow(dtype, bytes.data(), n, back.data());
    double err2 = 0.0, x2 = 0.0;
    int64_t violations = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(back[i])) << "element " << i;
      const int64_t block = i / B;
      const int within = static_cast<int>(i % B);
      const uint8_t* b = bytes.data() + block * DTypeBlockBytes(dtype);
      const SubBlock s = SubBlockOf(dtype, b, dtype == DType::kQ6_K ? within / 16 : within / 32);
      const double step = std::fabs(s.scale);
      // Where x falls among the levels: (x + offset) / scale, clamped to the range.
      const double level = s.scale != 0.0f ? (x[i] + s.offset) / s.scale : 0.0;
      const double clamped =
          std::clamp(level, static_cast<double>(s.lo), static_cast<double>(s.hi));
      double bound = 0.5 * step + std::fabs(level - clamped) * step;
      if (s.scale == 0.0f) bound = std::fabs(x[i] + s.offset);
      // Q8_0, Q4_0, Q5_0, Q4_1 and Q5_1 choose q with the f32 scale d, then store d as f16 (off
      // by at most half an f16 step, relative 2^-11 or absolute 2^-25 below f16's normal range).
      const double f16_error = std::max(step / 2048.0, std::ldexp(1.0, -25));
      if (dtype == DType::kQ8_0) {
        bound = 0.5 * (step + f16_error) + 127.0 * f16_error;
      } else if (dtype == DType::kQ4_0 || dtype == DType::kQ5_0) {
        bound = step + f16_error + (s.hi + 1) * f16_error;
      } else if (dtype == DType::kQ4_1 || dtype == DType::kQ5_1) {
        // Level round((x - min) / d), never clamped, with the f32 d and min; both stored as
        // f16 (the min off by its own rounding, relative 2^-11 or absolute 2^-25).
        const double min_error = std::max(std::fabs(s.offset) / 2048.0, std::ldexp(1.0, -25));
        bound = 0.5 * (step + f16_error) + s.hi * f16_error + min_error;
      }
      // f32 rounding of the quantizer's (x + offset) / scale and of the decoder's products.
      const double slack =
          1e-5 * bound + 1e-6 * (std::fabs(x[i]) + std::fabs(s.offset) + step * s.hi);
      const double err = std::fabs(static_cast<double>(back[i]) - x[i]);
      if (err > bound + slack && violations++ < 5) {
        ADD_FAILURE() << "element " << i << ": x " << x[i] << " decoded " << back[i] << ", error "
                      << err << " > bound " << bound;
      }
      if (block != 3 && block % 5 != 1) {
        err2 += err * err;
        x2 += static_cast<double>(x[i]) * x[i];
      }
      if (block == 3) {
        EXPECT_EQ(back[i], 0.0f) << "an all-zero block decodes to zeros";
      }
    }
    EXPECT_EQ(violations, 0);
    EXPECT_LE(std::sqrt(err2 / x2), kMaxRelativeRms[f]);
    std::printf("%s: rms error / rms value %.4f\n", DTypeName(dtype), std::sqrt(err2 / x2));
  }
}

// A few bytes with known values, worked by hand from the layouts: d = 0.5 (f16 0x3800).
TEST(QuantFormats, KnownBlocks) {
  quant::BlockQ8_0 q8{};
  q8.d = 0x3800;
  q8.qs[0] = -3;
  q8.qs[31] = 127;
  std::vector<float> y(32);
  quant::DequantizeRow(DType::kQ8_0, &q8, 32, y.data());
  EXPECT_EQ(y[0], -1.5f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[31], 63.5f);
  quant::BlockQ4_0 q4{};
  q4.d = 0x3800;
  q4.qs[0] = 0xF0;  // element 0: 0 - 8, element 16: 15 - 8
  quant::DequantizeRow(DType::kQ4_0, &q4, 32, y.data());
  EXPECT_EQ(y[0], -4.0f);
  EXPECT_EQ(y[16], 3.5f);
  EXPECT_EQ(y[1], -4.0f);  // qs[1] = 0: level 0 - 8
  // Q8_0 encodes its largest magnitude as +-127 and rounds half away from zero.
  std::vector<float> x(32, 0.0f);
  x[0] = -127.0f;
  x[5] = 2.5f;
  quant::QuantizeRow(DType::kQ8_0, x.data(), 32, &q8);
  EXPECT_EQ(q8.d, F32ToF16(1.0f));
  EXPECT_EQ(q8.qs[0], -127);
  EXPECT_EQ(q8.qs[5], 3);
  // Q5_0: the fifth bit of element i is bit i % 8 of qh[i / 8]; x = (q - 16) d.
  quant::BlockQ5_0 q5{};
  q5.d = 0x3800;
  q5.qh[0] = 0x01;   // element 0
  q5.qh[3] = 0x80;   // element 31
  q5.qs[0] = 0xF0;   // element 0: 0 | 16, element 16: 15
  q5.qs[15] = 0x3F;  // element 15: 15, element 31: 3 | 16
  quant::DequantizeRow(DType::kQ5_0, &q5, 32, y.data());
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[15], -0.5f);
  EXPECT_EQ(y[16], -0.5f);
  EXPECT_EQ(y[31], 1.5f);
  EXPECT_EQ(y[1], -8.0f);
  // Q4_1 and Q5_1: x = d q + m, m = -1 (f16 0xBC00); Q5_1's element 16 has its fifth bit.
  const auto with_min = [&](DType dtype, auto block, float want16) {
    block.d = 0x3800;
    block.m = 0xBC00;
    block.qs[0] = 0x21;  // element 0: 1, element 16: 2
    if constexpr (requires { block.qh; }) block.qh[2] = 0x01;
    quant::DequantizeRow(dtype, &block, 32, y.data());
    EXPECT_EQ(y[0], -0.5f) << DTypeName(dtype);
    EXPECT_EQ(y[16], want16) << DTypeName(dtype);
    EXPECT_EQ(y[1], -1.0f) << DTypeName(dtype);
  };
  with_min(DType::kQ4_1, quant::BlockQ4_1{}, 0.0f);  // 2 * 0.5 - 1
  with_min(DType::kQ5_1, quant::BlockQ5_1{}, 8.0f);  // 18 * 0.5 - 1
  // Q5_0 maps its largest magnitude to level 0 (d = max / -16) and truncates x / d + 16.5;
  // Q4_1 spans [min, max] in 15 steps, truncating (x - min) / d + 0.5.
  x[0] = -16.0f;
  quant::QuantizeRow(DType::kQ5_0, x.data(), 32, &q5);
  EXPECT_EQ(q5.d, F32ToF16(1.0f));
  EXPECT_EQ(q5.qs[0] & 0xF, 0);  // level 0
  EXPECT_EQ(q5.qs[5] & 0xF, 3);  // 2.5 + 16.5 = 19: nibble 3, fifth bit set
  EXPECT_EQ(q5.qh[0], 0xFE);     // elements 1-7 (levels 16, 19) have the fifth bit
  x[0] = 0.0f;
  x[2] = 15.0f;
  x[3] = 7.5f;  // (7.5 - 0) / 1 + 0.5 = 8: a tie rounds up
  x[5] = 2.25f;
  quant::BlockQ4_1 q41{};
  quant::QuantizeRow(DType::kQ4_1, x.data(), 32, &q41);
  EXPECT_EQ(q41.d, F32ToF16(1.0f));
  EXPECT_EQ(q41.m, F32ToF16(0.0f));
  EXPECT_EQ(q41.qs[2], 15);
  EXPECT_EQ(q41.qs[3], 8);
  EXPECT_EQ(q41.qs[5], 2);
}

// The public ops: shapes, dtypes and the bytes of QuantizeRow / DequantizeRow row by row,
// split over threads.
TEST(QuantizeWeight, RowsOverThreadsEqualQuantizeRow) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  ScopedThreads threads(2);
  const int64_t M = 67, K = 1024;
  std::vector<float> x(static_cast<size_t>(M * K));
  for (float& v : x) v = static_cast<float>(rng.Normal());
  for (DType dtype : kQuantized) {
    SCOPED_TRACE(DTypeName(dtype));
    const int64_t row_bytes = DTypeRowBytes(dtype, K);
    std::vector<uint8_t> q(static_cast<size_t>(M * row_bytes), 0xA5);
    ASSERT_TRUE(QuantizeWeight(Tensor::Contiguous(x.data(), DType::kF32, {M, K}),
                               Tensor::Contiguous(q.data(), dtype, {M, K}))
                    .ok());
    std::vector<float> back(static_cast<size_t>(M * K), std::nanf(""));
    ASSERT_TRUE(DequantizeWeight(Tensor::Contiguous(q.data(), dtype, {M, K}),
                                 Tensor::Contiguous(back.data(), DType::kF32, {M, K}))
                    .ok());
    std::vector<uint8_t> row(static_cast<size_t>(row_bytes));
    std::vector<float> row_back(static_cast<size_t>(K));
    for (int64_t m = 0; m < M; m += 11) {
      quant::QuantizeRow(dtype, x.data() + m * K, K, row.data());
      EXPECT_EQ(std::memcmp(row.data(), q.data() + m * row_bytes, row.size()), 0) << "row " << m;
      quant::DequantizeRow(dtype, row.data(), K, row_back.data());
      EXPECT_EQ(std::memcmp(row_back.data(), back.data() + m * K, K * sizeof(float)), 0)
          << "row " << m;
    }
  }
}

// One rule each: the message names the argument, the expected and the given.
TEST(QuantizeWeight, Errors) {
  std::vector<float> x(4 * 64, 1.0f);
  std::vector<uint8_t> q(4 * 64 * 2, 0);
  const Tensor xv = Tensor::Contiguous(x.data(), DType::kF32, {4, 64});
  const Tensor qv = Tensor::Contiguous(q.data(), DType::kQ8_0, {4, 64});
  const auto expect = [](const Status& s, std::initializer_list<const char*> fragments) {
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.message();
    for (const char* f : fragments) {
      EXPECT_NE(s.message().find(f), std::string::npos) << s.message();
    }
  };
  ASSERT_TRUE(QuantizeWeight(xv, qv).ok());
  Tensor bad = qv;
  bad.dtype = DType::kBF16;
  expect(QuantizeWeight(xv, bad), {"quantize: q", "dtype q8_0 or q4_0", "given bf16"});
  bad = Tensor::Contiguous(q.data(), DType::kQ4_K, {2, 128});
  expect(QuantizeWeight(Tensor::Contiguous(x.data(), DType::kF32, {2, 128}), bad),
         {"quantize: q", "K a multiple of q4_k's block of 256", "K = 128"});
  bad = Tensor::Contiguous(x.data(), DType::kF32, {4, 32});
  expect(QuantizeWeight(bad, qv), {"quantize: x", "(M, K) = (4, 64)", "(4, 32)"});
  bad = xv;
  bad.dtype = DType::kF16;
  expect(DequantizeWeight(qv, bad), {"dequantize: x", "dtype f32", "f16"});
  expect(DequantizeWeight(Tensor{}, xv), {"dequantize: q", "null"});
  bad = qv;
  bad.strides[0] = 128;
  expect(DequantizeWeight(bad, xv), {"dequantize: q", "contiguous", "(128, 1)"});
  DType parsed = DType::kF32;
  EXPECT_TRUE(DTypeFromName("q5_k", &parsed));
  EXPECT_EQ(parsed, DType::kQ5_K);
  EXPECT_TRUE(DTypeFromName("q5_1", &parsed));
  EXPECT_EQ(parsed, DType::kQ5_1);
  EXPECT_FALSE(DTypeFromName("q3_k", &parsed));
}

}  // namespace
}  // namespace ssmkit::testing
