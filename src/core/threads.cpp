#include "ssmkit/threads.hpp"

#include <atomic>
#include <cstdlib>
#include <thread>

namespace ssmkit {
namespace {

int DefaultThreadCount() {
  if (const char* env = std::getenv("SSMKIT_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

std::atomic<int> g_num_threads{0};  // 0: not yet resolved

}  // namespace

void SetNumThreads(int n) { g_num_threads.store(n > 0 ? n : DefaultThreadCount()); }

int NumThreads() {
  int n = g_num_threads.load();
  if (n == 0) {
    n = DefaultThreadCount();
    g_num_threads.store(n);
  }
  return n;
}

}  // namespace ssmkit
