// Causal conv1d against the fp64 oracle: the forward for every width K in 2..8, L = 1,
// L < K - 1, odd L, with and without bias / silu / initial_states / final_states, B > 1,
// f32 and bf16, strided rows; every gradient of the oracle and of the fast backward against
// central finite differences, and the fast backward against the oracle's on mid shapes; the
// decode update; every compiled SIMD target; determinism across runs and thread counts.
#include "ssmkit/conv1d.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ref/conv1d_ref.hpp"
#include "ssmkit/threads.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

double Tolerance(DType dtype) { return dtype == DType::kF32 ? 1e-5 : 1e-2; }

// v as stored in `dtype` (f32 or bf16), back as doubles.
std::vector<double> Rounded(std::vector<double> v, DType dtype) {
  for (double& e : v) {
    const float f = static_cast<float>(e);
    e = dtype == DType::kBF16 ? Bf16ToF32(F32ToBf16(f)) : f;
  }
  return v;
}

// A (B, D, L) tensor whose rows are L + pad elements apart: the pad must be neither read as
// data nor written.
class SeqTensor {
 public:
  SeqTensor(int64_t batch, int64_t dim, int64_t len, int64_t pad, DType dtype)
      : B_(batch), D_(dim), L_(len), S_(len + pad), t_({batch, dim, len + pad}, dtype) {}
  Tensor view() {
    Tensor v = t_.view();
    v.shape[2] = L_;
    return v;
  }
  // Fills rows and pads from `rng` (rows from `values` when given); returns the stored rows.
  std::vector<double> Fill(Rng& rng, const std::vector<double>& values) {
    std::vector<double> all = rng.NormalVec(B_ * D_ * S_);
    for (int64_t r = 0; r < B_ * D_; ++r) {
      for (int64_t l = 0; l < L_; ++l) all[r * S_ + l] = values[r * L_ + l];
    }
    t_.Fill(all);
    return Values();
  }
  void Poison() { t_.Poison(); }
  std::vector<double> Values() const {
    const std::vector<double> all = t_.ToDouble();
    std::vector<double> v(static_cast<size_t>(B_ * D_ * L_));
    for (int64_t r = 0; r < B_ * D_; ++r) {
      for (int64_t l = 0; l < L_; ++l) v[r * L_ + l] = all[r * S_ + l];
    }
    return v;
  }
  // True when every pad element is still NaN (after Poison).
  bool PadsPoisoned() const {
    const std::vector<double> all = t_.ToDouble();
    for (int64_t r = 0; r < B_ * D_; ++r) {
      for (int64_t l = L_; l < S_; ++l) {
        if (!std::isnan(all[r * S_ + l])) return false;
      }
    }
    return true;
  }
  const std::vector<uint8_t>& bytes() const { return t_.bytes(); }

 private:
  int64_t B_, D_, L_, S_;
  HostTensor t_;
};

struct ConvCase {
  int64_t B = 2, D = 3, L = 7, K = 4;
  DType dtype = DType::kF32;
  DType states_dtype = DType::kF32;  // initial_states and final_states
  bool bias = true, silu = false, initial = false, final = false;
  int64_t pad = 0;  // strided rows of x, out, dout, dx
  std::string Name() const {
    return "B=" + std::to_string(B) + " D=" + std::to_string(D) + " L=" + std::to_string(L) +
           " K=" + std::to_string(K) + " " + DTypeName(dtype) + " states " +
           DTypeName(states_dtype) + (bias ? " bias" : "") + (silu ? " silu" : "") +
           (initial ? " initial" : "") + (final ? " final" : "") + " pad=" + std::to_string(pad);
  }
};

// Random inputs of one case, stored in their dtypes, and the stored values as doubles.
struct ConvProblem {
  ConvCase c;
  SeqTensor x;
  HostTensor weight, bias, h0;
  std::vector<double> xd, wd, bd, h0d;

