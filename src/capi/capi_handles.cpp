// Checks shared by the C ABI's engine functions (capi_handles.hpp).
#include "capi/capi_handles.hpp"

#include <cstring>

namespace ssmkit::capi {
namespace {

std::string ShapeString(const int64_t* shape, int rank) {
  std::string s = "(";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (rank == 1 ? ",)" : ")");
}

}  // namespace

Status NotNull(const char* fn, const char* name, const void* p, const char* what) {
  if (p != nullptr) return Status::Ok();
  return Status::InvalidArgument(std::string(fn) + ": " + name + ": expected " + what +
                                 ", given NULL");
}

Status DenseF32(const char* fn, const char* name, const ssmkit_tensor& t,
                std::span<const int64_t> shape, const char* dims, float** data) {
  // The message is built only on failure: decode calls this on every step, allocation-free.
  auto fail = [&](const std::string& given) {
    return Status::InvalidArgument(
        std::string(fn) + ": " + name + ": expected a dense f32 CPU tensor " + dims + " = " +
        ShapeString(shape.data(), static_cast<int>(shape.size())) + ", given " + given);
  };
  if (t.data == nullptr) return fail("no data (NULL)");
  if (t.dtype != SSMKIT_F32) return fail("dtype " + std::to_string(t.dtype));
  if (t.device != SSMKIT_CPU) return fail("device " + std::to_string(t.device));
  if (t.rank < 0 || t.rank > SSMKIT_MAX_RANK) return fail("rank " + std::to_string(t.rank));
  bool same_shape = t.rank == static_cast<int32_t>(shape.size());
  for (int i = 0; same_shape && i < t.rank; ++i) same_shape = t.shape[i] == shape[i];
  if (!same_shape) return fail(ShapeString(t.shape, t.rank));
  int64_t stride = 1;
  for (int i = t.rank - 1; i >= 0; --i) {
    if (t.shape[i] > 1 && t.strides[i] != stride) {
      return fail("strides " + ShapeString(t.strides, t.rank) + " (not dense row-major)");
    }
    stride *= t.shape[i];
  }
  *data = static_cast<float*>(t.data);
  return Status::Ok();
}

Status CopyString(const char* fn, const char* name, const std::string& s, char* buf,
                  size_t capacity, size_t* length) {
  if (buf == nullptr && length == nullptr) {
    return Status::InvalidArgument(std::string(fn) + ": " + name +
                                   ": expected a buffer or a length to write, given NULL for both");
  }
  if (buf != nullptr && capacity < s.size() + 1) {
    return Status::InvalidArgument(
        std::string(fn) + ": " + name + ": expected capacity >= " + std::to_string(s.size() + 1) +
        " bytes (the text and a NUL), given " + std::to_string(capacity));
  }
  if (buf != nullptr) {
    std::memcpy(buf, s.data(), s.size());
    buf[s.size()] = '\0';
  }
  if (length != nullptr) *length = s.size();
  return Status::Ok();
}

}  // namespace ssmkit::capi
