// The selective scan on the GPU against the fp64 oracle: forward and backward (all nine
// gradients), every B/C form, f32 / bf16 / f16, N from 1 to 256 (both states-per-lane
// layouts), optional inputs on and off, padded strides, L up to 2^17 (mamba_ssm issue #1015:
// wrong output past ~61K tokens), offsets past 2^31 elements, and bitwise determinism.
// Fresh random inputs (seed printed on failure), outputs poisoned with NaN.
//
// Bounds (||got - ref|| / ||ref||): f32 1e-4 forward, 1e-3 gradients (exp2f / __expf and f32
// sums over up to 2^17 steps); 16-bit dtypes 1e-2 (the outputs' own rounding). Held on
// an H100 (2026-11-23).
#include <array>
#include <cstring>

#include "gpu_test_util.hpp"
#include "selective_scan_fixture.hpp"

namespace ssmkit::testing {
namespace {

double Bound(DType dtype, bool grad) {
  if (dtype != DType::kF32) return 1e-2;
  return grad ? 1e-3 : 1e-4;
}

SelectiveScanInputs ToDevice(const SelectiveScanInputs& in, Mirrors& m) {
  return m.In(in, SelectiveScanTensors::inputs);
}

void CheckForward(const ScanCase& c, uint64_t seed) {
  SCOPED_TRACE(c.Name());
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  ScanProblem prob(c, rng);
  PaddedTensor out(prob.SeqShape(), c.dtype, c.pad), fs(prob.StateShape(), DType::kF32, c.pad);
  out.Poison();
  fs.Poison();
  Mirrors m;
  const Status s =
      SelectiveScanForward(ToDevice(prob.Inputs(), m), m.Out(out.view()), m.Out(fs.view()));
  ASSERT_TRUE(s.ok()) << s.message();
  SSMKIT_CUDA_OK(m.CopyBack());
  std::vector<double> ref_out(prob.SeqSize()), ref_state(prob.StateSize());
  ref::SelectiveScanForward(prob.Shape(), prob.RefInputs(), ref_out.data(), ref_state.data());
  EXPECT_LE(RelativeError(out.ToDouble(), ref_out), Bound(c.dtype, false));
  EXPECT_LE(RelativeError(fs.ToDouble(), ref_state), Bound(DType::kF32, false));
  EXPECT_TRUE(out.PaddingUntouched());
  EXPECT_TRUE(fs.PaddingUntouched());
}

constexpr int kNumGrads = kNumScanGrads;

// Runs the GPU backward for a problem; returns the gradients in order (empty where absent).
std::array<std::vector<double>, kNumGrads> RunBackward(
    ScanProblem& prob, PaddedTensor& dout, PaddedTensor& dfinal,
    std::array<std::vector<uint8_t>, kNumGrads>* bytes = nullptr) {
  std::array<PaddedTensor, kNumGrads> t = ScanGradTensors(prob);
  const std::array<bool, kNumGrads> present = ScanGradPresent(prob.c);
  Mirrors m;
  Tensor v[kNumGrads];
  for (int i = 0; i < kNumGrads; ++i) {
    if (present[i]) v[i] = m.Out(t[i].view());
  }
  const SelectiveScanGrads grads = StructFromList(SelectiveScanTensors::grads, v);
  const Status s = SelectiveScanBackward(ToDevice(prob.Inputs(), m), m.In(dout.view()),
                                         m.In(dfinal.view()), grads);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(m.CopyBack(), cudaSuccess);
  std::array<std::vector<double>, kNumGrads> got;
  for (int i = 0; i < kNumGrads; ++i) {
    if (!present[i]) continue;
    got[i] = t[i].ToDouble();
    EXPECT_TRUE(t[i].PaddingUntouched()) << ScanGradName(i) << " written outside its view";
    if (bytes) (*bytes)[i] = t[i].Bytes();
  }
  return got;
}

void CheckBackward(const ScanCase& c, uint64_t seed) {
  SCOPED_TRACE(c.Name());
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  ScanProblem prob(c, rng);
  PaddedTensor dout(prob.SeqShape(), c.dtype, c.pad), dfinal(prob.StateShape(), DType::kF32, c.pad);
  const std::vector<double> dout_d = dout.Fill(rng.NormalVec(prob.SeqSize()));
  const std::vector<double> dfinal_d = dfinal.Fill(rng.NormalVec(prob.StateSize()));
  const auto got = RunBackward(prob, dout, dfinal);

  std::array<std::vector<double>, kNumGrads> want;
  want[0].resize(prob.SeqSize());
  want[1].resize(prob.SeqSize());
  want[2].resize(c.dim * c.dstate);
  want[3].resize(prob.B.numel());
  want[4].resize(prob.C.numel());
  if (c.has_D) want[5].resize(c.dim);
  if (c.has_z) want[6].resize(prob.SeqSize());
  if (c.has_delta_bias) want[7].resize(c.dim);
  if (c.has_h0) want[8].resize(prob.StateSize());
  auto ptr = [](std::vector<double>& v) { return v.empty() ? nullptr : v.data(); };
  const ref::ScanGrads rg{ptr(want[0]), ptr(want[1]), ptr(want[2]), ptr(want[3]), ptr(want[4]),
                          ptr(want[5]), ptr(want[6]), ptr(want[7]), ptr(want[8])};
  ref::SelectiveScanBackward(prob.Shape(), prob.RefInputs(), dout_d.data(), dfinal_d.data(), rg);
  for (int i = 0; i < kNumGrads; ++i) {
    if (want[i].empty()) continue;
    const bool f32_grad = i == 2 || i == 5 || i == 7 || i == 8;  // dA, dD, ddelta_bias, dh0
    EXPECT_LE(RelativeError(got[i], want[i]), Bound(f32_grad ? DType::kF32 : c.dtype, true))
        << ScanGradName(i);
  }
}

std::vector<ScanCase> Cases() {
  std::vector<ScanCase> cases;
  ScanCase base;
  base.batch = 2;
  base.dim = 40;  // not a multiple of the channels per block
  base.seqlen = 77;
  base.dstate = 16;
  for (int64_t n : {1, 3, 16, 33, 64, 128, 129, 256}) {
    ScanCase c = base;
    c.dstate = n;
    cases.push_back(c);
  }
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    ScanCase c = base;
    c.dtype = dtype;
    cases.push_back(c);
  }
  ScanCase constant = base;
  constant.b_form = constant.c_form = BCForm::kConstant;
  cases.push_back(constant);
  ScanCase mixed = base;
  mixed.b_form = BCForm::kConstant;
  cases.push_back(mixed);
  ScanCase grouped = base;  // D / G = 3: blocks hold 3 channels of a group
  grouped.dim = 12;
  grouped.groups = 4;
  grouped.b_form = grouped.c_form = BCForm::kGrouped;
  cases.push_back(grouped);
  ScanCase grouped_mixed = grouped;  // B groups of 3 channels, C per (B, N, L)
  grouped_mixed.c_form = BCForm::kVariable;
  grouped_mixed.dim = 96;
  grouped_mixed.groups = 8;
  cases.push_back(grouped_mixed);
  ScanCase bare = base;
  bare.has_D = bare.has_z = bare.has_delta_bias = bare.has_h0 = bare.softplus = false;
  cases.push_back(bare);
  ScanCase padded = base;
  padded.pad = 3;
  padded.big_delta_fraction = 0.1;
  cases.push_back(padded);
  ScanCase one_step = base;
  one_step.seqlen = 1;
  cases.push_back(one_step);
  ScanCase policy = base;  // the `policy` shape
  policy.batch = 1;
  policy.dim = 512;
  policy.seqlen = 60;
  cases.push_back(policy);
  // Paths of the parallel backward (selective_scan_bwd_parallel.cu; checkpoints every 8 steps,
  // the checkpoint kernel stages 32 at once, 64-channel blocks, 16-byte row moves where rows
  // are 16-byte aligned) the cases above miss: L = 77 rows are not aligned, so they take the
  // element-by-element path.
  for (int64_t seqlen : {8, 9, 33}) {  // one chunk; one step past it; past a forward stage
    ScanCase c = base;
    c.seqlen = seqlen;
    cases.push_back(c);
  }
  ScanCase n9 = base;  // the second lane of a channel holds one state
  n9.dstate = 9;
  cases.push_back(n9);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    ScanCase aligned = base;  // aligned rows (stride 64) with the last vector part past L
    aligned.seqlen = 61;
    aligned.pad = 3;
    aligned.dtype = dtype;
    cases.push_back(aligned);
  }
  ScanCase m28 = base;  // the m1-2.8b layer's channels (80 blocks a row) at a short L, aligned
  m28.dim = 5120;
  m28.seqlen = 40;
  m28.dtype = DType::kBF16;
  cases.push_back(m28);
  ScanCase tiles = base;  // two groups of 96 channels: a full and a partial block each
  tiles.dim = 192;
  tiles.groups = 2;
  tiles.seqlen = 64;
  tiles.b_form = tiles.c_form = BCForm::kGrouped;
  cases.push_back(tiles);
  return cases;
}

