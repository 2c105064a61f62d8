// The numpy binding's arguments: a dict of numpy arrays (or None) and options, turned into
// ssmkit Tensor views without copying, and ssmkit Status turned into Python exceptions.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <span>
#include <string>
#include <vector>

#include "ssmkit/status.hpp"
#include "ssmkit/tensor.hpp"

namespace ssmkit::python {

namespace nb = nanobind;

// Raises the Python exception of `status` (ValueError, NotImplementedError, MemoryError or
// RuntimeError subclasses defined in ssmkit._ssmkit) with its message; nothing when ok.
void ThrowIfError(const Status& status);

// Registers the exception classes on the module.
void RegisterErrors(nb::module_& m);

class ArrayArgs {
 public:
  // `op` names the function in messages about the Python-side arguments.
  ArrayArgs(const char* op, nb::dict args) : op_(op), args_(std::move(args)) {}

  // An input: a view of the array under `key`; absent when the key is missing or None.
  Tensor Input(const char* key);
  // An output, written in place: the array must be writable.
  Tensor Output(const char* key);
  // Views of every key in `keys`, in order.
  template <size_t N>
  std::vector<Tensor> Inputs(const std::array<const char*, N>& keys) {
    return Views(keys.data(), N, false);
  }
  template <size_t N>
  std::vector<Tensor> Outputs(const std::array<const char*, N>& keys) {
    return Views(keys.data(), N, true);
  }

  bool Flag(const char* key) const;
  int64_t Integer(const char* key) const;
  float Real(const char* key) const;
  std::string String(const char* key) const;

 private:
  std::vector<Tensor> Views(const char* const* keys, size_t n, bool writable);
  nb::handle Get(const char* key) const;

  const char* op_;
  nb::dict args_;
  // The ndarrays behind the views, kept alive until the call returns.
  std::vector<nb::ndarray<nb::ro, nb::device::cpu>> keep_;
  std::vector<nb::ndarray<nb::device::cpu>> keep_writable_;
};

// Runs an op with the GIL released, then raises its error, if any.
template <class Fn>
void RunReleased(Fn&& fn) {
  Status status;
  {
    nb::gil_scoped_release release;
    status = fn();
  }
  ThrowIfError(status);
}

}  // namespace ssmkit::python
