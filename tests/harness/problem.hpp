// The tensors of one harness configuration: what an op case declares (inputs with their random
// fills, outputs, tolerances), what the harness adds (the gradient reaching each output, the
// gradient of each differentiable input), and the two views of them the checks use: the values
// as doubles for the fp64 oracle (Values) and the tensors bound to one backend for a call
// (Bound).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"
#include "test_util.hpp"

namespace ssmkit::testing::harness {

// kInOut: read and updated in place (a decode state, an output aliasing its input). kUpstream:
// an input of the backward, the gradient reaching an output (dout for out). kGrad: an output of
// the backward, the gradient of an input (dx for x).
enum class Role { kInput, kInOut, kOutput, kUpstream, kGrad };

// A tolerance on the relative L2 error against the oracle; `cuda` applies on the GPU, where
// reductions run in another order (never tighter than `cpu`).
struct Tolerance {
  double cpu = 1e-5;
  double cuda = 1e-5;
  double For(bool on_cuda) const { return on_cuda && cuda > cpu ? cuda : cpu; }
};

// One tensor: host storage whose rows carry `pad` elements past the last dimension (strided
// rows the op must neither read as data nor write), with `outer_pad` also past every dimension
// between the first and the last (outer strides bigger than the packed ones: a (B, D, L)
// tensor's batch stride (D + pad) (L + pad), not D (L + pad)), and the logical values as
// doubles.
class Arg {
 public:
  Arg(std::string name, Role role, std::vector<int64_t> shape, DType dtype, int64_t pad,
      bool outer_pad, Tolerance tol, Rng* rng);

  // Declaration, chained after Problem::Input and friends. The fills draw from the problem's
  // seeded generator; the padding gets random values too, so reading it as data shows.
  Arg& Normal(double stddev = 1.0);
  Arg& Uniform(double lo, double hi);
  Arg& Given(std::vector<double> values);       // exactly these (indices, frequencies)
  Arg& Pin(int64_t index, double value);        // after a fill: one element set (an edge case)
  Arg& Tol(double cpu, double cuda = 0.0);      // this output's tolerance
  Arg& GradTol(double cpu, double cuda = 0.0);  // the tolerance of this input's gradient
  // This input's gradient a sum of many terms of both signs (a per-head dA over B L steps):
  // their f32 rounding does not cancel the way the terms do, so where they cancel the sum's
  // relative error grows. Its tolerance is then at least `factor` times its measured rounding
  // noise (checks.cpp, RoundingNoise).
  Arg& GradNoise(double factor);
  Arg& GradDType(DType dtype);  // the gradient's dtype, when not the input's (f32 of bf16 weights)
  Arg& NoGrad();                // an input without a gradient (indices)
  Arg& NoUpstream();            // an output no gradient reaches (its upstream is left absent)
  // An output the backward reads (attention's out and lse): bound on the backward call too,
  // holding what the forward wrote, and left as it was.
  Arg& Saved();
  // An output that may hold infinities where the oracle has them (the lse of a row that sees
  // no key): those must be the same infinities, the finite rest is compared.
  Arg& AllowInf();

  const std::string& name() const { return name_; }
  Role role() const { return role_; }
  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t pad() const { return pad_; }
  bool outer_pad() const { return outer_pad_; }
  int64_t numel() const;
  Tolerance tol() const { return tol_; }
  Tolerance grad_tol() const { return grad_tol_; }
  DType grad_dtype() const { return grad_dtype_; }
  double noise() const { return noise_; }  // a gradient's (or an input's gradient's) GradNoise
  bool differentiable() const { return differentiable_; }
  bool has_upstream() const { return has_upstream_; }
  bool saved() const { return saved_; }
  bool allow_inf() const { return allow_inf_; }

  Tensor view();                       // the host tensor, strides over the padding
  std::vector<double> Stored() const;  // the logical elements as stored, as doubles
  void Poison();                       // NaN everywhere (padding too), then Snapshot()
  void Snapshot();                     // remembers the bytes, for the two checks below
  void Restore();                      // back to the bytes of the last Snapshot()
  bool Unchanged() const;              // every byte as at the last Snapshot()
  bool PaddingUnchanged() const;       // the padding's bytes as at the last Snapshot()

