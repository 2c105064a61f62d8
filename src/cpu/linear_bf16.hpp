// Many-row products with a bf16 weight on AVX-512 BF16 (opt-in, ssmkit::SetBf16Products): x
// rounded to bf16 once per call, then bf16 x bf16 products summed in f32 by vdpbf16ps, twice
// the multiply-adds per instruction of the f32 FMA that the widened-weight sgemm path uses.
// Dimension legend: T rows, K input features (even), M output features.
#pragma once

#include <cstdint>

#include "params/linear_params.hpp"

namespace ssmkit::cpu {

// Whether Linear takes this path for p: the products are enabled and the CPU has AVX-512 BF16,
// the weight is bf16 with an even K, x and out are row-major, T > kLinearGemvMaxRows.
bool TakesBf16Products(const LinearParams& p);

// x rounded to bf16 (to nearest even), rows [t_begin, t_end) of the (T, K) buffer xb.
void RoundRowsToBf16(const LinearParams& p, int64_t t_begin, int64_t t_end, uint16_t* xb);

// Output features [m_begin, m_end) of p from xb (T, K) bf16 (RoundRowsToBf16), on the calling
// thread; bias added. May throw std::bad_alloc (the thread's packed weight panel, kept between
// calls). Each output is one sum over K in order, whatever the threads and the row range.
void Bf16ProductRows(const LinearParams& p, const uint16_t* xb, int64_t m_begin, int64_t m_end);

}  // namespace ssmkit::cpu
