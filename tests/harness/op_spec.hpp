// What an op's harness case file writes: an OpSpec, the op described once (its inputs and
// outputs for a configuration, the call forward and backward, the fp64 oracle), a table of cases
// (named lists of configurations, and what to check on them), a valid configuration and the
// mutations of it the op must refuse. SSMKIT_HARNESS_OP registers it; runner.cpp turns it into
// GoogleTest tests. docs/testing.md, "The op harness", has the steps.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "cuda/variant.hpp"
#include "harness/problem.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::testing::harness {

// What a case checks beyond "forward (and backward) against the oracle on every backend".
struct Checks {
  bool backward = true;             // false: the forward alone (in-place aliasing, say)
  bool finite_differences = false;  // gradients of oracle and op against central differences
  bool grads_alone = false;         // each gradient requested alone: written, the others not
  int threads = 0;                  // the library's thread count for the case (0: default)
  bool cuda = true;                 // false: a CPU-only feature (the scan's chunk states)
};

template <class P>
struct Case {
  std::string name;  // [a-z0-9_]: the test is Harness/<op>.<case>/<backend>
  std::vector<P> configs;
  Checks checks = {};
};

// A mutation of the valid configuration (its options, or the tensors bound for the call) that
// the op must refuse with `code` (kInvalidArgument, or kUnsupported for a valid request this
// build cannot serve), a message holding each piece (the first names the argument), and
// nothing written.
template <class P>
struct BadInput {
  std::string name;
  Call call;
  std::function<void(P&, Bound&)> mutate;
  std::vector<std::string> pieces;
  StatusCode code = StatusCode::kInvalidArgument;
};

// Several lists of bad inputs as one, in order (a case file's forward and backward rules).
template <class P>
std::vector<BadInput<P>> Concat(std::initializer_list<std::vector<BadInput<P>>> lists) {
  std::vector<BadInput<P>> all;
  for (const std::vector<BadInput<P>>& list : lists)
    all.insert(all.end(), list.begin(), list.end());
  return all;
}

// Central differences of step `step`: the oracle's analytic backward within `oracle`, the op's
// within `op` (or the gradient's own tolerance, when looser). With `richardson`, those at steps
// h and 2 h combined, (4 D(h) - D(2 h)) / 3: O(h^4) truncation, so a step large enough to keep
// the rounding (~eps |loss| / h) small where a loss is large and a gradient small.
struct FiniteDifferences {
  double step = 1e-6;
  double oracle = 1e-6;
  double op = 1e-4;
  bool richardson = false;
};

// P: the op's configuration, a struct with std::string Name() const.
template <class P>
struct OpSpec {
  std::string name;  // the op's name in test names: rms_norm, causal_conv1d
  // Declares the tensors of a configuration (Problem::Input, Output, ...) with their fills.
  void (*make)(const P&, Problem&);
  // The fp64 oracle: reads the inputs (and upstream gradients) in Values, writes the outputs
  // (and gradients) there.
  void (*oracle_forward)(const P&, Values&);
  void (*oracle_backward)(const P&, Values&) = nullptr;  // nullptr: no backward
  // The op on the bound tensors.
  Status (*forward)(const P&, Bound&);
  Status (*backward)(const P&, Bound&) = nullptr;
  std::vector<Case<P>> cases;
  P valid;  // a configuration every call of which succeeds, with every optional tensor
  std::vector<BadInput<P>> bad_inputs;
  bool cuda = true;  // the op has CUDA kernels: its cases run on the GPU too
  std::vector<const cuda::OpVariants*> cuda_variants = {};  // each combination is a backend
  FiniteDifferences fd = {};
};

// The usual bound of an op computing in f32: 1e-5 in f32 (the order of accumulation), 1e-2 in
// bf16 (the output's rounding to 8 bits of mantissa).
inline double DTypeTol(DType dtype) { return dtype == DType::kF32 ? 1e-5 : 1e-2; }

// ------------------------------------------------------------------ the runner's view

// A configuration with its type erased: what the runner needs of it.
struct Config {
  std::string name;
  std::function<void(Problem&)> make;
  std::function<void(Call, Values&)> oracle;
  std::function<Status(Call, Bound&)> run;
};

struct ErasedCase {
  std::string name;
  Checks checks;
  std::vector<Config> configs;
};

struct ErasedBadInput {
  std::string name;
  Call call;
  std::vector<std::string> pieces;
  StatusCode code;
  Config config;  // runs the mutation, then the call
};

struct ErasedOp {
  std::string name;
  bool has_backward = false;
  FiniteDifferences fd;
  std::vector<ErasedCase> cases;
  Config valid;
  std::vector<ErasedBadInput> bad_inputs;
  bool cuda = true;
  std::vector<const cuda::OpVariants*> cuda_variants;
};

template <class P>
Config Erase(const OpSpec<P>& spec, const P& p, std::function<void(P&, Bound&)> mutate = {}) {
  Config c;
  c.name = p.Name();
  c.make = [make = spec.make, p](Problem& prob) { make(p, prob); };
  c.oracle = [fwd = spec.oracle_forward, bwd = spec.oracle_backward, p](Call call, Values& v) {
    call == Call::kForward ? fwd(p, v) : bwd(p, v);
  };
  c.run = [fwd = spec.forward, bwd = spec.backward, p, mutate](Call call, Bound& b) {
    P q = p;
    if (mutate) mutate(q, b);
    return call == Call::kForward ? fwd(q, b) : bwd(q, b);
  };
  return c;
}

template <class P>
ErasedOp Erase(const OpSpec<P>& spec) {
  ErasedOp op;
  op.name = spec.name;
  op.has_backward = spec.backward != nullptr;
  op.fd = spec.fd;
  for (const Case<P>& c : spec.cases) {
    ErasedCase erased{c.name, c.checks, {}};
    for (const P& p : c.configs) erased.configs.push_back(Erase(spec, p));
    op.cases.push_back(std::move(erased));
  }
  op.valid = Erase(spec, spec.valid);
  for (const BadInput<P>& bad : spec.bad_inputs)
    op.bad_inputs.push_back(
        {bad.name, bad.call, bad.pieces, bad.code, Erase(spec, spec.valid, bad.mutate)});
  op.cuda = spec.cuda;
  op.cuda_variants = spec.cuda_variants;
  return op;
}

// The ops registered so far, each built when the runner asks (main, before the tests run).
bool AddOp(std::function<ErasedOp()> build);
const std::vector<std::function<ErasedOp()>>& RegisteredOps();

#define SSMKIT_HARNESS_CONCAT_(a, b) a##b
#define SSMKIT_HARNESS_CONCAT(a, b) SSMKIT_HARNESS_CONCAT_(a, b)
// In a case file, at namespace scope: SSMKIT_HARNESS_OP(RmsNormSpec), RmsNormSpec() returning
// the op's OpSpec.
#define SSMKIT_HARNESS_OP(spec_fn)                                                  \
  [[maybe_unused]] static const bool SSMKIT_HARNESS_CONCAT(kHarnessOp_, __LINE__) = \
      ::ssmkit::testing::harness::AddOp(                                            \
          [] { return ::ssmkit::testing::harness::Erase(spec_fn()); })

}  // namespace ssmkit::testing::harness
