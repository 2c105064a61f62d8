// RMS norms (gated, and residual add + norm) against the fp64 oracle: forward over group
// sizes, gates, biases, dtypes, odd widths and strided rows; gradients of the oracle and of
// the fast path against central finite differences; the fast backward against the oracle's
// analytic backward at a Mamba width; determinism, absent outputs and in-place aliasing.
#include "ssmkit/norm.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ref/norm_ref.hpp"
#include "ssmkit/threads.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

// An (M, E) tensor whose rows are `stride` >= E elements apart; the columns past E are
// padding that the op must neither read as data nor write.
class RowsTensor {
 public:
  RowsTensor() = default;
  RowsTensor(int64_t rows, int64_t features, int64_t stride, DType dtype)
      : rows_(rows),
        features_(features),
        stride_(stride),
        dtype_(dtype),
        t_({rows, stride}, dtype) {}

  Tensor view() {
    Tensor v = t_.view();
    v.shape[1] = features_;
    return v;
  }
  // Fills every element (padding too) from `values` (rows * features); returns the stored
  // (M, E) values as doubles.
  std::vector<double> Fill(Rng& rng, const std::vector<double>& values) {
    std::vector<double> all = rng.NormalVec(rows_ * stride_);
    for (int64_t m = 0; m < rows_; ++m) {
      for (int64_t e = 0; e < features_; ++e) all[m * stride_ + e] = values[m * features_ + e];
    }
    t_.Fill(all);
    return Values();
  }
  std::vector<double> Values() const {
    const std::vector<double> all = t_.ToDouble();
    std::vector<double> v(static_cast<size_t>(rows_ * features_));
    for (int64_t m = 0; m < rows_; ++m) {
      for (int64_t e = 0; e < features_; ++e) v[m * features_ + e] = all[m * stride_ + e];
    }
    return v;
  }
  // Poisons every element and remembers the bytes, so that PaddingUntouched can tell.
  void Poison() {
    t_.Poison();
    poisoned_ = t_.bytes();
  }
  bool PaddingUntouched() const {
    if (poisoned_.size() != t_.bytes().size()) return false;  // Poison() was not called
    const int64_t size = DTypeSize(dtype_);
    for (int64_t m = 0; m < rows_; ++m) {
      for (int64_t b = (m * stride_ + features_) * size; b < (m + 1) * stride_ * size; ++b) {
        if (t_.bytes()[b] != poisoned_[b]) return false;
      }
    }
    return true;
  }
  const std::vector<uint8_t>& bytes() const { return t_.bytes(); }

 private:
  int64_t rows_ = 0, features_ = 0, stride_ = 0;
  DType dtype_ = DType::kF32;
  HostTensor t_;
  std::vector<uint8_t> poisoned_;
};

// `values` rounded to `dtype`, as the kernel's output is.
std::vector<double> Rounded(const std::vector<double>& values, DType dtype) {
  if (dtype == DType::kF32) return values;
  HostTensor t({static_cast<int64_t>(values.size())}, dtype);
  return t.Fill(values);
}

double Tolerance(DType dtype) { return dtype == DType::kF32 ? 1e-5 : 1e-2; }

// The largest error a test saw per label, printed at its end (for docs/ops/norm.md).
class WorstError {
 public:
  double Track(const std::string& label, double error) {
    for (auto& [name, worst] : worst_) {
      if (name == label) {
        worst = std::max(worst, error);
        return error;
      }
    }
    worst_.push_back({label, error});
    return error;
  }
  ~WorstError() {
    for (const auto& [name, worst] : worst_) {
      std::printf("  worst relative error, %s: %.3g\n", name.c_str(), worst);
    }
  }

 private:
  std::vector<std::pair<std::string, double>> worst_;
};

// ------------------------------------------------------------------ gated RMSNorm

struct GatedCase {
  int64_t rows = 4, features = 16, group_size = 0, stride = 0;  // stride 0: E
  bool has_z = true, has_bias = true, norm_before_gate = true;
  DType dtype = DType::kF32;
  float eps = 1e-6f;

  std::string Name() const {
    return "M=" + std::to_string(rows) + " E=" + std::to_string(features) +
           " S=" + std::to_string(group_size) + " stride=" + std::to_string(stride) +
           " z=" + std::to_string(has_z) + " bias=" + std::to_string(has_bias) +
           " norm_before_gate=" + std::to_string(norm_before_gate) + " " + DTypeName(dtype);
  }
  int64_t Stride() const { return stride > 0 ? stride : features; }
};