  ConvProblem(const ConvCase& cc, Rng& rng)
      : c(cc),
        x(cc.B, cc.D, cc.L, cc.pad, cc.dtype),
        weight({cc.D, cc.K}, DType::kF32),
        bias({cc.D}, DType::kF32),
        h0({cc.B, cc.D, cc.K - 1}, cc.states_dtype) {
    xd = x.Fill(rng, rng.NormalVec(c.B * c.D * c.L));
    wd = weight.Fill(rng.UniformVec(c.D * c.K, -0.8, 0.8));
    if (c.bias) bd = bias.Fill(rng.UniformVec(c.D, -0.5, 0.5));
    if (c.initial) h0d = h0.Fill(rng.NormalVec(c.B * c.D * (c.K - 1)));
  }
  CausalConv1dInputs Inputs() {
    CausalConv1dInputs in;
    in.x = x.view();
    in.weight = weight.view();
    if (c.bias) in.bias = bias.view();
    if (c.initial) in.initial_states = h0.view();
    in.activation = c.silu ? Conv1dActivation::kSilu : Conv1dActivation::kNone;
    return in;
  }
  ref::Conv1dShape Shape() const { return {c.B, c.D, c.L, c.K, c.silu}; }
  ref::Conv1dInputs RefInputs() const {
    return {xd.data(), wd.data(), c.bias ? bd.data() : nullptr, c.initial ? h0d.data() : nullptr};
  }
  int64_t States() const { return c.B * c.D * (c.K - 1); }
};

struct ForwardResult {
  double out_error = 0.0;
  bool final_exact = true;
  bool pads_untouched = true;
};

ForwardResult ForwardCase(const ConvCase& c, uint64_t seed) {
  Rng rng(seed);
  ConvProblem prob(c, rng);
  SeqTensor out(c.B, c.D, c.L, c.pad, c.dtype);
  out.Poison();
  HostTensor final_states({c.B, c.D, c.K - 1}, c.states_dtype);
  final_states.Poison();
  const Status s =
      CausalConv1dForward(prob.Inputs(), out.view(), c.final ? final_states.view() : Tensor{});
  EXPECT_TRUE(s.ok()) << s.message();
  std::vector<double> want(c.B * c.D * c.L), want_final(prob.States());
  ref::CausalConv1dForward(prob.Shape(), prob.RefInputs(), want.data(), want_final.data());
  ForwardResult r;
  r.out_error = RelativeError(out.Values(), want);
  r.pads_untouched = out.PadsPoisoned();
  // final_states are copies of inputs: exact, after rounding to their dtype.
  if (c.final) r.final_exact = final_states.ToDouble() == Rounded(want_final, c.states_dtype);
  return r;
}

TEST(Conv1dForward, MatchesOracleEveryWidthAndOption) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  int n = 0;
  double worst[2] = {0.0, 0.0};
  for (int64_t K = kMinConvWidth; K <= kMaxConvWidth; ++K) {
    std::vector<int64_t> lengths = {1, 7, 37, 64};
    if (K > 2) lengths.push_back(K - 2);  // L < K - 1: final_states reach into initial_states
    for (int64_t L : lengths) {
      for (int options = 0; options < 16; ++options) {
        for (DType dtype : {DType::kF32, DType::kBF16}) {
          ConvCase c;
          c.K = K;
          c.L = L;
          c.dtype = dtype;
          c.bias = options & 1;
          c.silu = options & 2;
          c.initial = options & 4;
          c.final = options & 8;
          c.pad = options % 3;
          SCOPED_TRACE(c.Name());
          const ForwardResult r = ForwardCase(c, seed + n++);
          EXPECT_LE(r.out_error, Tolerance(dtype));
          EXPECT_TRUE(r.final_exact);
          EXPECT_TRUE(r.pads_untouched);
          double& w = worst[dtype == DType::kBF16];
          w = std::max(w, r.out_error);
        }
      }
    }
  }
  std::printf("conv1d forward worst relative error: f32 %.3g, bf16 %.3g\n", worst[0], worst[1]);
}

