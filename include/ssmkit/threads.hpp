// The library's thread-count setting. Every parallel op uses this many threads; results
// are bit-identical between runs with the same count.
#pragma once

namespace ssmkit {

// n >= 1 sets the count; n <= 0 restores the default (SSMKIT_NUM_THREADS, else all cores).
void SetNumThreads(int n);
int NumThreads();

}  // namespace ssmkit