// One gated problem: tensors for the kernel, the stored values in double for the oracle.
struct GatedProblem {
  GatedCase c;
  RowsTensor x, z;
  HostTensor weight, bias;
  std::vector<double> x_d, z_d, weight_d, bias_d;

  GatedProblem(const GatedCase& gc, Rng& rng) : c(gc) {
    const int64_t M = c.rows, E = c.features;
    x = RowsTensor(M, E, c.Stride(), c.dtype);
    x_d = x.Fill(rng, rng.NormalVec(M * E));
    weight = HostTensor({E}, DType::kF32);
    weight_d = weight.Fill(rng.UniformVec(E, 0.5, 1.5));
    if (c.has_bias) {
      bias = HostTensor({E}, DType::kF32);
      bias_d = bias.Fill(rng.NormalVec(E, 0.1));
    }
    if (c.has_z) {
      z = RowsTensor(M, E, c.Stride(), c.dtype);
      z_d = z.Fill(rng, rng.NormalVec(M * E, 1.5));
    }
  }
  RmsNormInputs Inputs() {
    RmsNormInputs in;
    in.x = x.view();
    in.weight = weight.view();
    if (c.has_bias) in.bias = bias.view();
    if (c.has_z) in.z = z.view();
    return in;
  }
  RmsNormOptions Options() const {
    RmsNormOptions o;
    o.eps = c.eps;
    o.group_size = c.group_size;
    o.norm_before_gate = c.norm_before_gate;
    return o;
  }
  ref::NormShape Shape() const {
    return {c.rows, c.features, c.group_size, static_cast<double>(c.eps), c.norm_before_gate};
  }
  ref::RmsNormInputs RefInputs() const {
    return {x_d.data(), weight_d.data(), c.has_bias ? bias_d.data() : nullptr,
            c.has_z ? z_d.data() : nullptr};
  }
};

double GatedForwardError(const GatedCase& gc, uint64_t seed) {
  Rng rng(seed);
  GatedProblem prob(gc, rng);
  RowsTensor out(gc.rows, gc.features, gc.Stride(), gc.dtype);
  out.Poison();
  const Status status = RmsNormForward(prob.Inputs(), out.view(), prob.Options());
  EXPECT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(out.PaddingUntouched()) << "wrote between rows";
  std::vector<double> want(static_cast<size_t>(gc.rows * gc.features));
  ref::RmsNormForward(prob.Shape(), prob.RefInputs(), want.data());
  return RelativeError(out.Values(), Rounded(want, gc.dtype));
}

TEST(RmsNorm, ForwardMatchesOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstError worst;
  int cases = 0;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    // (E, S): one group at an odd width (SIMD tails), several groups of an odd size (each
    // group padded on its own), groups of one vector, a Mamba-2 width.
    for (auto [E, S] : std::vector<std::pair<int64_t, int64_t>>{
             {37, 0}, {148, 37}, {64, 16}, {96, 0}, {1536, 384}, {5, 1}}) {
      for (int gate = 0; gate < 3; ++gate) {  // none, gate after the norm, gate before
        for (bool bias : {false, true}) {
          for (int64_t M : {1, 5}) {
            for (int64_t stride : {int64_t{0}, E + 3}) {
              GatedCase c;
              c.rows = M;
              c.features = E;
              c.group_size = S;
              c.stride = stride;
              c.has_z = gate > 0;
              c.norm_before_gate = gate != 2;
              c.has_bias = bias;
              c.dtype = dtype;
              SCOPED_TRACE(c.Name());
              EXPECT_LE(worst.Track(std::string("out ") + DTypeName(dtype),
                                    GatedForwardError(c, seed + cases++)),
                        Tolerance(dtype));
            }
          }
        }
      }
    }
  }
}

TEST(RmsNorm, ForwardLargeEpsAndGroupSizeEqualToE) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  GatedCase c;
  c.rows = 7;
  c.features = 40;
  c.group_size = 40;  // explicit S = E is the same as 0
  c.eps = 0.5f;       // eps large enough to matter against mean(x^2) ~ 1
  EXPECT_LE(GatedForwardError(c, seed), 1e-5);
}

