// CPU linear layer: picks the few-rows kernel (linear_gemv.cpp: decode batches and short
// prompts up to kLinearGemvMaxRows, in either layout; quant_linear.cpp for a quantized weight)
// or OpenBLAS sgemm (many rows: prefill).
// Dimension legend: T rows, K input features, M output features, Pm weight rows per panel.
//
// Both split the M output features over threads, so each output element is computed by one
// thread over the whole of K: the sgemm path in contiguous blocks (ParallelFor), the few-rows
// kernels in chunks that a thread done early takes from the other's block (ParallelForBalanced).
// The result depends on the thread count only through the block and chunk boundaries
// (deterministic for a given count).
// The sgemm path runs OpenBLAS single-threaded inside each of our blocks (blas::SingleThread:
// its own pool would fight ours for the cores). A bf16/f16 or quantized weight is widened
// (decoded) one panel of Pm whole rows at a time into a per-thread buffer; at
// T > kLinearGemvMaxRows rows the widening (M*K) is small next to the product (2*T*M*K).
// The quantized few-rows kernel reads x quantized to 8 bits, once per call for all threads.
// With the opt-in bf16 products (ssmkit::SetBf16Products) a bf16 weight's product with 2 or
// more rows rounds x to bf16, once per call, and runs linear_bf16.cpp's kernels instead (on a CPU
// with AMX's bf16 tiles linear_bf16_amx_rows.cpp's, 64 rows of x at a time, in either layout).
#include "cpu/blas.hpp"
#include "cpu/linear.hpp"

#include <algorithm>
#include <atomic>
#include <new>

#include "core/cache_line_vector.hpp"
#include "core/dtype.hpp"
#include "core/parallel.hpp"
#include "core/transpose.hpp"
#include "cpu/linear_bf16.hpp"
#include "cpu/quant_linear.hpp"
#include "cpu/thread_scratch.hpp"
#include "ssmkit/linear.hpp"

namespace ssmkit::cpu {
namespace {

// Below this many weight elements (M * K) a call stays on the calling thread: waking the pool
// costs more than the work. Past kRowsPerPass rows of x the work grows with them, and the
// weights count once per kRowsPerPass rows: the policy window's x_proj (M * K = 24,576, 60
// rows) had stayed on one thread. Tuned for speed only.
constexpr int64_t kMinParallelWeights = 1 << 15;
constexpr int64_t kRowsPerPass = 8;
// Below this many weight rows (8 AMX tiles) a chunk of the AMX product stays on the calling
// thread. Tuned for speed only.
constexpr int64_t kAmxMinSplitRows = 8 * kAmxTileRows;

// Floats per widened panel (Pm * K), 4 MB: each sgemm call packs the whole of x again, so a
// panel must be large next to x for that copy not to show (at 2^18 floats, 1 MB, OpenBLAS's
// packing was 17% of a 1020-token prefill of a 2.8B Q4_K file; 2^20 measured 13-17% faster
// there and ~10% on granite-350m bf16, docs/benchmarks.md). Tuned for speed only.
constexpr int64_t kPanelFloats = 1 << 20;

// The fewest weight rows ParallelForBalanced hands out at once: a 130M model's in_proj row at
// Q4_K is 432 bytes, so 32 of them take ~1.5 us from memory, well above the cost of taking a
// chunk. Tuned for speed only.
constexpr int64_t kMinChunkRows = 32;

// fn(m_begin, m_end, worker) over W's rows, split in blocks of `unit` rows (the last short).
// The few-rows kernels compute each output row whole, in the same operations wherever its
// chunk starts, so their rows are shared out in chunks (ParallelForBalanced); the sgemm path
// (`whole_blocks`) keeps one block per thread, as each call packs the whole of x again.
template <class Fn>
void SplitRows(const LinearParams& p, Fn&& fn, int64_t unit = 1, bool whole_blocks = false) {
  const int64_t M = p.out_features, passes = (p.rows + kRowsPerPass - 1) / kRowsPerPass;
  if (M * p.in_features < kMinParallelWeights / std::max<int64_t>(1, passes)) {
    fn(int64_t{0}, M, 0);
    return;
  }
  const auto in_rows = [&](int64_t begin, int64_t end, int worker) {
    fn(begin * unit, std::min(end * unit, M), worker);
  };
  const int64_t units = (M + unit - 1) / unit;
  if (whole_blocks) {
    ParallelFor(units, in_rows);
  } else {
    ParallelForBalanced(units, std::max<int64_t>(1, kMinChunkRows / unit), in_rows);
  }
}

// out[:, m0 : m0 + rows] = x w^T for a panel w (rows, K) of f32 weights (rows m0...).
void GemmPanel(const LinearParams& p, const float* w, int64_t m0, int64_t rows) {
  const int64_t T = p.rows, K = p.in_features;
  const bool x_rm = p.x_row_major();
  const int64_t ldx = x_rm ? p.x_stride_row : p.x_stride_feature;
  if (p.out_row_major()) {
    // out (T, rows) = op(x) (T, K) . w^T (K, rows)
    blas::Gemm(!x_rm, true, T, rows, K, 1.0f, p.x, ldx, w, K, 0.0f, p.out + m0, p.out_stride_row);
    if (p.bias != nullptr) {
      for (int64_t t = 0; t < T; ++t) {
        float* o = p.out + t * p.out_stride_row + m0;
        for (int64_t r = 0; r < rows; ++r) o[r] += p.bias[m0 + r];
      }
    }
    return;
  }
  // out stored (M, T): out^T (rows, T) = w (rows, K) . op(x)^T (K, T)
  float* o = p.out + m0 * p.out_stride_feature;
  blas::Gemm(false, x_rm, rows, T, K, 1.0f, w, K, p.x, ldx, 0.0f, o, p.out_stride_feature);
  if (p.bias != nullptr) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t t = 0; t < T; ++t) o[r * p.out_stride_feature + t] += p.bias[m0 + r];
    }
  }
}

