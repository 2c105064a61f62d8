#include "ops/tensor_span.hpp"

#include <string>

#include "ops/check.hpp"

namespace ssmkit::check {

Span SpanOf(const ssmkit::Tensor& t) {
  if (!t.defined() || t.numel() == 0) return {};
  int64_t extent = 0;  // in elements, past the first
  for (int d = 0; d < t.rank; ++d) extent += (t.shape[d] - 1) * t.strides[d];
  const uintptr_t first = reinterpret_cast<uintptr_t>(t.data);
  return {first, first + static_cast<uintptr_t>((extent + 1) * DTypeSize(t.dtype)) - 1};
}

bool NoSelfOverlap(const ssmkit::Tensor& t) {
  int dims[kMaxRank];  // the dimensions of size > 1, by increasing stride (insertion sort)
  int n = 0;
  for (int d = 0; d < t.rank && d < kMaxRank; ++d) {
    if (t.shape[d] <= 1) continue;
    int i = n++;
    for (; i > 0 && t.strides[dims[i - 1]] > t.strides[d]; --i) dims[i] = dims[i - 1];
    dims[i] = d;
  }
  int64_t span = 0;  // elements spanned by the dimensions below, minus one
  for (int i = 0; i < n; ++i) {
    const int d = dims[i];
    if (t.strides[d] <= span) return false;
    span += (t.shape[d] - 1) * t.strides[d];
  }
  return true;
}

Status Disjoint(const char* op, const char* name, const ssmkit::Tensor& t, const char* other_name,
                const ssmkit::Tensor& other) {
  if (!SpanOf(t).Overlaps(SpanOf(other))) return Status::Ok();
  return Mismatch(op, name, std::string("memory not overlapping ") + other_name,
                  "an overlapping tensor");
}

Status Writable(const char* op, const char* name, const ssmkit::Tensor& t) {
  if (!t.defined() || NoSelfOverlap(t)) return Status::Ok();
  std::string strides = "strides (";
  for (int d = 0; d < t.rank; ++d) strides += (d ? ", " : "") + std::to_string(t.strides[d]);
  return Mismatch(op, name, "strides that give every element its own address",
                  strides + ") for shape " + t.shape_string());
}

}  // namespace ssmkit::check