// bf16 storage only changes the loads and stores: with the same (bf16-exact) values in f32
// tensors the arithmetic is the same, so the bf16 output must be the f32 output rounded to
// nearest even, bit for bit (this checks the vector bf16 conversion and its scalar tail).
TEST(RmsNorm, Bf16OutputIsTheRoundedF32Output) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (int64_t E : {37, 1536}) {
    for (bool norm_before_gate : {false, true}) {
      GatedCase c;
      c.rows = 16;
      c.features = E;
      c.dtype = DType::kBF16;
      c.norm_before_gate = norm_before_gate;
      SCOPED_TRACE(c.Name());
      Rng rng(seed + E + norm_before_gate);
      GatedProblem prob(c, rng);
      HostTensor out_bf16({16, E}, DType::kBF16), x32({16, E}, DType::kF32),
          z32({16, E}, DType::kF32);
      HostTensor out32({16, E}, DType::kF32);
      x32.Fill(prob.x_d);
      z32.Fill(prob.z_d);
      ASSERT_TRUE(RmsNormForward(prob.Inputs(), out_bf16.view(), prob.Options()).ok());
      RmsNormInputs in32 = prob.Inputs();
      in32.x = x32.view();
      in32.z = z32.view();
      ASSERT_TRUE(RmsNormForward(in32, out32.view(), prob.Options()).ok());
      const auto* got = reinterpret_cast<const uint16_t*>(out_bf16.bytes().data());
      const auto* f32 = reinterpret_cast<const float*>(out32.bytes().data());
      int mismatches = 0;
      for (int64_t i = 0; i < 16 * E; ++i) mismatches += got[i] != F32ToBf16(f32[i]);
      EXPECT_EQ(mismatches, 0);
    }
  }
}

// A NaN in one row of x makes that row's output NaN and leaves every other row exact: rows
// do not leak into each other (and NaN survives the bf16 store).
TEST(RmsNorm, NaNStaysInItsRow) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    Rng rng(seed);
    GatedCase c;
    c.rows = 6;
    c.features = 64;
    c.dtype = dtype;
    GatedProblem prob(c, rng);
    std::vector<double> x = prob.x_d;
    x[2 * 64 + 5] = std::numeric_limits<double>::quiet_NaN();
    prob.x_d = prob.x.Fill(rng, x);
    RowsTensor out(6, 64, 64, dtype);
    out.Poison();
    ASSERT_TRUE(RmsNormForward(prob.Inputs(), out.view(), prob.Options()).ok());
    std::vector<double> want(6 * 64);
    ref::RmsNormForward(prob.Shape(), prob.RefInputs(), want.data());
    const std::vector<double> got = out.Values();
    for (int64_t m = 0; m < 6; ++m) {
      const std::vector<double> got_row(got.begin() + m * 64, got.begin() + (m + 1) * 64);
      const std::vector<double> want_row(want.begin() + m * 64, want.begin() + (m + 1) * 64);
      if (m == 2) {
        for (double v : got_row) EXPECT_TRUE(std::isnan(v));
      } else {
        EXPECT_LE(RelativeError(got_row, Rounded(want_row, dtype)), Tolerance(dtype))
            << "row " << m;
      }
    }
  }
}

// L = sum(out * w_out): its gradients are the backward's outputs for dout = w_out.
struct GatedGradients {
  std::vector<double> dx, dweight, dbias, dz;
};

GatedGradients OracleGatedBackward(const GatedProblem& prob, const std::vector<double>& dout) {
  const int64_t M = prob.c.rows, E = prob.c.features;
  GatedGradients g;
  g.dx.resize(M * E);
  g.dweight.resize(E);
  if (prob.c.has_bias) g.dbias.resize(E);
  if (prob.c.has_z) g.dz.resize(M * E);
  ref::RmsNormBackward(prob.Shape(), prob.RefInputs(), dout.data(),
                       {g.dx.data(), g.dweight.data(), prob.c.has_bias ? g.dbias.data() : nullptr,
                        prob.c.has_z ? g.dz.data() : nullptr});
  return g;
}

GatedGradients FastGatedBackward(GatedProblem& prob, RowsTensor& dout) {
  const int64_t M = prob.c.rows, E = prob.c.features, stride = prob.c.Stride();
  RowsTensor dx(M, E, stride, prob.c.dtype), dz(M, E, stride, prob.c.dtype);
  HostTensor dweight({E}, DType::kF32), dbias({E}, DType::kF32);
  for (RowsTensor* t : {&dx, &dz}) t->Poison();
  dweight.Poison();
  dbias.Poison();
  RmsNormGrads grads;
  grads.dx = dx.view();
  grads.dweight = dweight.view();
  if (prob.c.has_bias) grads.dbias = dbias.view();
  if (prob.c.has_z) grads.dz = dz.view();
  const Status status = RmsNormBackward(prob.Inputs(), dout.view(), grads, prob.Options());
  EXPECT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(dx.PaddingUntouched() && dz.PaddingUntouched()) << "wrote between rows";
  GatedGradients g;
  g.dx = dx.Values();
  g.dweight = dweight.ToDouble();
  if (prob.c.has_bias) g.dbias = dbias.ToDouble();
  if (prob.c.has_z) g.dz = dz.Values();
  return g;
}

