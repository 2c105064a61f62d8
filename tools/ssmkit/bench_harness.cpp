#include "bench_harness.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/simd_targets.hpp"
#include "ssmkit/threads.hpp"

namespace ssmkit::bench {

std::vector<Suite>& Suites() {
  static std::vector<Suite> suites;
  return suites;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

std::vector<double> MedianMsInterleaved(const Options& options,
                                        const std::vector<std::function<void()>>& fns) {
  // Warm up for options.warmup runs and at least kMinWarmup of wall time: for the first ~100 ms
  // of a process a new worker thread can share a core with the calling thread (until the
  // kernel's load balancer moves it), which made a 0.1 ms op time at 4-8 ms per call.
  constexpr std::chrono::milliseconds kMinWarmup{300};
  const auto warm_start = std::chrono::steady_clock::now();
  for (int i = 0; i < options.warmup || std::chrono::steady_clock::now() - warm_start < kMinWarmup;
       ++i) {
    for (const auto& fn : fns) fn();
  }
  std::vector<std::vector<double>> ms(fns.size());
  for (int i = 0; i < std::max(1, options.runs); ++i) {
    for (size_t k = 0; k < fns.size(); ++k) {
      const auto start = std::chrono::steady_clock::now();
      fns[k]();
      const auto stop = std::chrono::steady_clock::now();
      ms[k].push_back(std::chrono::duration<double, std::milli>(stop - start).count());
    }
  }
  std::vector<double> medians;
  for (std::vector<double>& v : ms) medians.push_back(Median(std::move(v)));
  return medians;
}

double MedianMs(const Options& options, const std::function<void()>& fn) {
  return MedianMsInterleaved(options, {fn})[0];
}

namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

bool ForceTarget(const std::string& name) {
  if (name.empty()) return true;
  std::string choices;
  for (int64_t target : CompiledSimdTargets()) {
    const std::string candidate = Lower(SimdTargetName(target));
    if (candidate == Lower(name)) {
      ForceSimdTarget(target);
      return true;
    }
    choices += (choices.empty() ? "" : ", ") + candidate;
  }
  std::fprintf(stderr,
               "--target: expected one of the SIMD targets this build runs here (%s), got %s\n",
               choices.c_str(), name.c_str());
  return false;
}

void Print(const Options& options, const std::vector<Result>& results) {
  if (options.json) {
    nlohmann::json array = nlohmann::json::array();
    for (const Result& r : results) {
      nlohmann::json row = {{"op", r.op},
                            {"shape", r.shape},
                            {"algo", r.algo},
                            {"pass", r.pass},
                            {"ms", r.ms},
                            {"gb_per_s", r.bytes / r.ms / 1e6},
                            {"ns_per_" + r.element_name, r.ms * 1e6 / r.elements},
                            {"simd_target", SimdTargetName(DispatchedSimdTarget())},
                            {"threads", NumThreads()}};
      if (r.peer_ms > 0) {
        row["peer"] = r.peer;
        row["peer_ms"] = r.peer_ms;
        row["speedup_vs_peer"] = r.peer_ms / r.ms;
      }
      array.push_back(row);
    }
    std::printf("%s\n", array.dump(1).c_str());
    return;
  }
  std::printf("SIMD target %s, %d threads\n", SimdTargetName(DispatchedSimdTarget()).c_str(),
              NumThreads());
  std::printf("%-16s %-13s %-14s %-8s %11s %9s %13s  %s\n", "op", "shape", "algo", "pass",
              "median ms", "GB/s", "ns/element", "peer");
  for (const Result& r : results) {
    std::string peer = "-";
    if (r.peer_ms > 0) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "%.3f ms %s (%.1fx)", r.peer_ms, r.peer.c_str(),
                    r.peer_ms / r.ms);
      peer = buf;
    }
    std::printf("%-16s %-13s %-14s %-8s %11.4f %9.2f %13.4f  %s\n", r.op.c_str(), r.shape.c_str(),
                r.algo.c_str(), r.pass.c_str(), r.ms, r.bytes / r.ms / 1e6, r.ms * 1e6 / r.elements,
                peer.c_str());
  }
}

}  // namespace ssmkit::bench
