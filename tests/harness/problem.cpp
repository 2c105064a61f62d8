#include "harness/problem.hpp"

#include <algorithm>
#include <utility>

namespace ssmkit::testing::harness {

Arg::Arg(std::string name, Role role, std::vector<int64_t> shape, DType dtype, int64_t pad,
         bool outer_pad, Tolerance tol, Rng* rng)
    : name_(std::move(name)),
      role_(role),
      shape_(std::move(shape)),
      dtype_(dtype),
      pad_(pad),
      outer_pad_(outer_pad),
      tol_(tol),
      grad_tol_(tol),
      grad_dtype_(dtype),
      rng_(rng) {
  const int rank = static_cast<int>(shape_.size());
  std::vector<int64_t> stored = shape_;
  for (int d = outer_pad_ ? 1 : rank - 1; d < rank - 1; ++d) stored[d] += pad_;
  stored.back() += pad_;
  storage_ = HostTensor(stored, dtype_);
  if (pad_ == 0) return;  // packed: each index is its own place (offsets_ stays empty)
  // Row-major over the logical shape, each index's place in the stored one.
  std::vector<int64_t> idx(rank, 0);
  offsets_.resize(static_cast<size_t>(numel()));
  for (int64_t& offset : offsets_) {
    offset = 0;
    for (int d = 0; d < rank; ++d) offset = offset * stored[d] + idx[d];
    for (int d = rank - 1; d >= 0 && ++idx[d] == shape_[d]; --d) idx[d] = 0;
  }
}

int64_t Arg::numel() const {
  int64_t n = 1;
  for (int64_t s : shape_) n *= s;
  return n;
}

Arg& Arg::Normal(double stddev) {
  Store(rng_->NormalVec(numel(), stddev));
  return *this;
}

Arg& Arg::Uniform(double lo, double hi) {
  Store(rng_->UniformVec(numel(), lo, hi));
  return *this;
}

Arg& Arg::Given(std::vector<double> values) {
  Store(std::move(values));
  return *this;
}

Arg& Arg::Pin(int64_t index, double value) {
  std::vector<double> logical = Stored();
  logical.at(static_cast<size_t>(index)) = value;
  Store(std::move(logical));
  return *this;
}

Arg& Arg::Tol(double cpu, double cuda) {
  tol_ = {cpu, cuda};
  return *this;
}

Arg& Arg::GradTol(double cpu, double cuda) {
  grad_tol_ = {cpu, cuda};
  return *this;
}

Arg& Arg::GradNoise(double factor) {
  noise_ = factor;
  return *this;
}

Arg& Arg::GradDType(DType dtype) {
  grad_dtype_ = dtype;
  return *this;
}

Arg& Arg::NoGrad() {
  differentiable_ = false;
  return *this;
}

Arg& Arg::NoUpstream() {
  has_upstream_ = false;
  return *this;
}

Arg& Arg::Saved() {
  saved_ = true;
  return *this;
}

Arg& Arg::AllowInf() {
  allow_inf_ = true;
  return *this;
}

void Arg::Store(std::vector<double> logical) {
  if (pad_ == 0) {
    storage_.Fill(logical);
  } else {
    std::vector<double> all = rng_->NormalVec(storage_.numel());
    for (size_t i = 0; i < offsets_.size(); ++i) all[offsets_[i]] = logical[i];
    storage_.Fill(all);
  }
  Snapshot();
}

Tensor Arg::view() {
  Tensor t = storage_.view();
  for (int d = 0; d < t.rank; ++d) t.shape[d] = shape_[d];
  return t;
}

std::vector<double> Arg::Stored() const {
  if (pad_ == 0) return storage_.ToDouble();
  const std::vector<double> all = storage_.ToDouble();
  std::vector<double> v(offsets_.size());
  for (size_t i = 0; i < offsets_.size(); ++i) v[i] = all[offsets_[i]];
  return v;
}

void Arg::Poison() {
  storage_.Poison();
  Snapshot();
}

void Arg::Snapshot() { snapshot_ = storage_.bytes(); }

void Arg::Restore() {
  std::copy(snapshot_.begin(), snapshot_.end(), static_cast<uint8_t*>(storage_.data()));
}

bool Arg::Unchanged() const { return storage_.bytes() == snapshot_; }

bool Arg::PaddingUnchanged() const {
  if (snapshot_.size() != storage_.bytes().size()) return false;
  if (pad_ == 0) return true;
  std::vector<bool> data(static_cast<size_t>(storage_.numel()), false);
  for (int64_t offset : offsets_) data[offset] = true;
  const size_t size = DTypeSize(dtype_);
  for (size_t b = 0; b < snapshot_.size(); ++b) {
    if (!data[b / size] && storage_.bytes()[b] != snapshot_[b]) return false;
  }
  return true;
}

double* Values::operator[](const std::string& name) {
  auto it = values_.find(name);
  return it == values_.end() ? nullptr : it->second.data();
}

Tensor Bound::Spare(std::vector<int64_t> shape, DType dtype) {
  spares_.emplace_back(std::move(shape), dtype);
  return spares_.back().view();
}

void Problem::DefaultTol(double cpu, double cuda) { default_tol_ = {cpu, cuda}; }

Arg& Problem::Add(const std::string& name, Role role, std::vector<int64_t> shape, DType dtype,
                  int64_t pad, bool outer_pad) {
  return args_.emplace_back(name, role, std::move(shape), dtype, pad, outer_pad, default_tol_,
                            &rng_);
}

Arg& Problem::Input(const std::string& name, std::vector<int64_t> shape, DType dtype, int64_t pad) {
  return Add(name, Role::kInput, std::move(shape), dtype, pad, outer_pad_);
}

Arg& Problem::InOut(const std::string& name, std::vector<int64_t> shape, DType dtype, int64_t pad) {
  return Add(name, Role::kInOut, std::move(shape), dtype, pad, outer_pad_);
}

Arg& Problem::Output(const std::string& name, std::vector<int64_t> shape, DType dtype,
                     int64_t pad) {
  Arg& arg = Add(name, Role::kOutput, std::move(shape), dtype, pad, outer_pad_);
  arg.Poison();
  return arg;
}

void Problem::AddGradients() {
  // Indices, not a range-for: appending to the deque while walking it.
  const size_t declared = args_.size();
  for (size_t i = 0; i < declared; ++i) {
    const Arg& a = args_[i];  // deque: appending leaves references valid
    if (a.role() == Role::kOutput && a.has_upstream()) {
      Add("d" + a.name(), Role::kUpstream, a.shape(), a.dtype(), a.pad(), a.outer_pad()).Normal();
    } else if (a.role() == Role::kInput && a.differentiable()) {
      Add("d" + a.name(), Role::kGrad, a.shape(), a.grad_dtype(), a.pad(), a.outer_pad())
          .Tol(a.grad_tol().cpu, a.grad_tol().cuda)
          .GradNoise(a.noise())
          .Poison();
    }
  }
}

Values Problem::OracleValues() const {
  Values v;
  for (const Arg& a : args_) {
    const bool given =
        a.role() == Role::kInput || a.role() == Role::kInOut || a.role() == Role::kUpstream;
    v.Set(a.name(), given ? a.Stored() : std::vector<double>(static_cast<size_t>(a.numel())));
  }
  return v;
}

Bound Problem::Bind(Call call, Placement& place, const std::string& only_grad) {
  Bound b;
  for (Arg& a : args_) {
    switch (a.role()) {
      case Role::kInput:
        b[a.name()] = place.In(a.view());
        break;
      case Role::kInOut:
        b[a.name()] = place.Out(a.view());
        break;
      case Role::kOutput:
        if (call == Call::kForward) {
          b[a.name()] = place.Out(a.view());
        } else if (a.saved()) {
          b[a.name()] = place.In(a.view());
        }
        break;
      case Role::kUpstream:
        if (call == Call::kBackward) b[a.name()] = place.In(a.view());
        break;
      case Role::kGrad:
        if (call == Call::kBackward && (only_grad.empty() || only_grad == a.name()))
          b[a.name()] = place.Out(a.view());
        break;
    }
  }
  return b;
}

}  // namespace ssmkit::testing::harness
