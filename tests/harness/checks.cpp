#include "harness/checks.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ssmkit::testing::harness {
namespace {

bool HasRole(const Arg& a, std::initializer_list<Role> roles) {
  return std::find(roles.begin(), roles.end(), a.role()) != roles.end();
}

// `values` rounded to `dtype`, as an op's output of that dtype is.
std::vector<double> Rounded(const std::vector<double>& values, DType dtype) {
  HostTensor t({static_cast<int64_t>(values.size())}, dtype);
  return t.Fill(values);
}

// The distance between adjacent numbers of `dtype` around x (a unit in its last place), 0 for a
// dtype that is not floating point.
double Spacing(double x, DType dtype) {
  int digits = 0, min_exponent = 0;  // significand bits; the exponent of the smallest normal
  switch (dtype) {
    case DType::kF32:
      digits = 24, min_exponent = -126;
      break;
    case DType::kBF16:
      digits = 8, min_exponent = -126;
      break;
    case DType::kF16:
      digits = 11, min_exponent = -14;
      break;
    default:
      return 0.0;
  }
  const int exponent = x == 0.0 ? min_exponent : std::max(std::ilogb(x), min_exponent);
  return std::ldexp(1.0, exponent - digits + 1);
}

// The oracle's values in an output's dtype, each rounded faithfully: `got`'s element where it
// lies within one spacing of the exact value (the nearest number or its neighbour on the
// other side), the nearest otherwise. An f32 kernel's result for an exact value near the
// midpoint of two bf16 numbers rounds to either, and the other is a whole bf16 step (2^-8
// relative) away: one such element among 255 measured 3.8e-5 relative error (causal_conv1d's
// bf16 dinitial_states, seed 1795958541379631318) though the kernel was within 1e-7 of the
// exact values.
std::vector<double> FaithfullyRounded(const std::vector<double>& exact,
                                      const std::vector<double>& got, DType dtype) {
  std::vector<double> rounded = Rounded(exact, dtype);
  for (size_t i = 0; i < exact.size() && i < got.size(); ++i) {
    if (std::abs(got[i] - exact[i]) < Spacing(exact[i], dtype)) rounded[i] = got[i];
  }
  return rounded;
}

bool IsInteger(DType dtype) { return dtype == DType::kI32 || dtype == DType::kI64; }

// How far rounding the inputs alone moves each written tensor: the oracle on every
// floating-point input scaled element-wise by 1 +- 2^-24 (f32's unit roundoff, signs at random)
// against the oracle on the inputs as given. A kernel computing in f32 returns about the exact
// result of inputs that close (it is backward stable), so where an output is ill-conditioned,
// a short dot product whose terms cancel, its error can pass a fixed tolerance by far and still
// be within a small multiple of this: selective_scan at L = 1 with no initial state,
// out = dt u sum_n B_n C_n, measured 2.8e-5 relative error against a sensitivity of 1.4e-5
// here (1.8e-5 to 3.4e-5 with other draws of the signs; seed 1795957965934646065,
// configuration 7), the terms' magnitudes 1000 times their sum. The oracle runs on first use:
// only an output over its fixed tolerance asks.
class InputRounding {
 public:
  // Before the first call: an in-place argument's values are the call's inputs only until then.
  InputRounding(const Config& config, Problem& prob, uint64_t seed)
      : config_(config), moved_(prob.OracleValues()) {
    Rng rng(seed);
    for (Arg& a : prob.args()) {
      const bool given = HasRole(a, {Role::kInput, Role::kInOut, Role::kUpstream});
      if (!given || IsInteger(a.dtype())) continue;
      for (double& x : moved_.at(a.name()))
        x *= rng.Uniform(0, 1) < 0.5 ? 1.0 - 0x1p-24 : 1.0 + 0x1p-24;
    }
  }

