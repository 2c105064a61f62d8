#include "peer_ggml.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <regex>

#include "ssmkit/threads.hpp"

namespace ssmkit::bench {

std::string GgmlSsmScanCase(int64_t dstate, int64_t headdim, int64_t nheads, int64_t ngroups,
                            int64_t seqlen, int64_t batch) {
  return "SSM_SCAN(type=f32,d_state=" + std::to_string(dstate) +
         ",head_dim=" + std::to_string(headdim) + ",n_head=" + std::to_string(nheads) +
         ",n_group=" + std::to_string(ngroups) + ",n_seq_tokens=" + std::to_string(seqlen) +
         ",n_seqs=" + std::to_string(batch) + ",xbc_overlap=0,K=1,weak_decay=0)";
}

std::string GgmlSsmConvCase(int64_t dim, int64_t seqlen, int64_t batch, int64_t width) {
  const std::string ne_a = "[" + std::to_string(seqlen + width - 1) + "," + std::to_string(dim) +
                           "," + std::to_string(batch) + ",1]";
  const std::string ne_b = "[" + std::to_string(width) + "," + std::to_string(dim) + ",1,1]";
  return "SSM_CONV(type=f32,ne_a=" + ne_a + ",ne_b=" + ne_b + ")";
}

std::map<std::string, double> ParseGgmlPerfOutput(std::string_view output) {
  // print_perf_console: "  %s(%s): " padding "    %8d runs - %8.2f us/run - ...".
  static const std::regex kLine(R"(^\s*([A-Z0-9_]+\(.*\)):\s+\d+ runs -\s+([0-9.]+) us/run)");
  std::map<std::string, double> ms;
  size_t start = 0;
  while (start < output.size()) {
    size_t end = output.find('\n', start);
    if (end == std::string_view::npos) end = output.size();
    const std::string line(output.substr(start, end - start));
    std::smatch m;
    if (std::regex_search(line, m, kLine)) ms[m[1].str()] = std::stod(m[2].str()) / 1000.0;
    start = end + 1;
  }
  return ms;
}

std::string ShellQuote(std::string_view text) {
  std::string quoted = "'";
  for (char c : text) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

bool RunGgmlPerf(const std::string& binary, const std::vector<std::string>& cases, int threads,
                 std::map<std::string, double>* ms, std::string* error) {
  std::string filter;
  for (const std::string& c : cases) filter += (filter.empty() ? "" : ",") + c;
  const std::string command = "GGML_N_THREADS=" + std::to_string(threads) + " " +
                              ShellQuote(binary) + " perf -b CPU -o " + ShellQuote(filter) +
                              " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *error = "could not start " + binary;
    return false;
  }
  std::string output;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) output.append(buf, n);
  const int status = pclose(pipe);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    constexpr size_t kTail = 2000;
    const std::string code = status != -1 && WIFEXITED(status)
                                 ? "exit code " + std::to_string(WEXITSTATUS(status))
                                 : "abnormal termination";
    *error = binary + " perf failed (" + code +
             "; 127 means the shell could not run it), output:\n" +
             output.substr(output.size() > kTail ? output.size() - kTail : 0);
    return false;
  }
  *ms = ParseGgmlPerfOutput(output);
  return true;
}

bool GgmlPeer::Measure(const Options& options, const std::string& suite,
                       const std::vector<std::string>& cases) {
  if (options.ggml.empty()) return true;
  std::vector<std::string> unique;
  for (const std::string& c : cases) {
    if (!c.empty() && std::find(unique.begin(), unique.end(), c) == unique.end())
      unique.push_back(c);
  }
  threads_ = NumThreads();
  binary_ = options.ggml;
  std::string error;
  if (unique.empty() || RunGgmlPerf(binary_, unique, threads_, &ms_, &error)) return true;
  std::fprintf(stderr, "bench %s: --ggml: %s\n", suite.c_str(), error.c_str());
  return false;
}

void GgmlPeer::Apply(const std::string& ggml_case, double targets_ms, const char* targets_label,
                     Result* r) {
  if (binary_.empty()) {
    if (targets_ms > 0) {
      r->peer_ms = targets_ms;
      r->peer = targets_label;
    }
    return;
  }
  if (ggml_case.empty()) return;
  const auto it = ms_.find(ggml_case);
  if (it == ms_.end()) {
    if (std::find(missing_.begin(), missing_.end(), ggml_case) == missing_.end())
      missing_.push_back(ggml_case);
    return;
  }
  r->peer_ms = it->second;
  r->peer = "ggml, measured in this run";
}

std::vector<std::string> GgmlPeer::Notes() const {
  std::vector<std::string> notes;
  if (binary_.empty()) return notes;
  notes.push_back("peer: " + binary_ + " perf -b CPU with GGML_N_THREADS=" +
                  std::to_string(threads_) + ", run by this process before its own timings");
  for (const std::string& c : missing_) {
    notes.push_back("peer: no time for " + c +
                    " in the ggml output (add the case: docs/benchmarks.md)");
  }
  return notes;
}

void PrintNotes(const Options& options, const std::vector<std::string>& notes) {
  for (const std::string& note : notes)
    std::fprintf(options.json ? stderr : stdout, "note: %s\n", note.c_str());
}

}  // namespace ssmkit::bench