TEST(Conv1dForward, MixedStateDtypesAndLargerBatch) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  int n = 0;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (DType states : {DType::kF32, DType::kBF16}) {
      ConvCase c;
      c.B = 5;
      c.D = 17;
      c.L = 131;
      c.K = 4;
      c.dtype = dtype;
      c.states_dtype = states;
      c.silu = true;
      c.initial = c.final = true;
      SCOPED_TRACE(c.Name());
      const ForwardResult r = ForwardCase(c, seed + n++);
      EXPECT_LE(r.out_error, Tolerance(dtype));
      EXPECT_TRUE(r.final_exact);
    }
  }
}

// ------------------------------------------------------------------ gradients

struct ConvGradients {
  std::vector<double> dx, dweight, dbias, dh0;
};

// The gradient inputs of one backward: dout (in x's dtype) and dfinal_states.
struct Upstream {
  SeqTensor dout;
  HostTensor dfinal;
  std::vector<double> dout_d, dfinal_d;
  Upstream(const ConvCase& c, Rng& rng, bool with_dfinal)
      : dout(c.B, c.D, c.L, c.pad, c.dtype), dfinal({c.B, c.D, c.K - 1}, c.states_dtype) {
    dout_d = dout.Fill(rng, rng.NormalVec(c.B * c.D * c.L));
    if (with_dfinal) dfinal_d = dfinal.Fill(rng.NormalVec(c.B * c.D * (c.K - 1)));
  }
};

ConvGradients OracleBackward(const ConvProblem& prob, const Upstream& up) {
  const ConvCase& c = prob.c;
  ConvGradients g;
  g.dx.resize(c.B * c.D * c.L);
  g.dweight.resize(c.D * c.K);
  if (c.bias) g.dbias.resize(c.D);
  if (c.initial) g.dh0.resize(prob.States());
  ref::CausalConv1dBackward(prob.Shape(), prob.RefInputs(), up.dout_d.data(),
                            up.dfinal_d.empty() ? nullptr : up.dfinal_d.data(),
                            {g.dx.data(), g.dweight.data(), c.bias ? g.dbias.data() : nullptr,
                             c.initial ? g.dh0.data() : nullptr});
  return g;
}

// Every requested gradient poisoned, then the fast backward; the pads of dx checked untouched.
ConvGradients FastBackward(ConvProblem& prob, Upstream& up) {
  const ConvCase& c = prob.c;
  SeqTensor dx(c.B, c.D, c.L, c.pad, c.dtype);
  HostTensor dweight({c.D, c.K}, DType::kF32), dbias({c.D}, DType::kF32);
  HostTensor dh0({c.B, c.D, c.K - 1}, c.states_dtype);
  dx.Poison();
  dweight.Poison();
  dbias.Poison();
  dh0.Poison();
  CausalConv1dGrads grads{dx.view(), dweight.view(), c.bias ? dbias.view() : Tensor{},
                          c.initial ? dh0.view() : Tensor{}};
  const Status s = CausalConv1dBackward(prob.Inputs(), up.dout.view(),
                                        up.dfinal_d.empty() ? Tensor{} : up.dfinal.view(), grads);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(dx.PadsPoisoned());
  ConvGradients g;
  g.dx = dx.Values();
  g.dweight = dweight.ToDouble();
  if (c.bias) g.dbias = dbias.ToDouble();
  if (c.initial) g.dh0 = dh0.ToDouble();
  return g;
}

// Central differences of loss = sum dout * out + sum dfinal * final_states (the oracle forward).
ConvGradients FiniteDifferences(ConvProblem& prob, const Upstream& up) {
  const ConvCase& c = prob.c;
  std::vector<double> out(c.B * c.D * c.L), fin(prob.States());
  auto loss = [&] {
    ref::CausalConv1dForward(prob.Shape(), prob.RefInputs(), out.data(), fin.data());
    double sum = 0.0;
    for (size_t i = 0; i < out.size(); ++i) sum += up.dout_d[i] * out[i];
    for (size_t i = 0; i < up.dfinal_d.size(); ++i) sum += up.dfinal_d[i] * fin[i];
    return sum;
  };
  auto grad = [&](std::vector<double>& v) {
    std::vector<double> g(v.size());
    for (size_t i = 0; i < v.size(); ++i) g[i] = CentralDifference(v, i, 1e-6, loss);
    return g;
  };
  ConvGradients g;
  g.dx = grad(prob.xd);
  g.dweight = grad(prob.wd);
  if (c.bias) g.dbias = grad(prob.bd);
  if (c.initial) g.dh0 = grad(prob.h0d);
  return g;
}

