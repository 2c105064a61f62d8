// RMS norm properties the op harness (tests/harness/cases/rms_norm.cpp, add_rms_norm.cpp) does
// not express: a bf16 output is the f32 output rounded, bit for bit; a NaN stays in its row;
// forward and backward give the same bits twice on 2 threads.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ref/norm_ref.hpp"
#include "ssmkit/norm.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

// A gated problem's inputs, z present and bias present: x and z in `dtype`, weight and bias f32.
struct GatedInputs {
  HostTensor x, z, weight, bias;
  std::vector<double> x_d, z_d, weight_d, bias_d;
  GatedInputs(Rng& rng, int64_t rows, int64_t features, DType dtype)
      : x({rows, features}, dtype),
        z({rows, features}, dtype),
        weight({features}, DType::kF32),
        bias({features}, DType::kF32) {
    x_d = x.Fill(rng.NormalVec(rows * features));
    z_d = z.Fill(rng.NormalVec(rows * features, 1.5));
    weight_d = weight.Fill(rng.UniformVec(features, 0.5, 1.5));
    bias_d = bias.Fill(rng.NormalVec(features, 0.1));
  }
  RmsNormInputs Inputs() { return {x.view(), weight.view(), bias.view(), z.view()}; }
};

// bf16 storage only changes the loads and stores: with the same (bf16-exact) values in f32
// tensors the arithmetic is the same, so the bf16 output must be the f32 output rounded to
// nearest even, bit for bit (this checks the vector bf16 conversion and its scalar tail).
TEST(RmsNorm, Bf16OutputIsTheRoundedF32Output) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (int64_t E : {37, 1536}) {
    for (bool norm_before_gate : {false, true}) {
      SCOPED_TRACE("E=" + std::to_string(E) +
                   " norm_before_gate=" + std::to_string(norm_before_gate));
      Rng rng(seed + E + norm_before_gate);
      GatedInputs bf16(rng, 16, E, DType::kBF16);
      RmsNormOptions options;
      options.norm_before_gate = norm_before_gate;
      HostTensor out_bf16({16, E}, DType::kBF16), x32({16, E}, DType::kF32),
          z32({16, E}, DType::kF32), out32({16, E}, DType::kF32);
      x32.Fill(bf16.x_d);
      z32.Fill(bf16.z_d);
      ASSERT_TRUE(RmsNormForward(bf16.Inputs(), out_bf16.view(), options).ok());
      RmsNormInputs in32 = bf16.Inputs();
      in32.x = x32.view();
      in32.z = z32.view();
      ASSERT_TRUE(RmsNormForward(in32, out32.view(), options).ok());
      const auto* got = reinterpret_cast<const uint16_t*>(out_bf16.bytes().data());
      const auto* f32 = reinterpret_cast<const float*>(out32.bytes().data());
      int mismatches = 0;
      for (int64_t i = 0; i < 16 * E; ++i) mismatches += got[i] != F32ToBf16(f32[i]);
      EXPECT_EQ(mismatches, 0);
    }
  }
}

// A NaN in one row of x makes that row's output NaN and leaves every other row exact: rows
// do not leak into each other (and NaN survives the bf16 store).
TEST(RmsNorm, NaNStaysInItsRow) {
  constexpr int64_t kRows = 6, kE = 64;
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    Rng rng(seed);
    GatedInputs in(rng, kRows, kE, dtype);
    in.x_d[2 * kE + 5] = std::numeric_limits<double>::quiet_NaN();
    in.x_d = in.x.Fill(in.x_d);
    HostTensor out({kRows, kE}, dtype);
    out.Poison();
    ASSERT_TRUE(RmsNormForward(in.Inputs(), out.view()).ok());
    std::vector<double> want(kRows * kE);
    ref::RmsNormForward({kRows, kE},
                        {in.x_d.data(), in.weight_d.data(), in.bias_d.data(), in.z_d.data()},
                        want.data());
    HostTensor rounded({kRows * kE}, dtype);
    want = rounded.Fill(want);
    const std::vector<double> got = out.ToDouble();
    for (int64_t m = 0; m < kRows; ++m) {
      const std::vector<double> got_row(got.begin() + m * kE, got.begin() + (m + 1) * kE);
      const std::vector<double> want_row(want.begin() + m * kE, want.begin() + (m + 1) * kE);
      if (m == 2) {
        for (double v : got_row) EXPECT_TRUE(std::isnan(v));
      } else {
        EXPECT_LE(RelativeError(got_row, want_row), dtype == DType::kF32 ? 1e-5 : 1e-2)
            << "row " << m;
      }
    }
  }
}

// Forward and backward twice on 2 threads with an uneven row split: the same bits.
TEST(NormDeterminism, TwoThreadsTwiceSameBits) {
  constexpr int64_t kRows = 1031, kE = 96;  // ~99K elements: 3 row chunks on 2 threads
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  const ScopedThreads threads(2);
  Rng rng(seed);
  GatedInputs gated(rng, kRows, kE, DType::kF32);
  RmsNormOptions gated_options;
  gated_options.group_size = 32;
  HostTensor residual({kRows, kE}, DType::kF32), dout({kRows, kE}, DType::kF32),
      dres_out({kRows, kE}, DType::kF32);
  for (HostTensor* t : {&residual, &dout, &dres_out}) t->Fill(rng.NormalVec(kRows * kE));
  const AddRmsNormInputs add{gated.x.view(), residual.view(), gated.weight.view(),
                             gated.bias.view()};
  auto run = [&] {
    std::vector<std::vector<uint8_t>> bits;
    HostTensor out({kRows, kE}, DType::kF32), res_out({kRows, kE}, DType::kF32);
    HostTensor dx({kRows, kE}, DType::kF32), dz({kRows, kE}, DType::kF32),
        dres({kRows, kE}, DType::kF32);
    HostTensor dw({kE}, DType::kF32), db({kE}, DType::kF32);
    EXPECT_TRUE(RmsNormForward(gated.Inputs(), out.view(), gated_options).ok());
    EXPECT_TRUE(RmsNormBackward(gated.Inputs(), dout.view(),
                                {dx.view(), dw.view(), db.view(), dz.view()}, gated_options)
                    .ok());
    for (HostTensor* t : {&out, &dx, &dz, &dw, &db}) bits.push_back(t->bytes());
    EXPECT_TRUE(AddRmsNormForward(add, out.view(), res_out.view()).ok());
    EXPECT_TRUE(AddRmsNormBackward(add, dout.view(), dres_out.view(),
                                   {dx.view(), dres.view(), dw.view(), db.view()})
                    .ok());
    for (HostTensor* t : {&out, &res_out, &dx, &dres, &dw, &db}) bits.push_back(t->bytes());
    return bits;
  };
  const auto first = run();
  const auto second = run();
  ASSERT_EQ(first.size(), second.size());
  for (size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(first[i] == second[i]) << "output " << i;
}

}  // namespace
}  // namespace ssmkit::testing