 private:
  void Store(std::vector<double> logical);

  std::string name_;
  Role role_;
  std::vector<int64_t> shape_;
  DType dtype_;
  int64_t pad_;
  bool outer_pad_;
  Tolerance tol_, grad_tol_;
  DType grad_dtype_;
  double noise_ = 0.0;
  bool differentiable_ = true, has_upstream_ = true, saved_ = false, allow_inf_ = false;
  Rng* rng_;
  HostTensor storage_;
  std::vector<int64_t> offsets_;  // (numel): each logical element's index in storage_; empty
                                  // when packed (pad 0)
  std::vector<uint8_t> snapshot_;
};

// The values the fp64 oracle reads and writes, by argument name; an absent argument is nullptr
// (the oracles' convention for an optional one).
class Values {
 public:
  double* operator[](const std::string& name);
  std::vector<double>& at(const std::string& name) { return values_.at(name); }
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  void Set(const std::string& name, std::vector<double> v) { values_[name] = std::move(v); }

 private:
  std::map<std::string, std::vector<double>> values_;
};

// Tensors placed on one backend for one call, by argument name; an unbound name reads as an
// absent tensor. A bad-input mutation edits them before the call.
class Bound {
 public:
  Tensor& operator[](const std::string& name) { return tensors_[name]; }
  // A fresh host tensor of its own, for a mutation that needs another shape's memory.
  Tensor Spare(std::vector<int64_t> shape, DType dtype);

 private:
  std::map<std::string, Tensor> tensors_;
  std::deque<HostTensor> spares_;
};

// Where a call's tensors live: the CPU uses the host tensors themselves, the GPU copies them.
class Placement {
 public:
  virtual ~Placement() = default;
  virtual Tensor In(const Tensor& host) = 0;
  virtual Tensor Out(const Tensor& host) = 0;  // read, written, copied back by Finish()
  virtual Status Sync() = 0;                   // waits for the calls made so far
  virtual Status Finish() = 0;                 // Sync(), then the outputs back to the host
};

enum class Call { kForward, kBackward };

class Problem {
 public:
  explicit Problem(uint64_t seed) : rng_(seed) {}
  Problem(const Problem&) = delete;
  Problem& operator=(const Problem&) = delete;

  // The tolerance of the outputs and gradients declared after it (default 1e-5).
  void DefaultTol(double cpu, double cuda = 0.0);
  // The tensors declared after it padded past every dimension but the first, not only the
  // last (Arg's outer_pad); their gradients too.
  void PadOuterDims(bool on) { outer_pad_ = on; }
  Arg& Input(const std::string& name, std::vector<int64_t> shape, DType dtype, int64_t pad = 0);
  Arg& InOut(const std::string& name, std::vector<int64_t> shape, DType dtype, int64_t pad = 0);
  Arg& Output(const std::string& name, std::vector<int64_t> shape, DType dtype, int64_t pad = 0);

  // The harness's part, after the op declared its own: "d" + name for the gradient reaching
  // each output with an upstream (random) and for the gradient of each differentiable input
  // (poisoned), each with that tensor's shape, dtype and padding.
  void AddGradients();

  // The seeded generator the fills draw from, for a case drawing its own distribution (a
  // log-uniform step size, say) to hand to Arg::Given.
  Rng& rng() { return rng_; }
  std::deque<Arg>& args() { return args_; }
  // Every argument's stored values (outputs and gradients zero-filled), for the oracle.
  Values OracleValues() const;
  // The arguments a call takes, placed; `only_grad` binds that one gradient alone.
  Bound Bind(Call call, Placement& place, const std::string& only_grad = "");

 private:
  Arg& Add(const std::string& name, Role role, std::vector<int64_t> shape, DType dtype, int64_t pad,
           bool outer_pad);

  Rng rng_;
  Tolerance default_tol_;
  bool outer_pad_ = false;
  std::deque<Arg> args_;  // a deque: the Arg& handed out stay valid
};

}  // namespace ssmkit::testing::harness