// Finite differences of L = sum(out * dout) through the oracle forward.
GatedGradients FiniteDifferenceGated(GatedProblem& prob, const std::vector<double>& dout) {
  const int64_t M = prob.c.rows, E = prob.c.features;
  std::vector<double> out(M * E);
  auto loss = [&] {
    ref::RmsNormForward(prob.Shape(), prob.RefInputs(), out.data());
    double l = 0.0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * dout[i];
    return l;
  };
  auto fd = [&](std::vector<double>& v) {
    std::vector<double> g(v.size());
    for (size_t i = 0; i < v.size(); ++i) g[i] = CentralDifference(v, i, 1e-6, loss);
    return g;
  };
  GatedGradients g;
  g.dx = fd(prob.x_d);
  g.dweight = fd(prob.weight_d);
  if (prob.c.has_bias) g.dbias = fd(prob.bias_d);
  if (prob.c.has_z) g.dz = fd(prob.z_d);
  return g;
}

void ExpectGatedClose(const GatedGradients& got, const GatedGradients& want, double tol,
                      WorstError& worst, const std::string& label) {
  EXPECT_LE(worst.Track(label + " dx", RelativeError(got.dx, want.dx)), tol) << "dx";
  EXPECT_LE(worst.Track(label + " dweight", RelativeError(got.dweight, want.dweight)), tol)
      << "dweight";
  EXPECT_LE(worst.Track(label + " dbias", RelativeError(got.dbias, want.dbias)), tol) << "dbias";
  EXPECT_LE(worst.Track(label + " dz", RelativeError(got.dz, want.dz)), tol) << "dz";
}

std::vector<GatedCase> SmallGatedCases() {
  std::vector<GatedCase> cases;
  for (auto [E, S] : std::vector<std::pair<int64_t, int64_t>>{{7, 0}, {12, 4}, {20, 5}}) {
    for (int gate = 0; gate < 3; ++gate) {
      for (bool bias : {false, true}) {
        GatedCase c;
        c.rows = 3;
        c.features = E;
        c.group_size = S;
        c.stride = E + 2;
        c.has_z = gate > 0;
        c.norm_before_gate = gate != 2;
        c.has_bias = bias;
        c.eps = 1e-3f;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

TEST(RmsNormGrad, OracleAndFastMatchFiniteDifferences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstError worst;
  int n = 0;
  for (const GatedCase& c : SmallGatedCases()) {
    SCOPED_TRACE(c.Name());
    Rng rng(seed + n++);
    GatedProblem prob(c, rng);
    RowsTensor dout(c.rows, c.features, c.Stride(), c.dtype);
    const std::vector<double> dout_d = dout.Fill(rng, rng.NormalVec(c.rows * c.features));
    const GatedGradients fd = FiniteDifferenceGated(prob, dout_d);
    {
      SCOPED_TRACE("oracle vs finite differences");
      ExpectGatedClose(OracleGatedBackward(prob, dout_d), fd, 1e-6, worst, "oracle vs FD");
    }
    {
      SCOPED_TRACE("fast (f32) vs finite differences");
      ExpectGatedClose(FastGatedBackward(prob, dout), fd, 1e-4, worst, "fast vs FD");
    }
  }
}

// Three threads, so that dweight/dbias are summed from several uneven blocks of rows.
TEST(RmsNormGrad, FastMatchesOracleAtMambaWidth) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  const ScopedThreads threads(3);
  WorstError worst;
  int n = 0;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t S : {int64_t{0}, int64_t{384}}) {
      for (int gate = 0; gate < 3; ++gate) {
        GatedCase c;
        c.rows = 64;
        c.features = 1536;
        c.group_size = S;
        c.has_z = gate > 0;
        c.norm_before_gate = gate != 2;
        c.has_bias = gate != 1;
        c.dtype = dtype;
        SCOPED_TRACE(c.Name());
        Rng rng(seed + n++);
        GatedProblem prob(c, rng);
        RowsTensor dout(c.rows, c.features, c.Stride(), c.dtype);
        const std::vector<double> dout_d = dout.Fill(rng, rng.NormalVec(c.rows * c.features));
        GatedGradients want = OracleGatedBackward(prob, dout_d);
        want.dx = Rounded(want.dx, dtype);
        if (c.has_z) want.dz = Rounded(want.dz, dtype);
        ExpectGatedClose(FastGatedBackward(prob, dout), want, Tolerance(dtype), worst,
                         std::string("fast vs oracle ") + DTypeName(dtype));
      }
    }
  }
}

// Only dweight wanted: the other gradients are skipped and the call still succeeds; a
// single row (decode) with an odd width.
TEST(RmsNormGrad, AbsentOutputsAndSingleRow) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  GatedCase c;
  c.rows = 1;
  c.features = 37;
  GatedProblem prob(c, rng);
  RowsTensor dout(1, 37, 37, DType::kF32);
  const std::vector<double> dout_d = dout.Fill(rng, rng.NormalVec(37));
  HostTensor dweight({37}, DType::kF32);
  dweight.Poison();
  RmsNormGrads grads;
  grads.dweight = dweight.view();
  const Status status = RmsNormBackward(prob.Inputs(), dout.view(), grads, prob.Options());
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_LE(RelativeError(dweight.ToDouble(), OracleGatedBackward(prob, dout_d).dweight), 1e-5);
}

