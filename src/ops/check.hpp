// Argument checking shared by every op: one message format everywhere,
//   "<op>: <argument>: expected <what>, given <what>".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
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

// A tensor the op requires (or an optional one that is present): not null, on the CPU,
// of `shape`, one of `dtypes`, unit stride on the last dimension, no negative strides.
Status Tensor(const char* op, const char* name, const ssmkit::Tensor& t, ShapeSpec shape,
              std::initializer_list<DType> dtypes);

// The same for a tensor that may be absent (data == nullptr).
Status Optional(const char* op, const char* name, const ssmkit::Tensor& t, ShapeSpec shape,
                std::initializer_list<DType> dtypes);

// A gradient output for an input that is absent must itself be absent.
Status AbsentWith(const char* op, const char* grad_name, const ssmkit::Tensor& grad,
                  const char* input_name);

// Rank check on its own, for tensors whose rank selects a form (e.g. constant or variable B).
Status RankIn(const char* op, const char* name, const ssmkit::Tensor& t,
              std::initializer_list<int> ranks);

// "<op>: <name>: expected <expected>, given <given>" as an invalid-argument Status.
Status Mismatch(const char* op, const char* name, const std::string& expected,
                const std::string& given);

std::string ShapeWithLegend(ShapeSpec shape);  // "(B, D, L) = (2, 8, 60)"

}  // namespace ssmkit::check
