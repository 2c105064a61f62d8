// Shared plumbing of the C ABI (include/ssmkit/ssmkit.h): descriptor conversion, the
// thread-local last error, and the guard that keeps every C++ exception on this side.
#pragma once

#include <exception>
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