// ------------------------------------------------------------------ add + RMSNorm

struct AddCase {
  int64_t rows = 4, features = 16, stride = 0;
  bool has_residual = true, has_bias = true;
  DType dtype = DType::kF32;
  float eps = 1e-5f;

  std::string Name() const {
    return "M=" + std::to_string(rows) + " E=" + std::to_string(features) +
           " stride=" + std::to_string(stride) + " residual=" + std::to_string(has_residual) +
           " bias=" + std::to_string(has_bias) + " " + DTypeName(dtype);
  }
  int64_t Stride() const { return stride > 0 ? stride : features; }
};

struct AddProblem {
  AddCase c;
  RowsTensor x, residual;
  HostTensor weight, bias;
  std::vector<double> x_d, residual_d, weight_d, bias_d;

  AddProblem(const AddCase& ac, Rng& rng) : c(ac) {
    const int64_t M = c.rows, E = c.features;
    x = RowsTensor(M, E, c.Stride(), c.dtype);
    x_d = x.Fill(rng, rng.NormalVec(M * E));
    if (c.has_residual) {
      residual = RowsTensor(M, E, c.Stride(), DType::kF32);
      residual_d = residual.Fill(rng, rng.NormalVec(M * E, 2.0));
    }
    weight = HostTensor({E}, DType::kF32);
    weight_d = weight.Fill(rng.UniformVec(E, 0.5, 1.5));
    if (c.has_bias) {
      bias = HostTensor({E}, DType::kF32);
      bias_d = bias.Fill(rng.NormalVec(E, 0.1));
    }
  }
  AddRmsNormInputs Inputs() {
    AddRmsNormInputs in;
    in.x = x.view();
    if (c.has_residual) in.residual = residual.view();
    in.weight = weight.view();
    if (c.has_bias) in.bias = bias.view();
    return in;
  }
  AddRmsNormOptions Options() const { return {c.eps}; }
  ref::NormShape Shape() const { return {c.rows, c.features, 0, static_cast<double>(c.eps), true}; }
  ref::AddRmsNormInputs RefInputs() const {
    return {x_d.data(), c.has_residual ? residual_d.data() : nullptr, weight_d.data(),
            c.has_bias ? bias_d.data() : nullptr};
  }
};

TEST(AddRmsNorm, ForwardMatchesOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstError worst;
  int n = 0;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t E : {37, 768, 3}) {
      for (bool residual : {false, true}) {
        for (bool bias : {false, true}) {
          for (int64_t M : {1, 6}) {
            for (int64_t stride : {int64_t{0}, E + 5}) {
              AddCase c;
              c.rows = M;
              c.features = E;
              c.stride = stride;
              c.has_residual = residual;
              c.has_bias = bias;
              c.dtype = dtype;
              SCOPED_TRACE(c.Name());
              Rng rng(seed + n++);
              AddProblem prob(c, rng);
              RowsTensor out(M, E, c.Stride(), dtype), residual_out(M, E, c.Stride(), DType::kF32);
              out.Poison();
              residual_out.Poison();
              const Status status =
                  AddRmsNormForward(prob.Inputs(), out.view(), residual_out.view(), prob.Options());
              ASSERT_TRUE(status.ok()) << status.message();
              EXPECT_TRUE(out.PaddingUntouched() && residual_out.PaddingUntouched());
              std::vector<double> want(M * E), want_residual(M * E);
              ref::AddRmsNormForward(prob.Shape(), prob.RefInputs(), want.data(),
                                     want_residual.data());
              EXPECT_LE(worst.Track(std::string("out ") + DTypeName(dtype),
                                    RelativeError(out.Values(), Rounded(want, dtype))),
                        Tolerance(dtype));
              EXPECT_LE(
                  worst.Track("residual_out", RelativeError(residual_out.Values(), want_residual)),
                  1e-6);
            }
          }
        }
      }
    }
  }
}

