// llama.cpp's quantized weight formats on numpy arrays: quantize an f32 matrix into a format's
// bytes (QuantizeWeight) and decode them (DequantizeWeight). The bytes are a uint8 matrix
// (M, DTypeRowBytes): the row layout of a GGUF tensor, which gguf-py's quants module reads and
// writes too. Dimension legend: M rows, K elements per row.
#include "quant_bindings.hpp"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <string>

#include "array_args.hpp"
#include "ssmkit/quant.hpp"

namespace ssmkit::python {
namespace {

namespace nb = nanobind;

using F32Matrix = nb::ndarray<const float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;  // (M, K)
using U8Matrix = nb::ndarray<const uint8_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
template <class T>
using NewMatrix = nb::ndarray<nb::numpy, T, nb::ndim<2>>;

// The quantized dtype named `type` ("q8_0", "q4_0", "q5_0", "q4_k", ...).
DType QuantizedType(const char* op, const std::string& type) {
  DType dtype;
  if (!DTypeFromName(type, &dtype) || !DTypeIsQuantized(dtype)) {
    ThrowIfError(
        Status::InvalidArgument(std::string(op) +
                                ": type: expected one of q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, "
                                "q6_k, "
                                "given '" +
                                type + "'"));
  }
  return dtype;
}

// An uninitialized (rows, cols) numpy array that owns its memory.
template <class T>
NewMatrix<T> Allocate(size_t rows, size_t cols) {
  T* data = new T[rows * cols];
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  return NewMatrix<T>(data, {rows, cols}, owner);
}

NewMatrix<uint8_t> Quantize(F32Matrix x, const std::string& type) {
  const DType dtype = QuantizedType("quantize", type);
  const auto M = static_cast<int64_t>(x.shape(0)), K = static_cast<int64_t>(x.shape(1));
  // Checked before sizing the output, whose row bytes need a whole number of blocks.
  if (K % DTypeBlockElements(dtype) != 0) {
    ThrowIfError(Status::InvalidArgument(
        "quantize: x: expected K a multiple of " + type + "'s block of " +
        std::to_string(DTypeBlockElements(dtype)) + " elements, given K = " + std::to_string(K)));
  }
  NewMatrix<uint8_t> q =
      Allocate<uint8_t>(static_cast<size_t>(M), static_cast<size_t>(DTypeRowBytes(dtype, K)));
  const Tensor xv = Tensor::Contiguous(x.data(), DType::kF32, {M, K});
  const Tensor qv = Tensor::Contiguous(q.data(), dtype, {M, K});
  RunReleased([&] { return QuantizeWeight(xv, qv); });
  return q;
}

NewMatrix<float> Dequantize(U8Matrix q, const std::string& type, int64_t K) {
  const DType dtype = QuantizedType("dequantize", type);
  const auto M = static_cast<int64_t>(q.shape(0)), row_bytes = static_cast<int64_t>(q.shape(1));
  const int64_t block = DTypeBlockElements(dtype);
  if (K < 1 || K % block != 0) {
    ThrowIfError(Status::InvalidArgument("dequantize: K: expected a multiple of " + type +
                                         "'s block of " + std::to_string(block) +
                                         " elements, given " + std::to_string(K)));
  }
  if (DTypeRowBytes(dtype, K) != row_bytes) {
    ThrowIfError(Status::InvalidArgument(
        "dequantize: q: expected (M, " + std::to_string(DTypeRowBytes(dtype, K)) + ") bytes (" +
        type + " rows of K = " + std::to_string(K) + "), given (" + std::to_string(M) + ", " +
        std::to_string(row_bytes) + ")"));
  }
  NewMatrix<float> x = Allocate<float>(static_cast<size_t>(M), static_cast<size_t>(K));
  const Tensor qv = Tensor::Contiguous(q.data(), dtype, {M, K});
  const Tensor xv = Tensor::Contiguous(x.data(), DType::kF32, {M, K});
  RunReleased([&] { return DequantizeWeight(qv, xv); });
  return x;
}

}  // namespace

void RegisterQuant(nb::module_& m) {
  m.def(
      "quantize", &Quantize, nb::arg("x"), nb::arg("type"),
      "x: float32 (M, K) -> uint8 (M, row bytes): x in llama.cpp's block format `type` "
      "(q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k), as GGML's reference quantizers write it");
  m.def("dequantize", &Dequantize, nb::arg("q"), nb::arg("type"), nb::arg("K"),
        "q: uint8 (M, row bytes) of `type` -> float32 (M, K): the decoded rows");
}

}  // namespace ssmkit::python