void ExpectClose(const ConvGradients& got, const ConvGradients& want, double tol, double* worst) {
  const std::pair<const char*, std::pair<const std::vector<double>*, const std::vector<double>*>>
      all[] = {{"dx", {&got.dx, &want.dx}},
               {"dweight", {&got.dweight, &want.dweight}},
               {"dbias", {&got.dbias, &want.dbias}},
               {"dinitial_states", {&got.dh0, &want.dh0}}};
  for (const auto& [name, pair] : all) {
    ASSERT_EQ(pair.first->size(), pair.second->size()) << name;
    if (pair.first->empty()) continue;
    const double e = RelativeError(*pair.first, *pair.second);
    EXPECT_LE(e, tol) << name;
    *worst = std::max(*worst, e);
  }
}

TEST(Conv1dGrad, OracleAndFastMatchFiniteDifferences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  int n = 0;
  double worst_oracle = 0.0, worst_fast = 0.0;
  for (int64_t K : {2, 3, 4, 8}) {
    for (int64_t L : {int64_t{1}, K - 1 > 1 ? K - 2 : int64_t{2}, int64_t{9}}) {
      for (int options = 0; options < 4; ++options) {
        ConvCase c;
        c.B = 2;
        c.D = 2;
        c.K = K;
        c.L = L;
        c.silu = options & 1;
        c.bias = c.initial = options & 2;
        c.pad = options == 3;
        SCOPED_TRACE(c.Name());
        Rng rng(seed + n++);
        ConvProblem prob(c, rng);
        Upstream up(c, rng, /*with_dfinal=*/options != 0);
        const ConvGradients fd = FiniteDifferences(prob, up);
        ExpectClose(OracleBackward(prob, up), fd, 1e-7, &worst_oracle);
        ExpectClose(FastBackward(prob, up), fd, 1e-5, &worst_fast);
      }
    }
  }
  std::printf("conv1d gradients vs finite differences: oracle %.3g, fast %.3g\n", worst_oracle,
              worst_fast);
}

TEST(Conv1dGrad, FastMatchesOracleOnMidShapes) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  int n = 0;
  double worst[2] = {0.0, 0.0};
  for (int64_t K = kMinConvWidth; K <= kMaxConvWidth; ++K) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      ConvCase c;
      c.B = 3;
      c.D = 24;
      c.L = 203;
      c.K = K;
      c.dtype = dtype;
      c.states_dtype = K % 2 ? DType::kF32 : dtype;
      c.silu = K % 2 == 0;
      c.bias = c.initial = K != 5;
      c.pad = K == 6 ? 3 : 0;
      SCOPED_TRACE(c.Name());
      Rng rng(seed + n++);
      ConvProblem prob(c, rng);
      Upstream up(c, rng, K != 3);
      ConvGradients want = OracleBackward(prob, up);
      want.dx = Rounded(want.dx, dtype);
      if (c.initial) want.dh0 = Rounded(want.dh0, c.states_dtype);
      ExpectClose(FastBackward(prob, up), want, Tolerance(dtype), &worst[dtype == DType::kBF16]);
    }
  }
  std::printf("conv1d fast backward vs oracle: f32 %.3g, bf16 %.3g\n", worst[0], worst[1]);
}