struct AddGradients {
  std::vector<double> dx, dresidual, dweight, dbias;
};

AddGradients OracleAddBackward(const AddProblem& prob, const std::vector<double>& dout,
                               const std::vector<double>* dresidual_out) {
  const int64_t M = prob.c.rows, E = prob.c.features;
  AddGradients g;
  g.dx.resize(M * E);
  if (prob.c.has_residual) g.dresidual.resize(M * E);
  g.dweight.resize(E);
  if (prob.c.has_bias) g.dbias.resize(E);
  ref::AddRmsNormBackward(prob.Shape(), prob.RefInputs(), dout.data(),
                          dresidual_out ? dresidual_out->data() : nullptr,
                          {g.dx.data(), prob.c.has_residual ? g.dresidual.data() : nullptr,
                           g.dweight.data(), prob.c.has_bias ? g.dbias.data() : nullptr});
  return g;
}

AddGradients FastAddBackward(AddProblem& prob, RowsTensor& dout, RowsTensor* dresidual_out) {
  const int64_t M = prob.c.rows, E = prob.c.features, stride = prob.c.Stride();
  RowsTensor dx(M, E, stride, prob.c.dtype), dresidual(M, E, stride, DType::kF32);
  HostTensor dweight({E}, DType::kF32), dbias({E}, DType::kF32);
  dx.Poison();
  dresidual.Poison();
  dweight.Poison();
  dbias.Poison();
  AddRmsNormGrads grads;
  grads.dx = dx.view();
  if (prob.c.has_residual) grads.dresidual = dresidual.view();
  grads.dweight = dweight.view();
  if (prob.c.has_bias) grads.dbias = dbias.view();
  const Status status =
      AddRmsNormBackward(prob.Inputs(), dout.view(),
                         dresidual_out ? dresidual_out->view() : Tensor{}, grads, prob.Options());
  EXPECT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(dx.PaddingUntouched() && dresidual.PaddingUntouched()) << "wrote between rows";
  AddGradients g;
  g.dx = dx.Values();
  if (prob.c.has_residual) g.dresidual = dresidual.Values();
  g.dweight = dweight.ToDouble();
  if (prob.c.has_bias) g.dbias = dbias.ToDouble();
  return g;
}

void ExpectAddClose(const AddGradients& got, const AddGradients& want, double tol,
                    WorstError& worst, const std::string& label) {
  EXPECT_LE(worst.Track(label + " dx", RelativeError(got.dx, want.dx)), tol) << "dx";
  EXPECT_LE(worst.Track(label + " dresidual", RelativeError(got.dresidual, want.dresidual)), tol)
      << "dresidual";
  EXPECT_LE(worst.Track(label + " dweight", RelativeError(got.dweight, want.dweight)), tol)
      << "dweight";
  EXPECT_LE(worst.Track(label + " dbias", RelativeError(got.dbias, want.dbias)), tol) << "dbias";
}

