// Argument checking shared by every op: one message format everywhere,
//   "<op>: <argument>: expected <what>, given <what>".
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <new>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::check {

// Up to kMaxRank sizes, stored inline: checks run on every decode step, which must not touch
// the heap (a std::vector here allocated on each call of every op).
class Dims {
 public:
  Dims(std::initializer_list<int64_t> dims) : Dims(dims.begin(), dims.end()) {}
  template <class It>
  Dims(It first, It last) {
    for (; first != last && size_ < static_cast<size_t>(kMaxRank); ++first) dims_[size_++] = *first;
  }
  const int64_t* begin() const { return dims_; }
  const int64_t* end() const { return dims_ + size_; }
  size_t size() const { return size_; }

 private:
  int64_t dims_[kMaxRank] = {};
  size_t size_ = 0;
};

struct ShapeSpec {
  const char* legend;  // the dimension names, e.g. "(B, D, L)"
  Dims dims;           // the sizes those names have in this call
};

// The device an op runs on: the one most of its defined tensors live on (a tie goes to the
// CPU), so that a mix is reported on the odd tensor out, as
// "<op>: <name>: expected a CPU tensor, given a CUDA tensor". Absent tensors are skipped.
struct NamedTensor {
  const char* name;
  const ssmkit::Tensor& tensor;
};
// `inputs` and `outputs` are one list, split for the callers' convenience.
Status Devices(const char* op, std::initializer_list<NamedTensor> inputs,
               std::initializer_list<NamedTensor> outputs, Device* device);
// The same over groups of tensors, such as those Named below returns.
Status Devices(const char* op, std::initializer_list<std::span<const NamedTensor>> groups,
               Device* device);

// The tensors of `s` that `list` names (an op's inputs or grads in ssmkit/op_tensors.hpp), in
// its order, for Devices. On the stack: the decode steps check on every call.
template <class S, class Entry, size_t N, size_t... I>
std::array<NamedTensor, N> NamedAt(const S& s, const Entry (&list)[N], std::index_sequence<I...>) {
  return {NamedTensor{list[I].name, s.*list[I].member}...};
}
template <class S, class Entry, size_t N>
std::array<NamedTensor, N> Named(const S& s, const Entry (&list)[N]) {
  return NamedAt(s, list, std::make_index_sequence<N>{});
}

// Devices over an op's inputs as its ssmkit/op_tensors.hpp list names them, then `outputs` (the
// call's outputs or output gradients), then, for a backward, its gradients.
template <class OpTensors>
Status OpDevices(const char* op, const typename OpTensors::Inputs& inputs,
                 std::initializer_list<NamedTensor> outputs, Device* device) {
  return Devices(op, {Named(inputs, OpTensors::inputs), std::span(outputs.begin(), outputs.size())},
                 device);
}
template <class OpTensors>
Status OpDevices(const char* op, const typename OpTensors::Inputs& inputs,
                 std::initializer_list<NamedTensor> outputs, const typename OpTensors::Grads& grads,
                 Device* device) {
  return Devices(op,
                 {Named(inputs, OpTensors::inputs), std::span(outputs.begin(), outputs.size()),
                  Named(grads, OpTensors::grads)},
                 device);
}

// A tensor the op requires (or an optional one that is present): not null,
// of `shape`, one of `dtypes`, unit stride on the last dimension, no negative strides.
Status Tensor(const char* op, const char* name, const ssmkit::Tensor& t, ShapeSpec shape,
              std::initializer_list<DType> dtypes);

// The same for a tensor that may be absent (data == nullptr).
Status Optional(const char* op, const char* name, const ssmkit::Tensor& t, ShapeSpec shape,
                std::initializer_list<DType> dtypes);

// A gradient output for an input that is absent must itself be absent.
Status AbsentWith(const char* op, const char* grad_name, const ssmkit::Tensor& grad,
                  const char* input_name);

// A gradient output: absent when its input is absent; otherwise absent (not wanted) or of
// the input's shape and dtype.
Status GradLike(const char* op, const char* grad_name, const ssmkit::Tensor& grad,
                const char* input_name, const ssmkit::Tensor& input);

// GradLike for every gradient in `list` (an op's grads in ssmkit/op_tensors.hpp), in its order.
template <class Inputs, class Grads, class Entry, size_t N>
Status GradsLike(const char* op, const Grads& grads, const Entry (&list)[N], const Inputs& inputs) {
  for (const Entry& g : list) {
    SSMKIT_RETURN_IF_ERROR(GradLike(op, g.name, grads.*g.member, g.input_name, inputs.*g.input));
  }
  return Status::Ok();
}

// Runs a kernel, turning a failed workspace allocation into an out-of-memory Status: nothing
// throws out of the library.
template <class Fn>
Status RunGuarded(const char* op, Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory(std::string(op) + ": could not allocate the workspace");
  }
}

// Rank check on its own, for tensors whose rank selects a form (e.g. constant or variable B).
Status RankIn(const char* op, const char* name, const ssmkit::Tensor& t,
              std::initializer_list<int> ranks);

// "<op>: <name>: expected <expected>, given <given>" as an invalid-argument Status.
Status Mismatch(const char* op, const char* name, const std::string& expected,
                const std::string& given);

std::string ShapeWithLegend(ShapeSpec shape);  // "(B, D, L) = (2, 8, 60)"

}  // namespace ssmkit::check