// Each gradient output alone: the op writes that one and nothing else.
TEST(Conv1dGrad, EachOutputAlone) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  ConvCase c;
  c.B = 2;
  c.D = 5;
  c.L = 19;
  c.K = 4;
  c.silu = c.bias = c.initial = true;
  Rng rng(seed);
  ConvProblem prob(c, rng);
  Upstream up(c, rng, true);
  const ConvGradients want = OracleBackward(prob, up);
  for (int which = 0; which < 4; ++which) {
    SCOPED_TRACE(which);
    HostTensor dx({c.B, c.D, c.L}, c.dtype), dw({c.D, c.K}, DType::kF32), db({c.D}, DType::kF32);
    HostTensor dh0({c.B, c.D, c.K - 1}, c.states_dtype);
    CausalConv1dGrads grads;
    HostTensor* target[] = {&dx, &dw, &db, &dh0};
    Tensor* slot[] = {&grads.dx, &grads.dweight, &grads.dbias, &grads.dinitial_states};
    const std::vector<double>* expect[] = {&want.dx, &want.dweight, &want.dbias, &want.dh0};
    target[which]->Poison();
    *slot[which] = target[which]->view();
    const Status s = CausalConv1dBackward(prob.Inputs(), up.dout.view(), up.dfinal.view(), grads);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_LE(RelativeError(target[which]->ToDouble(), *expect[which]), 1e-5);
  }
}

// ------------------------------------------------------------------ update

struct UpdateCase {
  int64_t B = 2, D = 5, T = 0, K = 4, S = 3;  // T = 0: the (B, D) form, one step
  DType dtype = DType::kF32;
  bool bias = true, silu = true, alias = false;
  std::string Name() const {
    return "B=" + std::to_string(B) + " D=" + std::to_string(D) + " T=" + std::to_string(T) +
           " K=" + std::to_string(K) + " S=" + std::to_string(S) + " " + DTypeName(dtype) +
           (bias ? " bias" : "") + (silu ? " silu" : "") + (alias ? " out=x" : "");
  }
};

struct UpdateResult {
  double out_error;
  bool state_exact;
};

UpdateResult UpdateCaseError(const UpdateCase& c, uint64_t seed) {
  Rng rng(seed);
  const int64_t T = std::max<int64_t>(c.T, 1);
  std::vector<int64_t> x_shape = {c.B, c.D};
  if (c.T > 0) x_shape.push_back(c.T);
  HostTensor x(x_shape, c.dtype), out(x_shape, c.dtype), weight({c.D, c.K}, DType::kF32);
  HostTensor bias({c.D}, DType::kF32), state({c.B, c.D, c.S}, DType::kF32);
  const std::vector<double> xd = x.Fill(rng.NormalVec(c.B * c.D * T));
  const std::vector<double> wd = weight.Fill(rng.UniformVec(c.D * c.K, -0.8, 0.8));
  const std::vector<double> bd = bias.Fill(rng.UniformVec(c.D, -0.5, 0.5));
  std::vector<double> sd = state.Fill(rng.NormalVec(c.B * c.D * c.S));
  out.Poison();
  CausalConv1dUpdateInputs in{x.view(), weight.view(), c.bias ? bias.view() : Tensor{},
                              c.silu ? Conv1dActivation::kSilu : Conv1dActivation::kNone};
  const Status s = CausalConv1dUpdate(in, state.view(), c.alias ? x.view() : out.view());
  EXPECT_TRUE(s.ok()) << s.message();
  std::vector<double> want(c.B * c.D * T);
  ref::CausalConv1dUpdate({c.B, c.D, T, c.K, c.silu}, c.S, xd.data(), wd.data(),
                          c.bias ? bd.data() : nullptr, sd.data(), want.data());
  return {RelativeError(c.alias ? x.ToDouble() : out.ToDouble(), want), state.ToDouble() == sd};
}

TEST(Conv1dUpdate, MatchesOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  int n = 0;
  // D = 37: whole vectors of channels and a tail in each batch row (the decode step's
  // channel-vectorised path at S = K - 1, f32), D = 5: the tail alone.
  for (int64_t D : {5, 37}) {
    for (int64_t K = kMinConvWidth; K <= kMaxConvWidth; ++K) {
      for (int64_t T : {0, 1, 3, 11}) {
        for (int64_t extra : {0, 1, 4}) {
          for (DType dtype : {DType::kF32, DType::kBF16}) {
            UpdateCase c;
            c.D = D;
            c.K = K;
            c.T = T;
            c.S = K - 1 + extra;
            c.dtype = dtype;
            c.bias = (K + T) % 2 == 0;
            c.silu = extra != 1;
            c.alias = (T == 3 && extra == 4) || (T == 0 && extra == 0 && K % 2 == 1);
            SCOPED_TRACE(c.Name());
            const UpdateResult r = UpdateCaseError(c, seed + n++);
            EXPECT_LE(r.out_error, Tolerance(dtype));
            EXPECT_TRUE(r.state_exact) << "the state holds copies of inputs: exact";
          }
        }
      }
    }
  }
}