TEST(AddRmsNormGrad, OracleAndFastMatchFiniteDifferences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstError worst;
  int n = 0;
  for (int64_t E : {5, 19}) {
    for (bool residual : {false, true}) {
      for (bool bias : {false, true}) {
        for (bool stream_grad : {false, true}) {  // a gradient arriving through residual_out
          AddCase c;
          c.rows = 3;
          c.features = E;
          c.stride = E + 1;
          c.has_residual = residual;
          c.has_bias = bias;
          c.eps = 1e-3f;
          SCOPED_TRACE(c.Name() + " dresidual_out=" + std::to_string(stream_grad));
          Rng rng(seed + n++);
          AddProblem prob(c, rng);
          RowsTensor dout(3, E, c.Stride(), DType::kF32), dres_out(3, E, c.Stride(), DType::kF32);
          const std::vector<double> dout_d = dout.Fill(rng, rng.NormalVec(3 * E));
          const std::vector<double> dres_d = dres_out.Fill(rng, rng.NormalVec(3 * E));
          // L = sum(out * dout) + sum(residual_out * dresidual_out)
          std::vector<double> out(3 * E), res_out(3 * E);
          auto loss = [&] {
            ref::AddRmsNormForward(prob.Shape(), prob.RefInputs(), out.data(), res_out.data());
            double l = 0.0;
            for (int64_t i = 0; i < 3 * E; ++i) {
              l += out[i] * dout_d[i] + (stream_grad ? res_out[i] * dres_d[i] : 0.0);
            }
            return l;
          };
          auto fd = [&](std::vector<double>& v) {
            std::vector<double> g(v.size());
            for (size_t i = 0; i < v.size(); ++i) g[i] = CentralDifference(v, i, 1e-6, loss);
            return g;
          };
          AddGradients want;
          want.dx = fd(prob.x_d);
          if (residual) want.dresidual = fd(prob.residual_d);
          want.dweight = fd(prob.weight_d);
          if (bias) want.dbias = fd(prob.bias_d);
          {
            SCOPED_TRACE("oracle vs finite differences");
            ExpectAddClose(OracleAddBackward(prob, dout_d, stream_grad ? &dres_d : nullptr), want,
                           1e-6, worst, "oracle vs FD");
          }
          {
            SCOPED_TRACE("fast (f32) vs finite differences");
            ExpectAddClose(FastAddBackward(prob, dout, stream_grad ? &dres_out : nullptr), want,
                           1e-4, worst, "fast vs FD");
          }
        }
      }
    }
  }
}

TEST(AddRmsNormGrad, FastMatchesOracleAtMambaWidth) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  const ScopedThreads threads(3);
  WorstError worst;
  int n = 0;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool residual : {false, true}) {
      AddCase c;
      c.rows = 160;
      c.features = 768;
      c.has_residual = residual;
      c.has_bias = residual;
      c.dtype = dtype;
      SCOPED_TRACE(c.Name());
      Rng rng(seed + n++);
      AddProblem prob(c, rng);
      RowsTensor dout(c.rows, c.features, c.Stride(), dtype);
      RowsTensor dres_out(c.rows, c.features, c.Stride(), DType::kF32);
      const std::vector<double> dout_d = dout.Fill(rng, rng.NormalVec(c.rows * c.features));
      const std::vector<double> dres_d = dres_out.Fill(rng, rng.NormalVec(c.rows * c.features));
      AddGradients want = OracleAddBackward(prob, dout_d, &dres_d);
      want.dx = Rounded(want.dx, dtype);
      ExpectAddClose(FastAddBackward(prob, dout, &dres_out), want, Tolerance(dtype), worst,
                     std::string("fast vs oracle ") + DTypeName(dtype));
    }
  }
}

// residual_out may be residual itself and out may be x itself: the in-place residual stream.
TEST(AddRmsNorm, InPlaceResidualStream) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  AddCase c;
  c.rows = 9;
  c.features = 768;
  AddProblem prob(c, rng);
  std::vector<double> want(c.rows * c.features), want_residual(c.rows * c.features);
  ref::AddRmsNormForward(prob.Shape(), prob.RefInputs(), want.data(), want_residual.data());
  const AddRmsNormInputs in = prob.Inputs();
  const Status status = AddRmsNormForward(in, in.x, in.residual, prob.Options());
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_LE(RelativeError(prob.x.Values(), want), 1e-5);
  EXPECT_LE(RelativeError(prob.residual.Values(), want_residual), 1e-6);
}

// Layer 0 (no residual yet) in place: residual_out may be x itself.
TEST(AddRmsNorm, InPlaceFirstLayer) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  AddCase c;
  c.rows = 9;
  c.features = 768;
  c.has_residual = false;
  AddProblem prob(c, rng);
  std::vector<double> want(c.rows * c.features), want_residual(c.rows * c.features);
  ref::AddRmsNormForward(prob.Shape(), prob.RefInputs(), want.data(), want_residual.data());
  RowsTensor out(c.rows, c.features, c.features, DType::kF32);
  out.Poison();
  const AddRmsNormInputs in = prob.Inputs();
  const Status status = AddRmsNormForward(in, out.view(), in.x, prob.Options());
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_LE(RelativeError(out.Values(), want), 1e-5);
  EXPECT_EQ(RelativeError(prob.x.Values(), want_residual), 0.0);
}

// ------------------------------------------------------------------ SIMD targets

