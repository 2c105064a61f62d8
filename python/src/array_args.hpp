// The array binding's arguments: a dict of arrays (or None) and options, turned into ssmkit
// Tensor views without copying, and ssmkit Status turned into Python exceptions. An array is
// anything nanobind imports: a numpy array (buffer protocol) or a DLPack producer such as a
// torch tensor, on the CPU or (with the CUDA backend) a CUDA device. ssmkit.torch calls the
// same functions as the numpy API, with torch tensors and, for CUDA tensors, the keys
// "cuda_stream" (a cudaStream_t as an int) and "cuda_device" (its device index).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <memory>
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
  // `op` names the function in messages about the Python-side arguments. With "cuda_stream"
  // in `args`, that stream is the calling thread's ssmkit stream (and "cuda_device" the
  // current device) until the ArrayArgs is destroyed.
  ArrayArgs(const char* op, nb::dict args);
  ~ArrayArgs();

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
  std::vector<nb::ndarray<nb::ro>> keep_;
  std::vector<nb::ndarray<>> keep_writable_;
  // The CUDA stream and device of the call (a ScopedCudaCall; null without one).
  std::shared_ptr<void> cuda_call_;
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