// Cases the "parallel" forward covers (variable B/C, rows 16-byte aligned: L a multiple of 8),
// run with the variant required ("parallel!": the call fails rather than fall back), so they
// prove that kernel ran: both states-per-lane layouts (16 where B * D >= 32768, else 8) and
// every lane count (N = 1 .. 256), every dtype, L shorter than one register segment, L not a
// multiple of the segment or the staged chunk, channels not filling the last block, groups,
// options off, the m1-2.8b channel count, B and C staged from vectors and from scalars (f32).
std::vector<ScanCase> ParallelForwardCases() {
  std::vector<ScanCase> cases;
  ScanCase base;
  base.batch = 2;
  base.dim = 40;
  base.seqlen = 88;  // 5 segments of 16 steps and a tail of 8; two staged chunks of 64
  base.dstate = 16;
  for (int64_t n : {1, 16, 17, 33, 64, 129, 256}) {
    ScanCase c = base;
    c.dstate = n;
    cases.push_back(c);
  }
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    ScanCase c = base;
    c.dtype = dtype;
    cases.push_back(c);
  }
  for (int64_t L : {8, 16, 64, 200}) {
    ScanCase c = base;
    c.seqlen = L;
    c.dtype = DType::kBF16;
    cases.push_back(c);
  }
  ScanCase grouped = base;
  grouped.dim = 96;
  grouped.groups = 8;  // 12 channels per group: blocks of 64 channels cut at group boundaries
  grouped.b_form = grouped.c_form = BCForm::kGrouped;
  cases.push_back(grouped);
  ScanCase grouped_mixed = grouped;
  grouped_mixed.c_form = BCForm::kVariable;
  cases.push_back(grouped_mixed);
  ScanCase bare = base;
  bare.has_D = bare.has_z = bare.has_delta_bias = bare.has_h0 = bare.softplus = false;
  cases.push_back(bare);
  ScanCase big_delta = base;
  big_delta.big_delta_fraction = 0.1;
  cases.push_back(big_delta);
  // B * D >= 32768: the 16-states-per-lane layout (the cases above use 8): the m1-2.8b
  // layer's channels on a short sequence, and N = 33 over four lanes per channel.
  ScanCase wide = base;
  wide.batch = 7;
  wide.dim = 5120;
  wide.seqlen = 136;
  wide.dtype = DType::kBF16;
  cases.push_back(wide);
  ScanCase wide_n33 = wide;
  wide_n33.seqlen = 72;
  wide_n33.dstate = 33;
  wide_n33.dtype = DType::kF32;
  cases.push_back(wide_n33);
  return cases;
}