void GemmRows(const LinearParams& p, int64_t m_begin, int64_t m_end) {
  const int64_t K = p.in_features;
  if (p.weight_dtype == DType::kF32) {
    GemmPanel(p, static_cast<const float*>(p.weight) + m_begin * K, m_begin, m_end - m_begin);
    return;
  }
  const int64_t panel_rows = std::max<int64_t>(1, kPanelFloats / K);
  float* panel =  // (Pm, K), this worker's own
      ThreadScratch(ScratchSlot::kLinearPanel, std::min(panel_rows, m_end - m_begin) * K);
  // Panels start on a row: a quantized row is whole blocks (K a multiple of the block).
  const int64_t row_bytes = DTypeRowBytes(p.weight_dtype, K);
  for (int64_t m0 = m_begin; m0 < m_end; m0 += panel_rows) {
    const int64_t rows = std::min(panel_rows, m_end - m0);
    WidenToF32(static_cast<const uint8_t*>(p.weight) + m0 * row_bytes, p.weight_dtype, rows * K,
               panel);
    GemmPanel(p, panel, m0, rows);
  }
}

// Whether a few rows' feature-major out is computed in rows and copied back: the kernels of a
// quantized weight and the bf16 products store rows only. The f32, bf16 and f16 few-rows
// kernels store it directly (the Mamba-1 mixer's in_proj and dt_proj: no copy).
bool OutThroughRows(const LinearParams& p) {
  if (p.out_row_major()) return false;
  if (DTypeIsQuantized(p.weight_dtype)) return true;
  LinearParams in_rows = p;  // as LinearThroughRows would pass it
  in_rows.x_stride_row = p.in_features;
  in_rows.x_stride_feature = 1;
  in_rows.out_stride_row = p.out_features;
  in_rows.out_stride_feature = 1;
  return TakesBf16Products(in_rows);
}

// The few-rows kernels read x row-major.
bool TakesGemv(const LinearParams& p) {
  return p.rows <= kLinearGemvMaxRows && p.x_row_major() && !OutThroughRows(p);
}

// Below this many elements of x (T * K) its quantization or rounding stays on the calling
// thread. Tuned for speed only.
constexpr int64_t kMinParallelActivations = 1 << 16;

// fn(begin, end, worker) over the rows of x: on the calling thread for a small x, else split
// over threads (preparing x once per call for every worker: quantized or rounded).
template <class Fn>
void OverRowsOfX(const LinearParams& p, Fn&& fn) {
  if (p.rows * p.in_features < kMinParallelActivations) {
    fn(int64_t{0}, p.rows, 0);
    return;
  }
  ParallelFor(p.rows, fn);
}

// Rows [t0, t0 + kAmxColumns) of x and out (fewer at the end): the AMX kernel's operands.
LinearParams RowChunk(const LinearParams& p, int64_t t0) {
  LinearParams chunk = p;
  chunk.rows = std::min(kAmxColumns, p.rows - t0);
  chunk.x = p.x + t0 * p.x_stride_row;
  chunk.out = p.out + t0 * p.out_stride_row;
  return chunk;
}

