// QuantizeWeight, DequantizeWeight (include/ssmkit/quant.hpp): argument checking, then the
// formats of core/quant.hpp row by row over the library's threads. Every rule has a test in
// tests/quant_test.cpp. Dimension legend: M rows, K elements per row.
#include "ssmkit/quant.hpp"

#include <string>

#include "core/parallel.hpp"
#include "core/quant.hpp"
#include "ops/check.hpp"

namespace ssmkit {
namespace {

// Below this many elements a call stays on the calling thread. Tuned for speed only.
constexpr int64_t kMinParallelElements = 1 << 16;

Status CheckContiguous(const char* op, const char* name, const Tensor& t) {
  if (t.is_contiguous()) return Status::Ok();
  return check::Mismatch(
      op, name, "a contiguous row-major (M, K) tensor",
      "strides (" + std::to_string(t.strides[0]) + ", " + std::to_string(t.strides[1]) + ")");
}

// The f32 matrix `f` and the quantized one `q` of an op: both (M, K) contiguous on the CPU, q's
// K a multiple of its block.
Status CheckPair(const char* op, const char* f_name, const Tensor& f, const char* q_name,
                 const Tensor& q) {
  Device device;
  SSMKIT_RETURN_IF_ERROR(check::Devices(op, {{f_name, f}, {q_name, q}}, {}, &device));
  if (device != Device::kCpu) {
    return Status::Unsupported(std::string(op) + ": CUDA tensors: this op runs on the CPU only");
  }
  if (!q.defined()) return check::Mismatch(op, q_name, "a tensor (M, K)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(op, q_name, q, {2}));
  const int64_t M = q.shape[0], K = q.shape[1];
  SSMKIT_RETURN_IF_ERROR(check::Tensor(op, q_name, q, {"(M, K)", {M, K}},
                                       {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                                        DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}));
  const int64_t block = DTypeBlockElements(q.dtype);
  if (K % block != 0) {
    return check::Mismatch(op, q_name,
                           std::string("K a multiple of ") + DTypeName(q.dtype) + "'s block of " +
                               std::to_string(block) + " elements",
                           "K = " + std::to_string(K));
  }
  if (!f.defined()) return check::Mismatch(op, f_name, "a tensor (M, K)", "null");
  SSMKIT_RETURN_IF_ERROR(check::Tensor(op, f_name, f, {"(M, K)", {M, K}}, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(CheckContiguous(op, q_name, q));
  return CheckContiguous(op, f_name, f);
}

// fn(m) for every row m, split over threads when the matrix is large enough.
template <class Fn>
void ForEachRow(int64_t M, int64_t K, Fn&& fn) {
  const auto rows = [&](int64_t begin, int64_t end, int) {
    for (int64_t m = begin; m < end; ++m) fn(m);
  };
  if (M * K < kMinParallelElements) {
    rows(0, M, 0);
  } else {
    ParallelFor(M, rows);
  }
}

}  // namespace

Status QuantizeWeight(const Tensor& x, const Tensor& q) {
  SSMKIT_RETURN_IF_ERROR(CheckPair("quantize", "x", x, "q", q));
  const int64_t K = q.shape[1], row_bytes = DTypeRowBytes(q.dtype, K);
  const float* src = static_cast<const float*>(x.data);  // (M, K)
  uint8_t* dst = static_cast<uint8_t*>(q.data);          // (M, row_bytes)
  ForEachRow(q.shape[0], K,
             [&](int64_t m) { quant::QuantizeRow(q.dtype, src + m * K, K, dst + m * row_bytes); });
  return Status::Ok();
}

Status DequantizeWeight(const Tensor& q, const Tensor& x) {
  SSMKIT_RETURN_IF_ERROR(CheckPair("dequantize", "x", x, "q", q));
  const int64_t K = q.shape[1], row_bytes = DTypeRowBytes(q.dtype, K);
  const uint8_t* src = static_cast<const uint8_t*>(q.data);  // (M, row_bytes)
  float* dst = static_cast<float*>(x.data);                  // (M, K)
  ForEachRow(q.shape[0], K, [&](int64_t m) {
    quant::DequantizeRow(q.dtype, src + m * row_bytes, K, dst + m * K);
  });
  return Status::Ok();
}

bool DTypeFromName(const std::string& name, DType* dtype) {
  for (int i = 0; i <= static_cast<int>(kLastDType); ++i) {
    const DType candidate = static_cast<DType>(i);
    if (name == DTypeName(candidate)) {
      *dtype = candidate;
      return true;
    }
  }
  return false;
}

}  // namespace ssmkit
