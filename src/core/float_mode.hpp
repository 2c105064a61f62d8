// The calling thread's floating-point mode (x86's MXCSR, AArch64's FPCR), carried into the
// worker threads of a parallel region (core/parallel.hpp), and denormals flushed to zero for
// the length of a state-space or attention kernel.
//
// Why flush: a Mamba state decays by exp(dt * A) per step; with dt * A below about -87 that
// factor, and from it the state, falls below f32's smallest normal (1.2e-38), and every
// multiply-add on a denormal operand takes a microcode assist. The Mamba-1 scan at the
// policy shape ran 5x slower with dt = 6 (A = -1..-16) and 10x with dt = 10 on an Intel Xeon
// (docs/benchmarks.md). Flushed, such a value is 0 instead of under 1.2e-38: what CUDA's
// fast-math kernels (mamba_ssm's), and TensorFlow's CPU thread pools, compute.
#pragma once

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace ssmkit {

#if defined(__x86_64__) || defined(__i386__)
// MXCSR's FTZ (results) and DAZ (operands).
inline constexpr uint64_t kFlushDenormalBits = 0x8000 | 0x0040;
inline uint64_t CurrentFloatMode() { return _mm_getcsr(); }
inline void SetFloatMode(uint64_t mode) { _mm_setcsr(static_cast<unsigned int>(mode)); }
#elif defined(__aarch64__)
// FPCR's FZ: denormal operands and results of single and double precision are zero.
inline constexpr uint64_t kFlushDenormalBits = uint64_t{1} << 24;
inline uint64_t CurrentFloatMode() {
  uint64_t fpcr;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  return fpcr;
}
inline void SetFloatMode(uint64_t mode) { __asm__ volatile("msr fpcr, %0" : : "r"(mode)); }
#else
inline constexpr uint64_t kFlushDenormalBits = 0;
inline uint64_t CurrentFloatMode() { return 0; }
inline void SetFloatMode(uint64_t) {}
#endif

// Sets this thread's mode to `mode` while it lives (nothing when it already is), then restores
// the previous one.
class ScopedFloatMode {
 public:
  explicit ScopedFloatMode(uint64_t mode) : saved_(CurrentFloatMode()), changed_(mode != saved_) {
    if (changed_) SetFloatMode(mode);
  }
  ~ScopedFloatMode() {
    if (changed_) SetFloatMode(saved_);
  }
  ScopedFloatMode(const ScopedFloatMode&) = delete;
  ScopedFloatMode& operator=(const ScopedFloatMode&) = delete;

 private:
  uint64_t saved_;
  bool changed_;
};

// Denormals flushed to zero on this thread, and in the parallel regions it starts, while it
// lives.
class FlushDenormals {
 public:
  FlushDenormals() : mode_(CurrentFloatMode() | kFlushDenormalBits) {}

 private:
  ScopedFloatMode mode_;
};

}  // namespace ssmkit