// The few-rows product with a quantized weight, all output features: x quantized once into the
// calling thread's buffer (kept between calls), then the rows of W split over threads. Returns
// false when a buffer (x's, or a worker's accumulators) could not be allocated.
bool QuantGemv(const LinearParams& p) {
  thread_local QuantizedRows buffer;
  // The workers read this thread's buffer through the reference (naming the thread_local in
  // their lambdas would name each worker's own).
  QuantizedRows& xq = buffer;
  xq.Reserve(p.rows, p.in_features, p.weight_dtype);
  OverRowsOfX(p, [&](int64_t begin, int64_t end, int) { QuantizeLinearRows(p, begin, end, &xq); });
  std::atomic<bool> out_of_memory{false};
  SplitRows(p, [&](int64_t begin, int64_t end, int) {
    try {
      QuantLinearRows(p, xq, begin, end);
    } catch (const std::bad_alloc&) {
      out_of_memory.store(true, std::memory_order_relaxed);
    }
  });
  return !out_of_memory;
}

// x rounded to bf16 for the bf16 products, in the calling thread's buffer (kept between calls):
// the workers read it through the pointer. nullptr when it could not be allocated. Row-major x
// only: the products pack a feature-major x from its own f32 columns.
const uint16_t* RoundedRows(const LinearParams& p) {
  thread_local CacheLineVector<uint16_t> buffer;  // (T, K)
  try {
    buffer.resize(static_cast<size_t>(p.rows * p.in_features));
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
  uint16_t* xb = buffer.data();
  OverRowsOfX(p, [&](int64_t begin, int64_t end, int) { RoundRowsToBf16(p, begin, end, xb); });
  return xb;
}

}  // namespace

void LinearRows(const LinearParams& p, int64_t m_begin, int64_t m_end) {
  if (TakesAmxTiles(p)) {
    // Called per block of rows by a caller's own parallel loop: each thread packs x itself.
    thread_local CacheLineVector<uint32_t> xq;
    xq.resize(static_cast<size_t>(AmxPairs(p.in_features) * kAmxColumns));
    for (int64_t t0 = 0; t0 < p.rows; t0 += kAmxColumns) {
      const LinearParams chunk = RowChunk(p, t0);
      PackAmxRows(chunk, xq.data());
      AmxFewRows(chunk, xq.data(), m_begin, m_end);
    }
  } else if (TakesBf16Products(p)) {
    // Called per block of rows by a caller's own parallel loop: each thread rounds x itself.
    thread_local CacheLineVector<uint16_t> xb;
    if (p.x_row_major()) {
      xb.resize(static_cast<size_t>(p.rows * p.in_features));
      RoundRowsToBf16(p, 0, p.rows, xb.data());
    }
    Bf16ProductRows(p, p.x_row_major() ? xb.data() : nullptr, m_begin, m_end);
  } else if (!TakesGemv(p)) {
    GemmRows(p, m_begin, m_end);
  } else if (DTypeIsQuantized(p.weight_dtype)) {
    // Called per block of rows by a caller's own parallel loop: each thread quantizes x itself.
    thread_local QuantizedRows xq;
    xq.Reserve(p.rows, p.in_features, p.weight_dtype);
    QuantizeLinearRows(p, 0, p.rows, &xq);
    QuantLinearRows(p, xq, m_begin, m_end);
  } else {
    LinearGemvRows(p, m_begin, m_end);
  }
}