TEST(SelectiveScanGpu, ParallelForwardCoversAlignedRows) {
  SSMKIT_REQUIRE_GPU();
  ScopedVariant variant("SSMKIT_CUDA_SCAN", "parallel!");
  const uint64_t seed = FreshSeed();
  for (const ScanCase& c : ParallelForwardCases()) CheckForward(c, seed);
}

// A required variant that does not cover a call says so instead of falling back.
TEST(SelectiveScanGpu, RequiredVariantRefusesWhatItDoesNotCover) {
  SSMKIT_REQUIRE_GPU();
  ScopedVariant variant("SSMKIT_CUDA_SCAN", "parallel!");
  ScanCase c;  // L = 16 but constant B and C: not covered
  c.b_form = c.c_form = BCForm::kConstant;
  Rng rng(FreshSeed());
  ScanProblem prob(c, rng);
  PaddedTensor out(prob.SeqShape(), c.dtype);
  Mirrors m;
  const Status s = SelectiveScanForward(ToDevice(prob.Inputs(), m), m.Out(out.view()), Tensor{});
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.message();
  EXPECT_NE(s.message().find("SSMKIT_CUDA_SCAN=parallel!"), std::string::npos) << s.message();
}

// The cases of Cases() the "parallel" backward covers (N <= 16, variable or grouped B and C):
// every dtype, option set and row alignment there, run with the variant required ("parallel!":
// the call fails rather than fall back), so they prove that kernel ran.
TEST(SelectiveScanGpu, ParallelBackwardCoversItsCases) {
  SSMKIT_REQUIRE_GPU();
  ScopedVariant variant("SSMKIT_CUDA_SCAN_BWD", "parallel!");
  const uint64_t seed = FreshSeed();
  for (const ScanCase& c : Cases()) {
    if (c.dstate <= 16 && c.b_form != BCForm::kConstant && c.c_form != BCForm::kConstant)
      CheckBackward(c, seed);
  }
}

