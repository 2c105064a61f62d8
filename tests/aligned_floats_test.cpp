// AlignedFloats (src/core/aligned_floats.hpp): data() on a cache line whatever the size and the
// allocator's history, zeroed by Assign, kept by a Grow that asks for no more, usable to its end.
#include "core/aligned_floats.hpp"

#include <cstdint>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

namespace ssmkit::testing {
namespace {

bool OnCacheLine(const float* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

TEST(AlignedFloats, AssignStartsOnACacheLineZeroed) {
  // Small allocations in between shift where the allocator places the next buffer.
  std::vector<std::unique_ptr<char[]>> shifts;
  for (size_t n : {size_t{1}, size_t{3}, size_t{17}, size_t{1000}, size_t{4099}, size_t{1} << 20}) {
    for (int shift = 0; shift < 4; ++shift) {
      shifts.emplace_back(new char[16 * shift + 8]);
      AlignedFloats buffer;
      buffer.Assign(n);
      ASSERT_TRUE(OnCacheLine(buffer.data())) << "n " << n << " shift " << shift;
      ASSERT_EQ(buffer.size(), n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(buffer.data()[i], 0.0f) << "n " << n << " i " << i;
      buffer.data()[n - 1] = 1.0f;  // the last float is the buffer's own
    }
  }
}

TEST(AlignedFloats, GrowKeepsASufficientBufferAndAlignsANewOne) {
  AlignedFloats buffer;
  buffer.Assign(100);
  float* before = buffer.data();
  buffer.Grow(60);
  EXPECT_EQ(buffer.data(), before);
  EXPECT_EQ(buffer.size(), 100u);
  buffer.Grow(300000);
  EXPECT_TRUE(OnCacheLine(buffer.data()));
  EXPECT_EQ(buffer.size(), 300000u);
  for (size_t i = 0; i < buffer.size(); ++i) buffer.data()[i] = static_cast<float>(i);
  EXPECT_EQ(buffer.data()[299999], 299999.0f);
}

TEST(AlignedFloats, EmptyBufferHasAnAlignedPointer) {
  AlignedFloats buffer;
  buffer.Assign(0);
  EXPECT_EQ(buffer.size(), 0u);
  EXPECT_TRUE(OnCacheLine(buffer.data()));
}

}  // namespace
}  // namespace ssmkit::testing
