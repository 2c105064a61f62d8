// Software prefetch ahead of the single weight stream of the products that read one weight
// row at a time (one row of x, and the row formats' few-rows kernel): each thread reads its
// rows front to back. Whether it pays depends on the CPU's own prefetchers, so it is chosen
// per vendor at run time:
// - Intel: on the Xeon (AVX-512, 2 cores of a VM) the hardware prefetchers alone held the
//   batch-1 bf16 decode of m2-130m at 58-61% of the read probe; with every line fetched into
//   L2 (`prefetcht1`) 4 KiB ahead of the loads, 78-84% (2 KiB ahead 69-70%, 16 KiB 75%;
//   `prefetcht0` 64-66%, `prefetchnta` 38%), and Q4_K's 39-51% became 86-93%.
// - Elsewhere none: on AMD EPYCs the batch-1 decode ran at 80-94% of the probe without it,
//   software prefetch in the bf16/f32 rows was 9-38% slower there, and a prefetch three rows
//   ahead made m1-2.8b's Q8_0 decode 7.9-8.8 tokens/s against 11.1-11.5 (Zen 4).
// docs/benchmarks.md has the runs. Tuned for speed only: prefetches change no result and never
// fault, so those past the end of the weights are harmless.
#pragma once

#include <cstdint>

namespace ssmkit::cpu {

inline constexpr int64_t kIntelStreamPrefetchBytes = 4096;

// How far ahead of its loads a weight stream prefetches on this CPU; 0: not at all.
inline int64_t StreamPrefetchBytes() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const int64_t bytes = __builtin_cpu_is("intel") ? kIntelStreamPrefetchBytes : 0;
  return bytes;
#else
  return 0;
#endif
}

// Fetches into L2 the cache lines of [from, from + bytes).
inline void PrefetchLines(const void* from, int64_t bytes) {
  const char* p = static_cast<const char*>(from);
  for (int64_t i = 0; i < bytes; i += 64) __builtin_prefetch(p + i, /*rw=*/0, /*locality=*/2);
}

}  // namespace ssmkit::cpu