  // `name` written by `call`; `want` the oracle's values on the inputs as given.
  double SensitivityOf(const std::string& name, Call call, Values& want) {
    if (!forward_ran_) config_.oracle(Call::kForward, moved_), forward_ran_ = true;
    if (call == Call::kBackward && !backward_ran_)
      config_.oracle(Call::kBackward, moved_), backward_ran_ = true;
    std::vector<double> moved, exact;  // the finite pairs (an allow_inf output has others)
    const std::vector<double>& all_moved = moved_.at(name);
    const std::vector<double>& all_exact = want.at(name);
    for (size_t i = 0; i < all_exact.size(); ++i) {
      if (!std::isfinite(all_exact[i]) || !std::isfinite(all_moved[i])) continue;
      moved.push_back(all_moved[i]);
      exact.push_back(all_exact[i]);
    }
    return RelativeError(moved, exact);
  }

 private:
  const Config& config_;
  Values moved_;
  bool forward_ran_ = false, backward_ran_ = false;  // the oracle's calls on moved_
};

// An output's tolerance may grow to this many times its sensitivity to input rounding (the
// measured ratio was about 1), while that sensitivity stays below kIllConditioned: test data
// whose rounding alone moves an output more would check nothing.
constexpr double kRoundingFactor = 16.0, kIllConditioned = 1e-4;

// The largest error each output showed in a test, printed at its end (docs/ops/*.md quote them).
class Worst {
 public:
  double Track(const std::string& label, double error) {
    double& w = worst_[label];
    w = std::max(w, error);
    return error;
  }
  ~Worst() {
    for (const auto& [label, worst] : worst_)
      std::printf("  worst relative error, %s: %.3g\n", label.c_str(), worst);
  }

 private:
  std::map<std::string, double> worst_;
};

// One call on the backend; false (with a failure) when it did not succeed.
bool Run(const Config& config, Call call, Problem& prob, Backend& backend,
         const std::string& only_grad = "") {
  for (Arg& a : prob.args()) {
    if (a.role() == Role::kInOut) a.Restore();  // a previous call updated it in place
    a.Snapshot();
  }
  std::unique_ptr<Placement> place = backend.Place();
  Bound bound = prob.Bind(call, *place, only_grad);
  const Status s = config.run(call, bound);
  EXPECT_TRUE(s.ok()) << s.message();
  const Status finished = place->Finish();
  EXPECT_TRUE(finished.ok()) << finished.message();
  return s.ok() && finished.ok();
}

// The elements where `expected` is infinite must hold the same infinity in `got`; both keep
// only the others, to be compared as usual.
void SplitInfinities(const std::string& name, std::vector<double>& got,
                     std::vector<double>& expected) {
  std::vector<double> g, e;
  int64_t unlike = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::isinf(expected[i])) {
      unlike += got[i] != expected[i];
    } else {
      g.push_back(got[i]);
      e.push_back(expected[i]);
    }
  }
  EXPECT_EQ(unlike, 0) << name << ": infinities unlike the oracle's";
  got = std::move(g);
  expected = std::move(e);
}

// Tolerances in place of some tensors' own, by name.
using Tols = std::map<std::string, double>;

