// The harness's executable: every registered op's cases as GoogleTest tests, one per case and
// backend (Harness/<op>.<case>/<backend>), and one per bad input (Harness/<op>.bad_input/<name>).
// Perf mode (--perf, or SSMKIT_HARNESS_PERF=1) also prints each configuration's median time per
// call; it asserts nothing about speed.
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "harness/checks.hpp"

namespace ssmkit::testing::harness {

namespace {

std::vector<std::function<ErasedOp()>>& Registry() {
  static std::vector<std::function<ErasedOp()>> ops;
  return ops;
}

class FunctionTest : public ::testing::Test {
 public:
  explicit FunctionTest(std::function<void()> body) : body_(std::move(body)) {}
  void TestBody() override { body_(); }

 private:
  std::function<void()> body_;
};

void Register(const std::string& suite, const std::string& name, std::function<void()> body) {
  ::testing::RegisterTest(
      suite.c_str(), name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
      [body = std::move(body)]() -> ::testing::Test* { return new FunctionTest(body); });
}

void RegisterOp(std::shared_ptr<const ErasedOp> op, bool perf) {
  const std::string suite = "Harness/" + op->name;
  std::vector<std::shared_ptr<Backend>> backends;
  for (auto& b : CpuBackends()) backends.push_back(std::move(b));
  if (op->cuda) {
    for (auto& b : CudaBackends(op->cuda_variants)) backends.push_back(std::move(b));
  }
  for (const ErasedCase& c : op->cases) {
    for (const std::shared_ptr<Backend>& backend : backends) {
      if (backend->cuda() && !c.checks.cuda) continue;
      Register(suite, c.name + "/" + backend->Name(),
               [op, &c, backend, perf] { RunCase(*op, c, *backend, perf); });
    }
  }
  Register(suite, "bad_input/valid_calls_succeed", [op] { RunValid(*op); });
  for (const ErasedBadInput& bad : op->bad_inputs)
    Register(suite, "bad_input/" + bad.name, [op, &bad] { RunBadInput(*op, bad); });
}

bool PerfRequested(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--perf") return true;
  }
  const char* env = std::getenv("SSMKIT_HARNESS_PERF");
  return env != nullptr && *env != '\0' && std::string(env) != "0";
}

}  // namespace

bool AddOp(std::function<ErasedOp()> build) {
  Registry().push_back(std::move(build));
  return true;
}

const std::vector<std::function<ErasedOp()>>& RegisteredOps() { return Registry(); }

}  // namespace ssmkit::testing::harness

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  namespace h = ssmkit::testing::harness;
  const bool perf = h::PerfRequested(argc, argv);
  for (const auto& build : h::RegisteredOps())
    h::RegisterOp(std::make_shared<const h::ErasedOp>(build()), perf);
  return RUN_ALL_TESTS();
}
