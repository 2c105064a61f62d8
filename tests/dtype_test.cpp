// The portable f16 conversions (src/core/dtype.hpp), which builds without a binary16 type use,
// against the compiler's (_Float16, or __fp16 on ARM): every one of the 65536 f16 bit patterns
// widened, and f32 values on and around every f16 rounding boundary (halfway points,
// subnormals, overflow) narrowed.
#include "core/dtype.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

#if defined(SSMKIT_NATIVE_F16)
uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

TEST(DTypeF16, EveryHalfWidensAsTheCompilerDoes) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    ASSERT_EQ(Bits(F16ToF32Portable(bits)), Bits(F16ToF32(bits))) << std::hex << h;
  }
}

TEST(DTypeF16, NarrowingRoundsAsTheCompilerDoes) {
  // Each f16 value's f32 image, the midpoints to its neighbours and one ulp either side of
  // them: every tie and every near-tie of round-to-nearest-even, subnormals and overflow
  // included.
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    const uint32_t b = Bits(f);
    for (int64_t delta : {-4097, -4096, -4095, -1, 0, 1, 4095, 4096, 4097}) {
      const float x = FromBits(static_cast<uint32_t>(static_cast<int64_t>(b) + delta));
      ASSERT_EQ(F32ToF16Portable(x), F32ToF16(x)) << std::hexfloat << x;
    }
  }
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::mt19937 rng(static_cast<uint32_t>(seed));
  for (int i = 0; i < 1000000; ++i) {
    const float x = FromBits(static_cast<uint32_t>(rng()));
    ASSERT_EQ(F32ToF16Portable(x), F32ToF16(x)) << std::hexfloat << x;
  }
}
#else
TEST(DTypeF16, PortablePathIsTheOnlyOne) {
  GTEST_SKIP() << "no binary16 type in this compiler to compare with (the portable path is in use)";
}
#endif

}  // namespace
}  // namespace ssmkit::testing