// Enough rows for the threaded path and for several activation passes per block.
TEST(Conv1dUpdate, ManyRowsThreaded) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  SetNumThreads(2);
  for (int64_t T : {0, 8}) {
    UpdateCase c;
    c.B = 3;
    c.D = 1536 * 8;
    c.T = T;
    SCOPED_TRACE(c.Name());
    const UpdateResult r = UpdateCaseError(c, seed + T);
    EXPECT_LE(r.out_error, 1e-5);
    EXPECT_TRUE(r.state_exact);
  }
  SetNumThreads(0);
}

// ------------------------------------------------------------------ targets, determinism

TEST(Conv1dTargets, EveryCompiledTargetMatchesTheOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  int n = 0;
  const int targets_run = ForEachSimdTarget([&] {
    for (int64_t K : {2, 4, 7}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        ConvCase c;
        c.K = K;
        c.L = 29;
        c.dtype = dtype;
        c.silu = c.initial = c.final = true;
        SCOPED_TRACE(c.Name());
        EXPECT_LE(ForwardCase(c, seed + n++).out_error, Tolerance(dtype));
        Rng rng(seed + n++);
        ConvProblem prob(c, rng);
        Upstream up(c, rng, true);
        ConvGradients want = OracleBackward(prob, up);
        want.dx = Rounded(want.dx, dtype);
        double worst = 0.0;
        ExpectClose(FastBackward(prob, up), want, Tolerance(dtype), &worst);
        UpdateCase u;
        u.K = K;
        u.S = K - 1;
        u.T = 5;
        u.dtype = dtype;
        EXPECT_LE(UpdateCaseError(u, seed + n++).out_error, Tolerance(dtype));
      }
    }
  });
  EXPECT_GE(targets_run, 2) << "the portable target at least, and one SIMD target";
}

// Forward and backward on 1 and 2 threads, twice each: the same bits every time (the backward
// reduces each channel on one thread in batch-then-time order, whatever the split).
TEST(Conv1dDeterminism, SameBitsAcrossRunsAndThreadCounts) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  ConvCase c;
  c.B = 3;
  c.D = 67;
  c.L = 301;
  c.K = 4;
  c.silu = c.bias = c.initial = c.final = true;
  Rng rng(seed);
  ConvProblem prob(c, rng);
  Upstream up(c, rng, true);
  std::vector<uint8_t> first;
  for (int threads : {2, 2, 1, 1}) {
    SetNumThreads(threads);
    SeqTensor out(c.B, c.D, c.L, 0, c.dtype), dx(c.B, c.D, c.L, 0, c.dtype);
    HostTensor fin({c.B, c.D, c.K - 1}, DType::kF32), dw({c.D, c.K}, DType::kF32);
    HostTensor db({c.D}, DType::kF32), dh0({c.B, c.D, c.K - 1}, DType::kF32);
    ASSERT_TRUE(CausalConv1dForward(prob.Inputs(), out.view(), fin.view()).ok());
    ASSERT_TRUE(CausalConv1dBackward(prob.Inputs(), up.dout.view(), up.dfinal.view(),
                                     {dx.view(), dw.view(), db.view(), dh0.view()})
                    .ok());
    std::vector<uint8_t> bits;
    for (const std::vector<uint8_t>* b :
         {&out.bytes(), &fin.bytes(), &dx.bytes(), &dw.bytes(), &db.bytes(), &dh0.bytes()}) {
      bits.insert(bits.end(), b->begin(), b->end());
    }
    if (first.empty()) first = bits;
    EXPECT_TRUE(bits == first) << "threads " << threads;
  }
  SetNumThreads(0);
}

}  // namespace
}  // namespace ssmkit::testing
