// The ggml peer of `ssmkit bench --ggml` (tools/ssmkit/peer_ggml.hpp): the parser on output
// recorded from test-backend-ops perf (ggml snapshot d99724f), the case names it selects with,
// and the run itself against stand-in binaries (shell scripts) that check their arguments and
// print the recorded output, exit non-zero, or do not exist.
#include "peer_ggml.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "ssmkit/threads.hpp"

namespace ssmkit::bench {
namespace {

// Recorded from `GGML_N_THREADS=2 test-backend-ops perf -b CPU -o ...` (colour codes kept),
// plus a "not supported" line in print_perf_console's format.
constexpr const char* kRecorded =
    "Testing 1 devices\n"
    "\n"
    "Backend 1/1: CPU\n"
    "  Device description: AMD EPYC\n"
    "  Device memory: 24105 MB (24105 MB free)\n"
    "\n"
    "  SSM_CONV(type=f32,ne_a=[515,3328,1,1],ne_b=[4,3328,1,1]):                      626 runs - "
    "35533.55 us/run -    13403 kB/run - \033[1;34m   0.36 GB/s\033[0m\n"
    "  SSM_CONV_BIAS_SILU(type=f32,ne_a=[63,512,1,1],ne_b=[4,512,1,1],fuse_bias=1):                "
    "  "
    "8190 runs -  1652.68 us/run -      240 kB/run - \033[1;34m   0.14 GB/s\033[0m\n"
    "  SSM_SCAN(type=f32,d_state=16,head_dim=1,n_head=512,n_group=1,n_seq_tokens=60,n_seqs=1,"
    "xbc_overlap=0,K=1,weak_decay=0):        8192 runs -  8947.74 us/run -      463 kB/run - "
    "\033[1;34m   0.05 GB/s\033[0m\n"
    "  SSM_SCAN(type=f32,d_state=128,head_dim=64,n_head=24,n_group=1,n_seq_tokens=1,n_seqs=1,"
    "xbc_overlap=0,K=1,weak_decay=0): not supported\n"
    "  Backend CPU: \033[1;32mOK\033[0m\n"
    "1/1 backends passed\n"
    "\033[1;32mOK\033[0m\n";

constexpr const char* kPolicyScan =
    "SSM_SCAN(type=f32,d_state=16,head_dim=1,n_head=512,n_group=1,n_seq_tokens=60,n_seqs=1,xbc_"
    "overlap=0,K=1,weak_decay=0)";
constexpr const char* kPlainConv = "SSM_CONV(type=f32,ne_a=[515,3328,1,1],ne_b=[4,3328,1,1])";
constexpr const char* kPolicyConv =
    "SSM_CONV_BIAS_SILU(type=f32,ne_a=[63,512,1,1],ne_b=[4,512,1,1],fuse_bias=1)";

TEST(GgmlPerfOutput, ParsesEveryTimedCaseAndNothingElse) {
  const std::map<std::string, double> ms = ParseGgmlPerfOutput(kRecorded);
  ASSERT_EQ(ms.size(), 3u);
  EXPECT_DOUBLE_EQ(ms.at(kPlainConv), 35.53355);
  EXPECT_DOUBLE_EQ(ms.at(kPolicyConv), 1.65268);
  EXPECT_DOUBLE_EQ(ms.at(kPolicyScan), 8.94774);
}

TEST(GgmlPerfOutput, EmptyOrForeignOutputGivesNothing) {
  EXPECT_TRUE(ParseGgmlPerfOutput("").empty());
  EXPECT_TRUE(ParseGgmlPerfOutput("Usage: test-backend-ops [mode] [-o <op,..>]\n").empty());
  // test mode prints no time
  EXPECT_TRUE(
      ParseGgmlPerfOutput("  SSM_CONV(type=f32,ne_a=[10,10,10,1],ne_b=[3,3,1,1]): OK\n").empty());
}

TEST(GgmlPerfOutput, LastLineWithoutNewline) {
  const std::map<std::string, double> ms = ParseGgmlPerfOutput(
      "  SSM_CONV(type=f32,ne_a=[4,8,1,1],ne_b=[4,8,1,1]):   12 runs -     2.50 us/run");
  ASSERT_EQ(ms.size(), 1u);
  EXPECT_DOUBLE_EQ(ms.begin()->second, 0.0025);
}

// The names must be exactly what the binary prints, or no case is selected or found.
TEST(GgmlCaseNames, MatchTheRecordedOutput) {
  EXPECT_EQ(GgmlSsmScanCase(16, 1, 512, 1, 60, 1), kPolicyScan);
  EXPECT_EQ(GgmlSsmConvCase(3328, 512, 1, 4), kPlainConv);
  EXPECT_EQ(
      GgmlSsmScanCase(128, 64, 24, 1, 2048, 1),
      "SSM_SCAN(type=f32,d_state=128,head_dim=64,n_head=24,n_group=1,n_seq_tokens=2048,n_seqs=1,"
      "xbc_overlap=0,K=1,weak_decay=0)");
  EXPECT_EQ(GgmlSsmConvCase(512, 60, 256, 4),
            "SSM_CONV(type=f32,ne_a=[63,512,256,1],ne_b=[4,512,1,1])");
}

TEST(ShellQuote, QuotesSpacesAndQuotes) {
  EXPECT_EQ(ShellQuote("plain"), "'plain'");
  EXPECT_EQ(ShellQuote("a b'c"), "'a b'\\''c'");
  EXPECT_EQ(ShellQuote(""), "''");
}

// A directory with stand-in binaries; its name has a space and a quote, which the command
// line must survive.
class FakeGgml : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "ssmkit peer'XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    std::ofstream(dir_ / "sample.txt") << kRecorded;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A script that checks its arguments and GGML_N_THREADS (exit 3 / 4 otherwise), saves the
  // -o filter, prints the recorded output and exits with `code`.
  std::string Script(const std::string& name, int code) {
    const std::filesystem::path path = dir_ / name;
    std::ofstream(path)
        << "#!/bin/sh\n"
           "[ \"$1\" = perf ] && [ \"$2\" = -b ] && [ \"$3\" = CPU ] && [ \"$4\" = -o ] || exit 3\n"
           "[ \"$GGML_N_THREADS\" = 3 ] || exit 4\n"
           "printf '%s' \"$5\" > \"$(dirname \"$0\")/filter.txt\"\n"
           "cat \"$(dirname \"$0\")/sample.txt\"\n"
        << "exit " << code << "\n";
    chmod(path.c_str(), 0755);
    return path.string();
  }