TEST(SelectiveScanGpu, RequiredBackwardVariantRefusesWhatItDoesNotCover) {
  SSMKIT_REQUIRE_GPU();
  ScopedVariant variant("SSMKIT_CUDA_SCAN_BWD", "parallel!");
  ScanCase c;  // N = 17: not covered
  c.dstate = 17;
  Rng rng(FreshSeed());
  ScanProblem prob(c, rng);
  PaddedTensor dout(prob.SeqShape(), c.dtype), du(prob.SeqShape(), c.dtype);
  dout.Fill(rng.NormalVec(prob.SeqSize()));
  Mirrors m;
  SelectiveScanGrads grads;
  grads.du = m.Out(du.view());
  const Status s =
      SelectiveScanBackward(ToDevice(prob.Inputs(), m), m.In(dout.view()), Tensor{}, grads);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported) << s.message();
  EXPECT_NE(s.message().find("SSMKIT_CUDA_SCAN_BWD=parallel!"), std::string::npos) << s.message();
}

TEST(SelectiveScanGpu, ForwardMatchesTheOracle) {
  SSMKIT_REQUIRE_GPU();
  ForEachVariant(kScanVariants, [&] {
    const uint64_t seed = FreshSeed();
    for (const ScanCase& c : Cases()) CheckForward(c, seed);
  });
}

TEST(SelectiveScanGpu, BackwardMatchesTheOracle) {
  SSMKIT_REQUIRE_GPU();
  ForEachVariant(kScanBackwardVariants, [&] {
    const uint64_t seed = FreshSeed();
    for (const ScanCase& c : Cases()) CheckBackward(c, seed);
  });
}

// L = 2^17 = 131072 positions of 16 channels (2^21 elements, past mamba_ssm's ~61K-token
// failure): forward and backward against the oracle.
TEST(SelectiveScanGpu, LongSequence) {
  SSMKIT_REQUIRE_GPU();
  ForEachVariant({&kScanVariants, &kScanBackwardVariants}, [&] {
    const uint64_t seed = FreshSeed();
    ScanCase c;
    c.batch = 1;
    c.dim = 16;
    c.seqlen = 1 << 17;
    c.dstate = 16;
    CheckForward(c, seed);
    CheckBackward(c, seed);
  });
}

TEST(SelectiveScanGpu, BackwardIsDeterministic) {
  SSMKIT_REQUIRE_GPU();
  ForEachVariant(kScanBackwardVariants, [&] {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(SeedTrace(seed));
    ScanCase c;
    c.batch = 3;
    c.dim = 256;
    c.seqlen = 300;
    c.dstate = 16;
    Rng rng(seed);
    ScanProblem prob(c, rng);
    PaddedTensor dout(prob.SeqShape(), c.dtype), dfinal(prob.StateShape(), DType::kF32);
    dout.Fill(rng.NormalVec(prob.SeqSize()));
    dfinal.Fill(rng.NormalVec(prob.StateSize()));
    std::array<std::vector<uint8_t>, kNumGrads> first, second;
    RunBackward(prob, dout, dfinal, &first);
    RunBackward(prob, dout, dfinal, &second);
    for (int i = 0; i < kNumGrads; ++i) EXPECT_TRUE(first[i] == second[i]) << ScanGradName(i);
  });
}