// The written tensors of `roles` against the oracle's values; the read-only ones unchanged.
// Returns, for each written tensor whose tolerance was widened for its ill-conditioning, its own
// tolerance so widened (to kRoundingFactor times its sensitivity to input rounding).
Tols ExpectMatchesOracle(Problem& prob, Values& want, Call call,
                         std::initializer_list<Role> written, const Backend& backend, Worst& worst,
                         InputRounding& rounding, const std::string& only = "",
                         const Tols& tols = {}) {
  Tols widened;
  for (Arg& a : prob.args()) {
    // A saved output is an input of the backward.
    if (HasRole(a, {Role::kInput, Role::kUpstream}) || (a.saved() && !HasRole(a, written))) {
      EXPECT_TRUE(a.Unchanged()) << a.name() << ": an input was written";
      continue;
    }
    if (!HasRole(a, written)) continue;
    if (!only.empty() && a.name() != only) {
      EXPECT_TRUE(a.Unchanged()) << a.name() << ": written though not requested";
      continue;
    }
    std::vector<double> got = a.Stored();
    std::vector<double> expected = FaithfullyRounded(want.at(a.name()), got, a.dtype());
    if (a.allow_inf()) SplitInfinities(a.name(), got, expected);
    const int64_t bad =
        std::count_if(got.begin(), got.end(), [](double v) { return !std::isfinite(v); });
    EXPECT_EQ(bad, 0) << a.name() << ": elements left poisoned or not finite";
    double tol = tols.count(a.name()) ? tols.at(a.name()) : a.tol().For(backend.cuda());
    const double error = worst.Track(a.name(), RelativeError(got, expected));
    if (std::isfinite(error) && error > tol && tol > 0.0) {
      const double sensitivity = worst.Track(a.name() + " moved by input rounding",
                                             rounding.SensitivityOf(a.name(), call, want));
      EXPECT_LT(sensitivity, kIllConditioned)
          << a.name() << ": ill-conditioned test data (rounding the inputs alone moves it)";
      if (sensitivity < kIllConditioned) {
        tol = std::max(tol, kRoundingFactor * sensitivity);
        widened[a.name()] = std::max(a.tol().For(backend.cuda()), kRoundingFactor * sensitivity);
      }
    }
    EXPECT_LE(error, tol) << a.name() << ": against the oracle";
    EXPECT_TRUE(a.PaddingUnchanged()) << a.name() << ": wrote into the padding between rows";
  }
  return widened;
}

// Each gradient with a GradNoise factor computed with the upstream gradients scaled by s, over
// s, for s = 3 and 0.3: the backward is linear in them, so in exact arithmetic these equal the
// unscaled gradients, and what differs is rounding (s not a power of two: every product rounds
// anew). By gradient name, one vector per s.
using Scaled = std::map<std::string, std::vector<std::vector<double>>>;

Scaled ScaledBackwards(const Config& config, Problem& prob, Backend& backend) {
  Scaled scaled;
  const auto noisy = [](const Arg& a) { return a.role() == Role::kGrad && a.noise() > 0.0; };
  if (std::none_of(prob.args().begin(), prob.args().end(), noisy)) return scaled;
  for (double s : {3.0, 0.3}) {
    std::map<std::string, std::vector<double>> upstream;
    for (Arg& a : prob.args()) {
      if (a.role() != Role::kUpstream) continue;
      std::vector<double> v = upstream[a.name()] = a.Stored();
      for (double& x : v) x *= s;
      a.Given(v);
    }
    const bool ran = Run(config, Call::kBackward, prob, backend);
    for (Arg& a : prob.args()) {
      if (a.role() == Role::kUpstream) a.Given(upstream.at(a.name()));
      if (!ran || !noisy(a)) continue;
      std::vector<double> g = a.Stored();
      for (double& x : g) x /= s;
      scaled[a.name()].push_back(std::move(g));
    }
  }
  return scaled;
}

// The tolerance of each gradient with a GradNoise factor: its own, or that factor times its
// rounding noise (the scaled gradients against the unscaled ones just computed) when larger.
// The noise must itself stay at rounding level (below 1e-2): a scaling bug cannot widen the
// bounds.
Tols NoiseTolerances(Problem& prob, const Scaled& scaled, const Backend& backend, Worst& worst) {
  Tols tols;
  for (Arg& a : prob.args()) {
    if (!scaled.count(a.name())) continue;
    double noise = 0.0;
    for (const std::vector<double>& g : scaled.at(a.name()))
      noise = std::max(noise, RelativeError(g, a.Stored()));
    EXPECT_LT(worst.Track(a.name() + " rounding noise", noise), 1e-2)
        << a.name() << ": not linear in the upstream gradients";
    tols[a.name()] = std::max(a.tol().For(backend.cuda()), a.noise() * noise);
  }
  return tols;
}