// The library is compiled for AVX-512, AVX2 and portable scalar code and picks one at run
// time; each has its own vector width, so its own tails and pads. Run a forward and backward
// of both ops, at odd widths, on every target this CPU supports.
TEST(NormTargets, EveryCompiledTargetMatchesTheOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  WorstError worst;
  int n = 0;
  const int targets_run = ForEachSimdTarget([&] {
    for (auto [E, S] : std::vector<std::pair<int64_t, int64_t>>{{37, 0}, {148, 37}, {64, 8}}) {
      for (int gate = 0; gate < 3; ++gate) {
        for (DType dtype : {DType::kF32, DType::kBF16}) {
          GatedCase c;
          c.rows = 5;
          c.features = E;
          c.group_size = S;
          c.stride = E + 1;
          c.has_z = gate > 0;
          c.norm_before_gate = gate != 2;
          c.dtype = dtype;
          SCOPED_TRACE(c.Name());
          EXPECT_LE(worst.Track(std::string("gated out ") + DTypeName(dtype),
                                GatedForwardError(c, seed + n)),
                    Tolerance(dtype));
          Rng rng(seed + n++);
          GatedProblem prob(c, rng);
          RowsTensor dout(c.rows, E, c.Stride(), dtype);
          const std::vector<double> dout_d = dout.Fill(rng, rng.NormalVec(c.rows * E));
          GatedGradients want = OracleGatedBackward(prob, dout_d);
          want.dx = Rounded(want.dx, dtype);
          if (c.has_z) want.dz = Rounded(want.dz, dtype);
          ExpectGatedClose(FastGatedBackward(prob, dout), want, Tolerance(dtype), worst,
                           std::string("gated ") + DTypeName(dtype));
        }
      }
    }
    AddCase c;
    c.rows = 5;
    c.features = 37;
    Rng rng(seed + n++);
    AddProblem prob(c, rng);
    RowsTensor dout(5, 37, 37, DType::kF32), dres_out(5, 37, 37, DType::kF32);
    const std::vector<double> dout_d = dout.Fill(rng, rng.NormalVec(5 * 37));
    const std::vector<double> dres_d = dres_out.Fill(rng, rng.NormalVec(5 * 37));
    ExpectAddClose(FastAddBackward(prob, dout, &dres_out), OracleAddBackward(prob, dout_d, &dres_d),
                   1e-5, worst, "add f32");
  });
  EXPECT_GE(targets_run, 2) << "the portable target at least, and one SIMD target";
}

// ------------------------------------------------------------------ determinism

// Forward and backward twice on 2 threads with an uneven row split: the same bits.
TEST(NormDeterminism, TwoThreadsTwiceSameBits) {
  constexpr int64_t kRows = 1031;  // ~99K elements: 3 row chunks on 2 threads
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  const ScopedThreads threads(2);
  Rng rng(seed);
  GatedCase gc;
  gc.rows = kRows;
  gc.features = 96;
  gc.group_size = 32;
  GatedProblem gated(gc, rng);
  AddCase ac;
  ac.rows = kRows;
  ac.features = 96;
  AddProblem add(ac, rng);
  RowsTensor dout(kRows, 96, 96, DType::kF32), dres_out(kRows, 96, 96, DType::kF32);
  dout.Fill(rng, rng.NormalVec(kRows * 96));
  dres_out.Fill(rng, rng.NormalVec(kRows * 96));
  auto run = [&] {
    std::vector<std::vector<uint8_t>> bits;
    HostTensor out({kRows, 96}, DType::kF32), res_out({kRows, 96}, DType::kF32);
    HostTensor dx({kRows, 96}, DType::kF32), dz({kRows, 96}, DType::kF32),
        dres({kRows, 96}, DType::kF32);
    HostTensor dw({96}, DType::kF32), db({96}, DType::kF32);
    EXPECT_TRUE(RmsNormForward(gated.Inputs(), out.view(), gated.Options()).ok());
    EXPECT_TRUE(RmsNormBackward(gated.Inputs(), dout.view(),
                                {dx.view(), dw.view(), db.view(), dz.view()}, gated.Options())
                    .ok());
    for (HostTensor* t : {&out, &dx, &dz, &dw, &db}) bits.push_back(t->bytes());
    EXPECT_TRUE(AddRmsNormForward(add.Inputs(), out.view(), res_out.view(), add.Options()).ok());
    EXPECT_TRUE(AddRmsNormBackward(add.Inputs(), dout.view(), dres_out.view(),
                                   {dx.view(), dres.view(), dw.view(), db.view()}, add.Options())
                    .ok());
    for (HostTensor* t : {&out, &res_out, &dx, &dres, &dw, &db}) bits.push_back(t->bytes());
    return bits;
  };
  const auto first = run();
  const auto second = run();
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(first[i] == second[i]) << "output " << i;
}

}  // namespace
}  // namespace ssmkit::testing
