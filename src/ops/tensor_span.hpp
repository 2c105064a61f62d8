// The memory a tensor view covers, for the checks that an output neither overlaps an input
// nor overlaps itself (two elements at one address: threads writing different elements would
// race on it). Used by the attention and rope ops.
#pragma once

#include <cstdint>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::check {

// Bytes [first, last] a defined view touches (last inclusive); first > last for no elements.
struct Span {
  uintptr_t first = 1, last = 0;
  bool Overlaps(const Span& other) const {
    return first <= last && other.first <= other.last && first <= other.last && other.first <= last;
  }
};
Span SpanOf(const ssmkit::Tensor& t);

// True when no two elements of `t` share an address: with the dimensions sorted by stride,
// each stride exceeds the span of the dimensions below it.
bool NoSelfOverlap(const ssmkit::Tensor& t);

// "<op>: <name>: expected memory not overlapping <other>" when both are defined and overlap.
Status Disjoint(const char* op, const char* name, const ssmkit::Tensor& t, const char* other_name,
                const ssmkit::Tensor& other);

// "<op>: <name>: expected strides that give every element its own address" unless NoSelfOverlap.
Status Writable(const char* op, const char* name, const ssmkit::Tensor& t);

}  // namespace ssmkit::check