// Offsets past 2^31 elements: batch row 1 of u, delta, out (and dout, du, ddelta) starts
// 2^31 + 64 elements after row 0 (a bf16 buffer of ~4.3 GB each, ~26 GB in all). A kernel
// indexing with 32-bit offsets reads or writes the wrong place and fails the comparison.
TEST(SelectiveScanGpu, OffsetsPast2To31) {
  SSMKIT_REQUIRE_GPU();
  ForEachVariant({&kScanVariants, &kScanBackwardVariants}, [&] {
    size_t free_bytes = 0, total = 0;
    SSMKIT_CUDA_OK(cudaMemGetInfo(&free_bytes, &total));
    const int64_t row_stride = (int64_t{1} << 31) + 64;
    if (free_bytes < 7 * static_cast<size_t>(row_stride) * 2) {
      GTEST_SKIP() << "needs ~30 GB of free GPU memory, " << (free_bytes >> 30) << " GB free";
    }
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(SeedTrace(seed));
    ScanCase c;
    c.batch = 2;
    c.dim = 64;
    c.seqlen = 256;
    c.dstate = 16;
    c.dtype = DType::kBF16;
    c.has_z = false;
    Rng rng(seed);
    ScanProblem prob(c, rng);
    const int64_t row = c.dim * c.seqlen;  // one batch row, compact
    // A device (B, D, L) bf16 tensor whose batch rows lie row_stride apart; `host` compact.
    struct Far {
      void* data = nullptr;
      ~Far() { cudaFree(data); }
    };
    auto far_tensor = [&](Far& f, const void* host) -> Tensor {
      EXPECT_EQ(cudaMalloc(&f.data, (row_stride + row) * 2), cudaSuccess);
      std::vector<uint16_t> nan(row, 0x7fc0);
      for (int64_t b = 0; b < 2; ++b) {
        const void* src = host ? static_cast<const uint16_t*>(host) + b * row : nan.data();
        EXPECT_EQ(cudaMemcpy(static_cast<uint16_t*>(f.data) + b * row_stride, src, row * 2,
                             cudaMemcpyHostToDevice),
                  cudaSuccess);
      }
      Tensor t = Tensor::Contiguous(f.data, DType::kBF16, {2, c.dim, c.seqlen}, Device::kCuda);
      t.strides[0] = row_stride;
      return t;
    };
    auto read_back = [&](const Far& f) {
      std::vector<uint16_t> v(2 * row);
      for (int64_t b = 0; b < 2; ++b) {
        EXPECT_EQ(
            cudaMemcpy(v.data() + b * row, static_cast<const uint16_t*>(f.data) + b * row_stride,
                       row * 2, cudaMemcpyDeviceToHost),
            cudaSuccess);
      }
      std::vector<double> d(2 * row);
      for (int64_t i = 0; i < 2 * row; ++i) d[i] = Bf16ToF32(v[i]);
      return d;
    };
    HostTensor u_h({2, c.dim, c.seqlen}, DType::kBF16), delta_h = u_h, dout_h = u_h;
    u_h.Fill(prob.u_d);
    delta_h.Fill(prob.delta_d);
    const std::vector<double> dout_d = dout_h.Fill(rng.NormalVec(2 * row));
    Far u, delta, out, dout, du, ddelta;
    Mirrors m;
    SelectiveScanInputs in = ToDevice(prob.Inputs(), m);
    in.u = far_tensor(u, u_h.data());
    in.delta = far_tensor(delta, delta_h.data());
    const Tensor out_t = far_tensor(out, nullptr);
    ASSERT_TRUE(SelectiveScanForward(in, out_t, Tensor{}).ok());
    SelectiveScanGrads grads;
    grads.du = far_tensor(du, nullptr);
    grads.ddelta = far_tensor(ddelta, nullptr);
    ASSERT_TRUE(SelectiveScanBackward(in, far_tensor(dout, dout_h.data()), Tensor{}, grads).ok());
    SSMKIT_CUDA_OK(cudaDeviceSynchronize());
    std::vector<double> ref_out(2 * row), ref_du(2 * row), ref_ddelta(2 * row);
    ref::SelectiveScanForward(prob.Shape(), prob.RefInputs(), ref_out.data(), nullptr);
    ref::ScanGrads rg;
    rg.du = ref_du.data();
    rg.ddelta = ref_ddelta.data();
    ref::SelectiveScanBackward(prob.Shape(), prob.RefInputs(), dout_d.data(), nullptr, rg);
    EXPECT_LE(RelativeError(read_back(out), ref_out), 1e-2);
    EXPECT_LE(RelativeError(read_back(du), ref_du), 1e-2);
    EXPECT_LE(RelativeError(read_back(ddelta), ref_ddelta), 1e-2);
  });
}

}  // namespace
}  // namespace ssmkit::testing
