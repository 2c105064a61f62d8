// The harness's own checks catch what they are for: an op that leaves an output element
// poisoned, writes a NaN, writes into the padding between rows, writes an input, computes a
// wrong value, gets a gradient wrong, or accepts a bad input fails its test; a correct op passes.
// A toy op, out = 2 x (strided rows), stands in for a real one.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "harness/checks.hpp"

namespace ssmkit::testing::harness {
namespace {

enum class Flaw {
  kNone,
  kSkipsOne,
  kWritesNaN,
  kWritesPadding,
  kWritesInput,
  kWrongValue,
  kWrongGradient,
  kAcceptsAnything
};

struct Toy {
  Flaw flaw = Flaw::kNone;
  std::string Name() const { return "toy flaw " + std::to_string(static_cast<int>(flaw)); }
};

constexpr int64_t kRows = 3, kCols = 5, kPad = 2;

void Make(const Toy&, Problem& prob) {
  prob.Input("x", {kRows, kCols}, DType::kF32, kPad).Normal();
  prob.Output("out", {kRows, kCols}, DType::kF32, kPad);
}

void OracleForward(const Toy&, Values& v) {
  for (int64_t i = 0; i < kRows * kCols; ++i) v["out"][i] = 2.0 * v["x"][i];
}

void OracleBackward(const Toy&, Values& v) {
  for (int64_t i = 0; i < kRows * kCols; ++i) v["dx"][i] = 2.0 * v["dout"][i];
}

// dst = 2 src over the rows of two (kRows, kCols) views, then the flaw.
Status Scale(const Toy& p, const Tensor& src, const Tensor& dst, const Tensor& input) {
  if (p.flaw == Flaw::kAcceptsAnything) return Status::Ok();
  if (!src.defined() || src.shape[1] != kCols) return Status::InvalidArgument("toy: x: bad");
  const auto* s = static_cast<const float*>(src.data);
  auto* d = static_cast<float*>(dst.data);
  const int64_t stride = src.strides[0];
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      if (p.flaw == Flaw::kSkipsOne && r == 1 && c == 1) continue;
      d[r * stride + c] = 2.0f * s[r * stride + c];
    }
  }
  switch (p.flaw) {
    case Flaw::kWritesNaN:
      d[0] = std::numeric_limits<float>::quiet_NaN();
      break;
    case Flaw::kWritesPadding:
      d[kCols] = 0.0f;
      break;
    case Flaw::kWritesInput:
      static_cast<float*>(input.data)[0] += 1.0f;
      break;
    case Flaw::kWrongValue:
      // An offset, not a factor: the inputs are fresh random normals each run, and 1% of an
      // element near zero hid under the normwise tolerance (seen failing in full-suite runs).
      d[2 * stride] += 1.0f;
      break;
    default:
      break;
  }
  return Status::Ok();
}

Status Forward(const Toy& p, Bound& b) { return Scale(p, b["x"], b["out"], b["x"]); }

Status Backward(const Toy& p, Bound& b) {
  Toy q = p;
  if (p.flaw == Flaw::kWrongGradient)
    q.flaw = Flaw::kWrongValue;
  else if (p.flaw != Flaw::kAcceptsAnything)
    q.flaw = Flaw::kNone;
  return Scale(q, b["dout"], b["dx"], b["dout"]);
}

ErasedOp ToyOp(Flaw flaw) {
  OpSpec<Toy> spec{
      .name = "toy",
      .make = Make,
      .oracle_forward = OracleForward,
      .oracle_backward = OracleBackward,
      .forward = Forward,
      .backward = Backward,
      .cases = {{"one", {Toy{flaw}}, {.finite_differences = true}}},
      .valid = Toy{flaw},
      .bad_inputs = {
          {"NullX", Call::kForward, [](Toy&, Bound& b) { b["x"] = Tensor{}; }, {"toy: x:"}}}};
  return Erase(spec);
}

void RunToy(Flaw flaw) {
  const ErasedOp op = ToyOp(flaw);
  RunCase(op, op.cases[0], *CpuBackends()[0], /*perf=*/false);
}

// True when `run` reported a failure holding `piece`; its failures are intercepted, not the
// test's own.
bool Reports(const std::function<void()>& run, const std::string& piece) {
  ::testing::TestPartResultArray results;
  {
    ::testing::ScopedFakeTestPartResultReporter intercept(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &results);
    run();
  }
  for (int i = 0; i < results.size(); ++i) {
    if (std::string(results.GetTestPartResult(i).message()).find(piece) != std::string::npos)
      return true;
  }
  return false;
}

TEST(HarnessSelfTest, ACorrectOpPasses) {
  RunToy(Flaw::kNone);
  const ErasedOp op = ToyOp(Flaw::kNone);
  RunValid(op);
  RunBadInput(op, op.bad_inputs[0]);
}

TEST(HarnessSelfTest, EachFlawIsCaught) {
  const std::vector<std::pair<Flaw, std::string>> flaws = {
      {Flaw::kSkipsOne, "out: elements left poisoned or not finite"},
      {Flaw::kWritesNaN, "out: elements left poisoned or not finite"},
      {Flaw::kWritesPadding, "out: wrote into the padding"},
      {Flaw::kWritesInput, "x: an input was written"},
      {Flaw::kWrongValue, "out: against the oracle"},
      {Flaw::kWrongGradient, "dx: the op's gradient against finite differences"},
  };
  for (const auto& [flaw, piece] : flaws) {
    EXPECT_TRUE(Reports([flaw = flaw] { RunToy(flaw); }, piece)) << piece;
  }
  const ErasedOp op = ToyOp(Flaw::kAcceptsAnything);
  EXPECT_TRUE(Reports([&] { RunBadInput(op, op.bad_inputs[0]); },
                      "accepted, or refused with another code"));
}

}  // namespace
}  // namespace ssmkit::testing::harness
