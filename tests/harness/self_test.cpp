// The harness's own checks catch what they are for: an op that leaves an output element
// poisoned, writes a NaN, writes into the padding between rows (or, with outer padding, between
// matrices), writes an input, computes a wrong value, gets a gradient wrong (plain or Richardson
// finite differences), computes a gradient not linear in the upstream one (which would widen a
// tolerance set by the rounding noise), writes an output its backward reads, loses an infinity
// the oracle has or writes one it has not, or accepts a bad input fails its test; a correct op
// passes. A toy op, out = 2 x (strided rows), stands in for a real one. A second toy,
// out = a - b with b within 1% of a, shows the tolerance's two allowances for rounding (an
// ill-conditioned output, a bf16 output rounded the other way) and that neither hides an error.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstring>
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
  kNonlinearGradient,
  kBackwardWritesSaved,
  kLosesInfinity,
  kWritesInfinity,
  kAcceptsAnything
};

struct Toy {
  Flaw flaw = Flaw::kNone;
  bool infinity = false;  // x[0] = -inf, so out[0] = -inf (forward only)
  std::string Name() const {
    return "toy flaw " + std::to_string(static_cast<int>(flaw)) + (infinity ? " -inf" : "");
  }
};

constexpr int64_t kRows = 3, kCols = 5, kPad = 2;

constexpr float kInf = std::numeric_limits<float>::infinity();

void Make(const Toy& p, Problem& prob) {
  Arg& x = prob.Input("x", {kRows, kCols}, DType::kF32, kPad).Normal().GradNoise(8.0);
  if (p.infinity) x.Pin(0, -kInf);
  prob.Output("out", {kRows, kCols}, DType::kF32, kPad).Saved().AllowInf();
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
      const float v = s[r * stride + c];
      d[r * stride + c] = 2.0f * v + (p.flaw == Flaw::kNonlinearGradient ? 0.05f * v * v : 0.0f);
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
    case Flaw::kLosesInfinity:
      d[0] = 0.0f;
      break;
    case Flaw::kWritesInfinity:
      d[0] = -kInf;
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

Status Forward(const Toy& p, Bound& b) {
  Toy q = p;
  if (p.flaw == Flaw::kNonlinearGradient || p.flaw == Flaw::kBackwardWritesSaved)
    q.flaw = Flaw::kNone;  // a flaw of the backward's
  return Scale(q, b["x"], b["out"], b["x"]);
}

Status Backward(const Toy& p, Bound& b) {
  Toy q = p;
  if (p.flaw == Flaw::kWrongGradient)
    q.flaw = Flaw::kWrongValue;
  else if (p.flaw != Flaw::kAcceptsAnything && p.flaw != Flaw::kNonlinearGradient)
    q.flaw = Flaw::kNone;
  const Status s = Scale(q, b["dout"], b["dx"], b["dout"]);
  if (p.flaw == Flaw::kBackwardWritesSaved) static_cast<float*>(b["out"].data)[0] += 1.0f;
  return s;
}

ErasedOp ToyOp(Flaw flaw, FiniteDifferences fd = {}, bool infinity = false) {
  const Checks checks = infinity ? Checks{.backward = false} : Checks{.finite_differences = true};
  OpSpec<Toy> spec{.name = "toy",
                   .make = Make,
                   .oracle_forward = OracleForward,
                   .oracle_backward = OracleBackward,
                   .forward = Forward,
                   .backward = Backward,
                   .cases = {{"one", {Toy{flaw, infinity}}, checks}},
                   .valid = Toy{flaw},
                   .bad_inputs = {{"NullX",
                                   Call::kForward,
                                   [](Toy&, Bound& b) { b["x"] = Tensor{}; },
                                   {"toy: x:"}}},
                   .fd = fd};
  return Erase(spec);
}

// Richardson's combination: exact on the linear toy at any step, so a wrong coefficient shows.
constexpr FiniteDifferences kRichardson = {.step = 1e-3, .oracle = 1e-9, .richardson = true};

void RunToy(Flaw flaw, FiniteDifferences fd = {}, bool infinity = false) {
  const ErasedOp op = ToyOp(flaw, fd, infinity);
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
  RunToy(Flaw::kNone, kRichardson);
  RunToy(Flaw::kNone, {}, /*infinity=*/true);
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
      {Flaw::kNonlinearGradient, "dx: not linear in the upstream gradients"},
      {Flaw::kBackwardWritesSaved, "out: an input was written"},
      {Flaw::kWritesInfinity, "out: elements left poisoned or not finite"},
  };
  for (const auto& [flaw, piece] : flaws) {
    EXPECT_TRUE(Reports([flaw = flaw] { RunToy(flaw); }, piece)) << piece;
  }
  EXPECT_TRUE(Reports([] { RunToy(Flaw::kWrongGradient, kRichardson); },
                      "dx: the op's gradient against finite differences"));
  EXPECT_TRUE(Reports([] { RunToy(Flaw::kLosesInfinity, {}, /*infinity=*/true); },
                      "out: infinities unlike the oracle's"));
  const ErasedOp op = ToyOp(Flaw::kAcceptsAnything);
  EXPECT_TRUE(Reports([&] { RunBadInput(op, op.bad_inputs[0]); },
                      "accepted, or refused with another code"));
}