namespace {

// A few rows stored feature-major (the Mamba-1 mixer's prefill keeps x and out as channels,
// (K, T) and (M, T)): x copied into row-major rows, and out, where OutThroughRows, computed
// into row-major rows, then copied back, so that they take the few-rows kernels too. The sgemm path
// would widen (for a quantized weight: decode) every weight for them, which cost seconds per short
// prompt on a 2.8B GGUF model; the copies are T * (K + M) floats.
Status LinearThroughRows(const LinearParams& p) {
  const int64_t T = p.rows, K = p.in_features, M = p.out_features;
  // The calling thread's (kept between calls); the workers read them through q's pointers.
  thread_local CacheLineVector<float> x_rows, out_rows;  // (T, K), (T, M)
  LinearParams q = p;
  const bool out_through_rows = OutThroughRows(p);
  try {
    if (!p.x_row_major()) x_rows.resize(static_cast<size_t>(T * K));
    if (out_through_rows) out_rows.resize(static_cast<size_t>(T * M));
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("linear: could not allocate the rows of x or out");
  }
  if (!p.x_row_major()) {  // x stored (K, T), row stride x_stride_feature
    Transpose(p.x, p.x_stride_feature, K, T, x_rows.data(), K);
    q.x = x_rows.data();
    q.x_stride_row = K;
    q.x_stride_feature = 1;
  }
  if (out_through_rows) {
    q.out = out_rows.data();
    q.out_stride_row = M;
    q.out_stride_feature = 1;
  }
  SSMKIT_RETURN_IF_ERROR(Linear(q));
  if (out_through_rows) Transpose(out_rows.data(), M, T, M, p.out, p.out_stride_feature);
  return Status::Ok();
}

// The product on AMX's bf16 tiles of at most kAmxColumns rows: x packed once into the calling
// thread's buffer (kept between calls), then W's rows split over threads a tile of 16 at a time.
Status AmxRowsProduct(const LinearParams& p) {
  thread_local CacheLineVector<uint32_t> buffer;  // (AmxPairs(K), kAmxColumns)
  try {
    buffer.resize(static_cast<size_t>(AmxPairs(p.in_features) * kAmxColumns));
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("linear: could not allocate x packed for AMX");
  }
  const uint32_t* xq = buffer.data();
  std::atomic<bool> out_of_memory{false};
  try {
    PackAmxRows(p, buffer.data());
  } catch (const std::bad_alloc&) {  // x's rounded rows, before any worker started
    return Status::OutOfMemory("linear: could not allocate x rounded to bf16");
  }
  const auto rows = [&](int64_t begin, int64_t end, int) {
    try {
      AmxFewRows(p, xq, begin, end);
    } catch (const std::bad_alloc&) {
      out_of_memory.store(true, std::memory_order_relaxed);
    }
  };
  // A few tiles take microseconds: a second thread would spend more reading x and W from the
  // first's cache (the policy window's x_proj, 3 tiles: 7.5 us alone, 15 us split).
  if (p.out_features < kAmxMinSplitRows) {
    rows(0, p.out_features, 0);
  } else {
    SplitRows(p, rows, kAmxTileRows);
  }
  if (out_of_memory) return Status::OutOfMemory("linear: could not allocate a tile buffer");
  return Status::Ok();
}

}  // namespace

Status Linear(const LinearParams& p) {
  if (p.weight_row_stride != 0 && p.weight_row_stride != p.in_features && !TakesAmxTiles(p)) {
    return Status::Internal("linear: a weight with a row stride runs only on AMX's bf16 tiles");
  }
  if (TakesAmxTiles(p)) {
    for (int64_t t0 = 0; t0 < p.rows; t0 += kAmxColumns)
      SSMKIT_RETURN_IF_ERROR(AmxRowsProduct(RowChunk(p, t0)));
    return Status::Ok();
  }
  if (p.rows <= kLinearGemvMaxRows && !TakesGemv(p)) return LinearThroughRows(p);
  if (TakesGemv(p) && DTypeIsQuantized(p.weight_dtype)) {
    bool done = false;
    try {
      done = QuantGemv(p);
    } catch (const std::bad_alloc&) {  // x's buffer, before any worker started
    }
    if (!done) return Status::OutOfMemory("linear: could not allocate the quantized rows of x");
    return Status::Ok();
  }
  // bad_alloc from a worker's buffer (a widened, packed or decoded weight panel or block, kept
  // between calls) must not cross the parallel loop: caught here and reported after it.
  std::atomic<bool> out_of_memory{false};
  // The bf16 products of a row-major x read it rounded once for all workers.
  const bool bf16 = TakesBf16Products(p);
  const uint16_t* xb = bf16 && p.x_row_major() ? RoundedRows(p) : nullptr;
  if (bf16 && p.x_row_major() && xb == nullptr)
    return Status::OutOfMemory("linear: could not allocate x rounded to bf16");
  const auto rows = [&](int64_t begin, int64_t end, int) {
    try {
      if (bf16) {
        Bf16ProductRows(p, xb, begin, end);
      } else {
        LinearRows(p, begin, end);
      }
    } catch (const std::bad_alloc&) {
      out_of_memory.store(true, std::memory_order_relaxed);
    }
  };
  if (TakesGemv(p) || bf16) {
    SplitRows(p, rows);
  } else {
    blas::SingleThread single;
    SplitRows(p, rows, 1, /*whole_blocks=*/true);
  }
  if (out_of_memory) return Status::OutOfMemory("linear: could not allocate a weight buffer");
  return Status::Ok();
}

}  // namespace ssmkit::cpu