  std::string Filter() const {
    std::stringstream s;
    s << std::ifstream(dir_ / "filter.txt").rdbuf();
    return s.str();
  }

  std::filesystem::path dir_;
};

TEST_F(FakeGgml, RunsTheBinaryWithTheCasesAndThreads) {
  std::map<std::string, double> ms;
  std::string error;
  ASSERT_TRUE(RunGgmlPerf(Script("ggml ok", 0), {kPolicyScan, kPlainConv}, 3, &ms, &error))
      << error;
  EXPECT_EQ(Filter(), std::string(kPolicyScan) + "," + kPlainConv);
  EXPECT_EQ(ms, ParseGgmlPerfOutput(kRecorded));
}

TEST_F(FakeGgml, NonZeroExitIsAnErrorWithTheOutput) {
  std::map<std::string, double> ms;
  std::string error;
  EXPECT_FALSE(RunGgmlPerf(Script("ggml fails", 1), {kPolicyScan}, 3, &ms, &error));
  EXPECT_NE(error.find("exit code 1"), std::string::npos) << error;
  EXPECT_NE(error.find("backends passed"), std::string::npos) << error;
  EXPECT_TRUE(ms.empty());
  EXPECT_FALSE(RunGgmlPerf(Script("ggml wrong threads", 0), {kPolicyScan}, 2, &ms, &error));
  EXPECT_NE(error.find("exit code 4"), std::string::npos) << error;
}

TEST_F(FakeGgml, MissingBinaryIsAnError) {
  std::map<std::string, double> ms;
  std::string error;
  EXPECT_FALSE(RunGgmlPerf((dir_ / "absent").string(), {kPolicyScan}, 3, &ms, &error));
  EXPECT_NE(error.find("exit code 127"), std::string::npos) << error;
}

TEST_F(FakeGgml, PeerColumnMeasuredOrFromTargets) {
  Options options;
  Result r;
  GgmlPeer from_targets;
  ASSERT_TRUE(from_targets.Measure(options, "test", {kPolicyScan}));
  from_targets.Apply(kPolicyScan, 1.49, "ggml (docs/targets.md, not this run)", &r);
  EXPECT_EQ(r.peer_ms, 1.49);
  EXPECT_EQ(r.peer, "ggml (docs/targets.md, not this run)");
  EXPECT_TRUE(from_targets.Notes().empty());

  SetNumThreads(3);
  options.ggml = Script("ggml ok", 0);
  GgmlPeer measured;
  const std::string absent = GgmlSsmScanCase(16, 1, 1536, 1, 2048, 1);
  ASSERT_TRUE(measured.Measure(options, "test", {kPolicyScan, "", kPolicyScan, absent}));
  SetNumThreads(0);
  EXPECT_EQ(Filter(), std::string(kPolicyScan) + "," + absent);  // deduplicated, "" dropped
  Result a, b, c;
  measured.Apply(kPolicyScan, 1.49, "ggml (docs/targets.md, not this run)", &a);
  EXPECT_DOUBLE_EQ(a.peer_ms, 8.94774);
  EXPECT_EQ(a.peer, "ggml, measured in this run");
  measured.Apply(absent, 123.8, "ggml (docs/targets.md, not this run)",
                 &b);  // never the TARGETS figure
  EXPECT_EQ(b.peer_ms, 0.0);
  measured.Apply("", 0.0757, "ggml (docs/targets.md, not this run)",
                 &c);  // no ggml twin (e.g. bf16)
  EXPECT_EQ(c.peer_ms, 0.0);
  const std::vector<std::string> notes = measured.Notes();
  ASSERT_EQ(notes.size(), 2u);
  EXPECT_NE(notes[0].find("GGML_N_THREADS=3"), std::string::npos) << notes[0];
  EXPECT_NE(notes[1].find(absent), std::string::npos) << notes[1];

  options.ggml = Script("ggml fails", 1);
  GgmlPeer failing;
  EXPECT_FALSE(failing.Measure(options, "test", {kPolicyScan}));
}

}  // namespace
}  // namespace ssmkit::bench
