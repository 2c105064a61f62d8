// Products with a bf16 weight on AVX-512 BF16 (opt-in, ssmkit::SetBf16Products): x rounded to
// bf16 once per call, then bf16 x bf16 products summed in f32 by vdpbf16ps, twice the
// multiply-adds per instruction of the f32 FMA of the other kernels.
// Dimension legend: T rows, K input features (even), M output features.
#pragma once

#include <cstdint>

#include "params/linear_params.hpp"

// The kernels' functions are compiled for AVX-512 BF16 with a target attribute (Highway 1.0.3
// has no such target) and run only where the CPU reports it (SetBf16Products).
#if defined(__x86_64__) && defined(__GNUC__)
#define SSMKIT_BF16_PRODUCTS_X86 1
#define SSMKIT_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))
#else
#define SSMKIT_BF16_PRODUCTS_X86 0
#endif

namespace ssmkit::cpu {

// Whether Linear takes this path for p: the products are enabled and the CPU has AVX-512 BF16,
// K is even, and either T >= 2 rows (at most kLinearGemvMaxRows) with a bf16 weight, x and out
// row-major (one row of x, batch-1 decode, is bound by the weight's bytes and keeps x in f32; a
// quantized weight's few rows keep their 8-bit kernels), or more rows with a bf16 or quantized
// weight in any layout of x and out.
bool TakesBf16Products(const LinearParams& p);

// x rounded to bf16 (to nearest even), rows [t_begin, t_end) of the (T, K) buffer xb.
void RoundRowsToBf16(const LinearParams& p, int64_t t_begin, int64_t t_end, uint16_t* xb);

// Output features [m_begin, m_end) of p from xb (T, K) bf16 (RoundRowsToBf16; nullptr for a
// feature-major x, packed from its f32 columns), on the calling
// thread; bias added. May throw std::bad_alloc (the thread's packed weight panel, kept between
// calls). Each output is summed in one fixed order whatever the threads and the row range, and
// for T <= kLinearGemvMaxRows whatever the other rows of x (Bf16FewRows).
void Bf16ProductRows(const LinearParams& p, const uint16_t* xb, int64_t m_begin, int64_t m_end);

// The same for 2 <= T <= kLinearGemvMaxRows (decode batches; linear_bf16_rows.cpp): W read in
// its own layout, once from memory for all T rows.
void Bf16FewRows(const LinearParams& p, const uint16_t* xb, int64_t m_begin, int64_t m_end);

}  // namespace ssmkit::cpu
