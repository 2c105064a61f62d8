#include "bench_harness.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/parallel.hpp"
#include "core/simd_targets.hpp"
#include "cpu/amx.hpp"
#include "cpu/quant_linear.hpp"
#include "fma_rate.hpp"
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

ColdRead::ColdRead(double buffer_bytes)
    : words_(static_cast<int64_t>(buffer_bytes / 8)),
      buffer_(static_cast<size_t>(words_), 1),
      sums_(64, 0) {}

void ColdRead::operator()(double bytes) {
  const int64_t n = std::min(words_, static_cast<int64_t>(bytes / 8));
  const int64_t begin = next_ + n > words_ ? 0 : next_;
  next_ = begin + n;
  ParallelFor(n, [&](int64_t b0, int64_t b1, int block) {
    const uint64_t* w = buffer_.data() + begin;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    int64_t i = b0;
    for (; i + 4 <= b1; i += 4) {
      a += w[i];
      b += w[i + 1];
      c += w[i + 2];
      d += w[i + 3];
    }
    for (; i < b1; ++i) a += w[i];
    sums_[block % 64] += a + b + c + d;
  });
}

std::string CpuName() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

bool ForceTarget(const std::string& name) {
  if (name.empty()) return true;
  const std::string wanted = Lower(name);
  // "avx3-novnni": the AVX-512 kernels without VNNI (nor AMX), offered on a CPU that has it
  // (cpu::SetQuantDotVnni); "avx3-noamx": with VNNI, without AMX's tile multiplies
  // (cpu::SetAmx).
  const bool vnni = cpu::QuantDotVnni(), amx = (cpu::AmxInt8() || cpu::AmxBf16());
  const bool no_vnni = vnni && wanted == "avx3-novnni", no_amx = amx && wanted == "avx3-noamx";
  std::string choices;
  for (int64_t target : CompiledSimdTargets()) {
    const std::string candidate = Lower(SimdTargetName(target));
    if (candidate == wanted || ((no_vnni || no_amx) && candidate == "avx3")) {
      ForceSimdTarget(target);
      if (no_vnni) cpu::SetQuantDotVnni(false);
      if (no_vnni || no_amx) cpu::SetAmx(false);
      return true;
    }
    choices += (choices.empty() ? "" : ", ") + candidate;
    if (vnni && candidate == "avx3") choices += ", avx3-novnni";
    if (amx && candidate == "avx3") choices += ", avx3-noamx";
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
                            {"simd_target", DispatchedTargetName()},
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
  std::printf("SIMD target %s, %d threads\n", DispatchedTargetName().c_str(), NumThreads());
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
