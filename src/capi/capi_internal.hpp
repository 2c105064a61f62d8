// Shared plumbing of the C ABI (include/ssmkit/ssmkit.h): descriptor conversion, the
// thread-local last error, and the guard that keeps every C++ exception on this side.
#pragma once

#include <cstring>
#include <exception>
#include <initializer_list>
#include <new>
#include <string>

#include "ssmkit/ssmkit.h"
#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::capi {

// Records the message of `status` (or clears it) for ssmkit_last_error, and returns its code.
ssmkit_status Finish(const Status& status);

// *out = the C++ view of `t`; absent (undefined) when t is NULL or t->data is NULL. Fails on
// an out-of-range dtype, device or rank, naming `fn` and `name`.
Status ToTensor(const char* fn, const char* name, const ssmkit_tensor* t, Tensor* out);

// An args or grads struct: non-NULL, and a struct_size this library knows.
Status CheckStruct(const char* fn, const char* name, const void* s, size_t struct_size,
                   size_t known_size);

template <class Struct>
Status CheckStructPtr(const char* fn, const char* name, const Struct* s) {
  return CheckStruct(fn, name, s, s ? s->struct_size : 0, sizeof(Struct));
}

// An args struct of any version this library reads: `older` lists the struct_size of each
// earlier version (each version appends fields). *out receives the caller's fields and zeros
// (absent tensors, flags off) for those its version lacks.
template <class Struct>
Status ReadVersionedStruct(const char* fn, const char* name, const Struct* s,
                           std::initializer_list<size_t> older, Struct* out) {
  if (s != nullptr) {
    for (size_t size : older) {
      if (s->struct_size != size) continue;
      *out = Struct{};
      std::memcpy(static_cast<void*>(out), static_cast<const void*>(s), size);
      out->struct_size = sizeof(Struct);
      return Status::Ok();
    }
  }
  SSMKIT_RETURN_IF_ERROR(CheckStructPtr(fn, name, s));
  *out = *s;
  return Status::Ok();
}

// Runs fn() -> Status with every exception turned into a status: nothing unwinds into C.
template <class Fn>
ssmkit_status Guarded(const char* fn_name, Fn&& fn) noexcept {
  try {
    return Finish(fn());
  } catch (const std::bad_alloc&) {
    return Finish(Status::OutOfMemory(std::string(fn_name) + ": out of memory"));
  } catch (const std::exception& e) {
    return Finish(Status::Internal(std::string(fn_name) + ": " + e.what()));
  } catch (...) {
    return Finish(Status::Internal(std::string(fn_name) + ": unknown exception"));
  }
}

}  // namespace ssmkit::capi