// L = sum over outputs of upstream . output, through the oracle forward; its central
// differences in each differentiable input against the oracle's and the op's gradients. The
// op's gradient is held to its own tolerance, or to the one ExpectMatchesOracle widened for
// its ill-conditioning (`widened`: causal_conv1d's dbias, a sum whose terms cancel, measured
// 1.5e-5 against a sensitivity to input rounding of 3e-5, seed 1795971711279443372), plus the
// finite differences' own error; not to a rounding-noise tolerance, which a wrong gradient
// can widen.
void ExpectFiniteDifferences(const ErasedOp& op, const Config& config, Problem& prob,
                             Values& oracle, const Backend& backend, Worst& worst,
                             const Tols& widened) {
  Values v = prob.OracleValues();
  auto loss = [&] {
    config.oracle(Call::kForward, v);
    double sum = 0.0;
    for (Arg& a : prob.args()) {
      if (a.role() != Role::kUpstream) continue;
      const std::vector<double>& up = v.at(a.name());
      const std::vector<double>& out = v.at(a.name().substr(1));
      for (size_t i = 0; i < up.size(); ++i) sum += up[i] * out[i];
    }
    return sum;
  };
  for (Arg& a : prob.args()) {
    if (a.role() != Role::kGrad) continue;
    std::vector<double>& input = v.at(a.name().substr(1));
    std::vector<double> fd(input.size());
    for (size_t i = 0; i < input.size(); ++i) {
      const double h = op.fd.step;
      fd[i] = op.fd.richardson ? (4.0 * CentralDifference(input, i, h, loss) -
                                  CentralDifference(input, i, 2.0 * h, loss)) /
                                     3.0
                               : CentralDifference(input, i, h, loss);
    }
    const double fd_error = RelativeError(oracle.at(a.name()), fd);
    EXPECT_LE(worst.Track(a.name() + " oracle vs FD", fd_error), op.fd.oracle)
        << a.name() << ": the oracle's gradient against finite differences";
    const double tol = widened.count(a.name()) ? widened.at(a.name()) : a.tol().For(backend.cuda());
    EXPECT_LE(worst.Track(a.name() + " op vs FD", RelativeError(a.Stored(), fd)),
              std::max(op.fd.op, tol) + fd_error)
        << a.name() << ": the op's gradient against finite differences";
  }
}

// Median seconds of kRuns calls (after one warm-up), the backend synchronised after each.
double MedianSeconds(const Config& config, Call call, Problem& prob, Backend& backend) {
  constexpr int kRuns = 11;
  std::unique_ptr<Placement> place = backend.Place();
  Bound bound = prob.Bind(call, *place);
  std::vector<double> times;
  for (int r = 0; r <= kRuns; ++r) {
    const auto start = std::chrono::steady_clock::now();
    const Status s = config.run(call, bound);
    const Status synced = place->Sync();
    if (!s.ok() || !synced.ok()) return NAN;
    if (r > 0)
      times.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::nth_element(times.begin(), times.begin() + kRuns / 2, times.end());
  return times[kRuns / 2];
}

void ExpectInputsFilled(Problem& prob) {
  for (Arg& a : prob.args()) {
    if (!HasRole(a, {Role::kInput, Role::kInOut, Role::kUpstream})) continue;
    const std::vector<double> v = a.Stored();
    EXPECT_TRUE(std::any_of(v.begin(), v.end(), [](double x) { return x != 0.0; }))
        << a.name() << ": all zero (no fill declared?)";
  }
}

}  // namespace