// out = a - b, b = a (1 + gap): the difference of two close numbers, whose condition is 1 / gap.
enum class Sub {
  kExact,            // a - b in f32: exact (Sterbenz), within any tolerance
  kStable,           // (3 a - 3 b) / 3 in f32: off by ~200 eps relative, as rounding allows
  kShiftedInput,     // a - b (1 + 2^-13): an error in an input, 1% of the output
  kIllConditioned,   // kStable on b = a (1 + 1e-5): data whose rounding alone moves out by 1%
  kRoundedOtherWay,  // bf16 out, each element truncated (its nearest or other neighbour)
  kStepsOff,         // bf16 out, truncated, and one element two further steps towards zero
};

struct Difference {
  Sub sub = Sub::kExact;
  bool bf16() const { return sub == Sub::kRoundedOtherWay || sub == Sub::kStepsOff; }
  double gap() const { return sub == Sub::kIllConditioned ? 1e-5 : 1e-2; }
  std::string Name() const { return "difference " + std::to_string(static_cast<int>(sub)); }
};

void MakeDifference(const Difference& p, Problem& prob) {
  std::vector<double> a(kRows * kCols), b(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = prob.rng().Uniform(1.0, 2.0) * (i % 2 ? -1.0 : 1.0);
    b[i] = a[i] * (1.0 + p.gap());
  }
  prob.Input("a", {kRows, kCols}, DType::kF32).Given(a);
  prob.Input("b", {kRows, kCols}, DType::kF32).Given(b);
  // Far below any rounding: only the allowances can pass an inexact result.
  prob.Output("out", {kRows, kCols}, p.bf16() ? DType::kBF16 : DType::kF32).Tol(1e-9);
}

void OracleDifference(const Difference&, Values& v) {
  for (int64_t i = 0; i < kRows * kCols; ++i) v["out"][i] = v["a"][i] - v["b"][i];
}

Status ForwardDifference(const Difference& p, Bound& bound) {
  const auto* a = static_cast<const float*>(bound["a"].data);
  const auto* b = static_cast<const float*>(bound["b"].data);
  for (int64_t i = 0; i < kRows * kCols; ++i) {
    float d = a[i] - b[i];
    if (p.sub == Sub::kStable || p.sub == Sub::kIllConditioned)
      d = (3.0f * a[i] - 3.0f * b[i]) / 3.0f;
    if (p.sub == Sub::kShiftedInput) d = a[i] - b[i] * (1.0f + 0x1p-13f);
    if (!p.bf16()) {
      static_cast<float*>(bound["out"].data)[i] = d;
      continue;
    }
    uint32_t bits;
    std::memcpy(&bits, &d, sizeof bits);
    uint16_t truncated = static_cast<uint16_t>(bits >> 16);
    if (p.sub == Sub::kStepsOff && i == 3) truncated -= 2;  // a spacing or more from exact
    static_cast<uint16_t*>(bound["out"].data)[i] = truncated;
  }
  return Status::Ok();
}

void RunDifference(Sub sub) {
  OpSpec<Difference> spec{.name = "difference",
                          .make = MakeDifference,
                          .oracle_forward = OracleDifference,
                          .forward = ForwardDifference,
                          .cases = {{"one", {Difference{sub}}, {.backward = false}}},
                          .valid = Difference{sub}};
  const ErasedOp op = Erase(spec);
  RunCase(op, op.cases[0], *CpuBackends()[0], /*perf=*/false);
}

TEST(HarnessSelfTest, RoundingIsAllowedAndNothingMore) {
  RunDifference(Sub::kExact);
  RunDifference(Sub::kStable);
  RunDifference(Sub::kRoundedOtherWay);
  EXPECT_TRUE(Reports([] { RunDifference(Sub::kShiftedInput); }, "out: against the oracle"));
  EXPECT_TRUE(Reports([] { RunDifference(Sub::kIllConditioned); }, "ill-conditioned test data"));
  EXPECT_TRUE(Reports([] { RunDifference(Sub::kStepsOff); }, "out: against the oracle"));
}

// With outer padding a (2, 3, 4) tensor's matrices are (3 + pad) (4 + pad) elements apart; a
// write between two matrices, past the last row of the first, is a write into the padding, and
// a write into an element is not.
TEST(HarnessSelfTest, OuterPaddingIsWatched) {
  Problem prob(FreshSeed());
  prob.PadOuterDims(true);
  Arg& a = prob.Input("a", {2, 3, 4}, DType::kF32, kPad).Normal();
  const Tensor t = a.view();
  ASSERT_EQ(t.strides[0], (3 + kPad) * (4 + kPad));
  ASSERT_EQ(t.strides[1], 4 + kPad);
  auto* data = static_cast<float*>(t.data);
  data[t.strides[0] + 2 * t.strides[1] + 3] = 7.0f;  // element (1, 2, 3)
  EXPECT_TRUE(a.PaddingUnchanged());
  EXPECT_EQ(a.Stored()[23], 7.0);
  data[3 * t.strides[1]] = 7.0f;  // the padding rows after matrix 0
  EXPECT_FALSE(a.PaddingUnchanged());
}

}  // namespace
}  // namespace ssmkit::testing::harness