void RunCase(const ErasedOp& op, const ErasedCase& c, Backend& backend, bool perf) {
  const std::string skip = backend.SkipReason();
  if (!skip.empty()) GTEST_SKIP() << skip;
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  std::unique_ptr<ScopedThreads> threads;
  if (c.checks.threads > 0) threads = std::make_unique<ScopedThreads>(c.checks.threads);
  Worst worst;
  backend.Enter();
  for (size_t i = 0; i < c.configs.size(); ++i) {
    const Config& config = c.configs[i];
    SCOPED_TRACE("configuration " + std::to_string(i) + ": " + config.name);
    Problem prob(seed + i);
    config.make(prob);
    const bool backward = op.has_backward && c.checks.backward;
    if (backward) prob.AddGradients();
    ExpectInputsFilled(prob);
    Values want = prob.OracleValues();
    config.oracle(Call::kForward, want);
    InputRounding rounding(config, prob, seed + i);
    if (!Run(config, Call::kForward, prob, backend)) continue;
    ExpectMatchesOracle(prob, want, Call::kForward, {Role::kOutput, Role::kInOut}, backend, worst,
                        rounding);
    if (perf) {
      std::printf("[perf] %s/%s/%s %s: forward %.3g us", op.name.c_str(), c.name.c_str(),
                  backend.Name().c_str(), config.name.c_str(),
                  1e6 * MedianSeconds(config, Call::kForward, prob, backend));
    }
    if (backward) {
      config.oracle(Call::kBackward, want);
      const Scaled scaled = ScaledBackwards(config, prob, backend);
      if (Run(config, Call::kBackward, prob, backend)) {
        const Tols widened =
            ExpectMatchesOracle(prob, want, Call::kBackward, {Role::kGrad}, backend, worst,
                                rounding, "", NoiseTolerances(prob, scaled, backend, worst));
        if (c.checks.finite_differences)
          ExpectFiniteDifferences(op, config, prob, want, backend, worst, widened);
      }
      if (perf) {
        std::printf(", backward %.3g us",
                    1e6 * MedianSeconds(config, Call::kBackward, prob, backend));
      }
      for (Arg& grad : prob.args()) {
        if (!c.checks.grads_alone || grad.role() != Role::kGrad) continue;
        SCOPED_TRACE(grad.name() + " alone");
        for (Arg& a : prob.args()) {
          if (a.role() == Role::kGrad) a.Poison();
        }
        if (Run(config, Call::kBackward, prob, backend, grad.name()))
          ExpectMatchesOracle(prob, want, Call::kBackward, {Role::kGrad}, backend, worst, rounding,
                              grad.name());
      }
    }
    if (perf) std::printf("\n");
  }
  backend.Leave();
  std::printf("  %zu configurations on %s\n", c.configs.size(), backend.Name().c_str());
}

void RunValid(const ErasedOp& op) {
  Problem prob(FreshSeed());
  op.valid.make(prob);
  if (op.has_backward) prob.AddGradients();
  HostPlacement host;
  for (Call call : {Call::kForward, Call::kBackward}) {
    if (call == Call::kBackward && !op.has_backward) continue;
    Bound bound = prob.Bind(call, host);
    const Status s = op.valid.run(call, bound);
    EXPECT_TRUE(s.ok()) << (call == Call::kForward ? "forward: " : "backward: ") << s.message();
  }
}

void RunBadInput(const ErasedOp& op, const ErasedBadInput& bad) {
  Problem prob(FreshSeed());
  bad.config.make(prob);
  if (op.has_backward) prob.AddGradients();
  for (Arg& a : prob.args()) a.Snapshot();
  HostPlacement host;
  Bound bound = prob.Bind(bad.call, host);
  const Status s = bad.config.run(bad.call, bound);
  EXPECT_EQ(s.code(), bad.code) << "accepted, or refused with another code: " << s.message();
  for (const std::string& piece : bad.pieces)
    EXPECT_NE(s.message().find(piece), std::string::npos)
        << "missing \"" << piece << "\" in: " << s.message();
  for (Arg& a : prob.args()) EXPECT_TRUE(a.Unchanged()) << a.name() << " was written on error";
}

}  // namespace ssmkit::testing::harness
