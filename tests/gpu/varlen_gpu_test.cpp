// Packed sequences on the GPU against the fp64 oracle: the selective scan with cu_seqlens
// (per-sequence initial states, varlen_states and their gradients) and with seq_idx (two
// rows), forward and backward, N on both states-per-lane layouts (16 and 130) and a
// sequence start on a checkpoint boundary; causal conv1d with seq_idx, forward and backward.
// Fresh random inputs (seed printed on failure), outputs poisoned with NaN. Bounds as the
// other GPU tests: f32 1e-4 forward, 1e-3 gradients.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "gpu_test_util.hpp"
#include "ref/conv1d_ref.hpp"
#include "ref/selective_scan_ref.hpp"
#include "ssmkit/conv1d.hpp"
#include "ssmkit/selective_scan.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

constexpr double kForwardBound = 1e-4, kGradBound = 1e-3;

struct PackedScan {
  int64_t B = 1, D = 40, N = 16;
  bool cu = true;  // cu_seqlens (B = 1, per-sequence h0) or seq_idx
  std::vector<int64_t> lengths = {1, 15, 48, 3, 70, 1, 29};  // starts 16 and 64: checkpoints
};

void CheckScan(const PackedScan& c, uint64_t seed) {
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  std::vector<int64_t> offsets = {0};
  for (int64_t len : c.lengths) offsets.push_back(offsets.back() + len);
  const int64_t B = c.B, D = c.D, N = c.N, L = offsets.back();
  const int64_t S = static_cast<int64_t>(c.lengths.size()), rows = c.cu ? S : B;
  HostTensor u({B, D, L}, DType::kF32), delta({B, D, L}, DType::kF32), A({D, N}, DType::kF32),
      Bm({B, N, L}, DType::kF32), Cm({B, N, L}, DType::kF32), Dv({D}, DType::kF32),
      z({B, D, L}, DType::kF32), bias({D}, DType::kF32), h0({rows, D, N}, DType::kF32);
  const auto u_d = u.Fill(rng.NormalVec(u.numel()));
  std::vector<double> delta_v(delta.numel());
  for (double& v : delta_v) v = std::log(std::expm1(std::exp(rng.Uniform(std::log(1e-3), -1.0))));
  const auto delta_d = delta.Fill(delta_v);
  std::vector<double> a_v(D * N);
  for (double& v : a_v) v = -std::exp(rng.Uniform(-1.0, 1.0));
  const auto A_d = A.Fill(a_v);
  const auto B_d = Bm.Fill(rng.NormalVec(Bm.numel()));
  const auto C_d = Cm.Fill(rng.NormalVec(Cm.numel()));
  const auto D_d = Dv.Fill(rng.NormalVec(D));
  const auto z_d = z.Fill(rng.NormalVec(z.numel()));
  const auto bias_d = bias.Fill(rng.UniformVec(D, -0.5, 0.5));
  const auto h0_d = h0.Fill(rng.NormalVec(h0.numel()));
  HostTensor cu({S + 1}, DType::kI32), seq_idx({B, L}, DType::kI32);
  std::vector<int64_t> cu_v = offsets;
  std::vector<int32_t> seq_v;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t k = 0; k < S; ++k)
      for (int64_t l = offsets[k]; l < offsets[k + 1]; ++l) seq_v.push_back(int32_t(k + b));
  cu.Fill(std::vector<double>(cu_v.begin(), cu_v.end()));
  seq_idx.Fill(std::vector<double>(seq_v.begin(), seq_v.end()));

  ref::ScanShape shape{B, D, L, N, true, true, 1, 1, true, c.cu ? S : 0, c.cu};
  ref::ScanInputs rin{u_d.data(),
                      delta_d.data(),
                      A_d.data(),
                      B_d.data(),
                      C_d.data(),
                      D_d.data(),
                      z_d.data(),
                      bias_d.data(),
                      h0_d.data(),
                      c.cu ? nullptr : seq_v.data(),
                      c.cu ? cu_v.data() : nullptr};
  const int64_t vrows = c.cu ? S : 0;
  std::vector<double> out_ref(B * D * L), fin_ref(B * D * N), var_ref(vrows * D * N);
  ref::SelectiveScanForward(shape, rin, out_ref.data(), fin_ref.data(),
                            c.cu ? var_ref.data() : nullptr);

  Mirrors m;
  SelectiveScanInputs in;
  in.u = m.In(u.view());
  in.delta = m.In(delta.view());
  in.A = m.In(A.view());
  in.B = m.In(Bm.view());
  in.C = m.In(Cm.view());
  in.D = m.In(Dv.view());
  in.z = m.In(z.view());
  in.delta_bias = m.In(bias.view());
  in.initial_state = m.In(h0.view());
  in.delta_softplus = true;
  if (c.cu) in.cu_seqlens = m.In(cu.view());
  if (!c.cu) in.seq_idx = m.In(seq_idx.view());
  HostTensor out({B, D, L}, DType::kF32), fin({B, D, N}, DType::kF32),
      var({std::max<int64_t>(vrows, 1), D, N}, DType::kF32);
  for (HostTensor* t : {&out, &fin, &var}) t->Poison();
  Status s =
      SelectiveScanForward(in, SelectiveScanOutputs{m.Out(out.view()), m.Out(fin.view()), Tensor{},
                                                    c.cu ? m.Out(var.view()) : Tensor{}});
  ASSERT_TRUE(s.ok()) << s.message();

  HostTensor dout({B, D, L}, DType::kF32), dfin({B, D, N}, DType::kF32),
      dvar({std::max<int64_t>(vrows, 1), D, N}, DType::kF32);
  const auto dout_d = dout.Fill(rng.NormalVec(dout.numel()));
  const auto dfin_d = dfin.Fill(rng.NormalVec(dfin.numel()));
  const auto dvar_d = dvar.Fill(rng.NormalVec(dvar.numel()));
  std::array<HostTensor, 9> g = {
      HostTensor({B, D, L}, DType::kF32),   HostTensor({B, D, L}, DType::kF32),
      HostTensor({D, N}, DType::kF32),      HostTensor({B, N, L}, DType::kF32),
      HostTensor({B, N, L}, DType::kF32),   HostTensor({D}, DType::kF32),
      HostTensor({B, D, L}, DType::kF32),   HostTensor({D}, DType::kF32),
      HostTensor({rows, D, N}, DType::kF32)};
  Tensor gv[9];
  for (int i = 0; i < 9; ++i) {
    g[i].Poison();
    gv[i] = m.Out(g[i].view());
  }
  s = SelectiveScanBackward(in,
                            SelectiveScanOutputGrads{m.In(dout.view()), m.In(dfin.view()),
                                                     c.cu ? m.In(dvar.view()) : Tensor{}},
                            Tensor{},
                            {gv[0], gv[1], gv[2], gv[3], gv[4], gv[5], gv[6], gv[7], gv[8]});
  ASSERT_TRUE(s.ok()) << s.message();
  SSMKIT_CUDA_OK(m.CopyBack());

  EXPECT_LE(RelativeError(out.ToDouble(), out_ref), kForwardBound);
  EXPECT_LE(RelativeError(fin.ToDouble(), fin_ref), kForwardBound);
  if (c.cu) EXPECT_LE(RelativeError(var.ToDouble(), var_ref), kForwardBound);

  std::array<std::vector<double>, 9> want;
  for (int i = 0; i < 9; ++i) want[i].resize(g[i].numel());
  ref::SelectiveScanBackward(
      shape, rin, dout_d.data(), dfin_d.data(),
      {want[0].data(), want[1].data(), want[2].data(), want[3].data(), want[4].data(),
       want[5].data(), want[6].data(), want[7].data(), want[8].data()},
      c.cu ? dvar_d.data() : nullptr);
  const char* names[] = {"du", "ddelta", "dA", "dB", "dC", "dD", "dz", "ddelta_bias", "dh0"};
  for (int i = 0; i < 9; ++i)
    EXPECT_LE(RelativeError(g[i].ToDouble(), want[i]), kGradBound) << names[i];
}

TEST(VarlenGpu, ScanCuSeqlens) {
  SSMKIT_REQUIRE_GPU();
  ForEachVariant({&kScanVariants, &kScanBackwardVariants}, [&] { CheckScan({}, FreshSeed()); });
}

TEST(VarlenGpu, ScanCuSeqlensEightStatesPerLane) {
  SSMKIT_REQUIRE_GPU();
  ForEachVariant({&kScanVariants, &kScanBackwardVariants}, [&] {
    PackedScan c;
    c.N = 130;
    c.D = 12;
    CheckScan(c, FreshSeed());
  });
}

TEST(VarlenGpu, ScanSeqIdxTwoRows) {
  SSMKIT_REQUIRE_GPU();
  ForEachVariant({&kScanVariants, &kScanBackwardVariants}, [&] {
    PackedScan c;
    c.cu = false;
    c.B = 2;
    CheckScan(c, FreshSeed());
  });
}

TEST(VarlenGpu, Conv1dSeqIdx) {
  SSMKIT_REQUIRE_GPU();
  ForEachVariant({&kConv1dVariants, &kConv1dBackwardVariants}, [&] {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(SeedTrace(seed));
    Rng rng(seed);
    const int64_t B = 2, D = 5, K = 4;
    const std::vector<int64_t> lengths = {2, 1, 9, 3, 600};  // the last past one block tile
    std::vector<int32_t> seq_v;
    for (int64_t b = 0; b < B; ++b)
      for (size_t k = 0; k < lengths.size(); ++k)
        for (int64_t l = 0; l < lengths[k]; ++l) seq_v.push_back(int32_t(k));
    const int64_t L = static_cast<int64_t>(seq_v.size()) / B;
    HostTensor x({B, D, L}, DType::kF32), w({D, K}, DType::kF32), bias({D}, DType::kF32),
        h0({B, D, K - 1}, DType::kF32), seq({B, L}, DType::kI32);
    const auto x_d = x.Fill(rng.NormalVec(x.numel()));
    const auto w_d = w.Fill(rng.NormalVec(w.numel(), 0.5));
    const auto bias_d = bias.Fill(rng.NormalVec(D));
    const auto h0_d = h0.Fill(rng.NormalVec(h0.numel()));
    seq.Fill(std::vector<double>(seq_v.begin(), seq_v.end()));
    HostTensor dout({B, D, L}, DType::kF32), dfin({B, D, K - 1}, DType::kF32);
    const auto dout_d = dout.Fill(rng.NormalVec(dout.numel()));
    const auto dfin_d = dfin.Fill(rng.NormalVec(dfin.numel()));
    HostTensor out({B, D, L}, DType::kF32), fs({B, D, K - 1}, DType::kF32),
        dx({B, D, L}, DType::kF32), dw({D, K}, DType::kF32), db({D}, DType::kF32),
        dh0({B, D, K - 1}, DType::kF32);
    for (HostTensor* t : {&out, &fs, &dx, &dw, &db, &dh0}) t->Poison();
    Mirrors m;
    CausalConv1dInputs in;
    in.x = m.In(x.view());
    in.weight = m.In(w.view());
    in.bias = m.In(bias.view());
    in.initial_states = m.In(h0.view());
    in.activation = Conv1dActivation::kSilu;
    in.seq_idx = m.In(seq.view());
    ASSERT_TRUE(CausalConv1dForward(in, m.Out(out.view()), m.Out(fs.view())).ok());
    const Status s = CausalConv1dBackward(
        in, m.In(dout.view()), m.In(dfin.view()),
        {m.Out(dx.view()), m.Out(dw.view()), m.Out(db.view()), m.Out(dh0.view())});
    ASSERT_TRUE(s.ok()) << s.message();
    SSMKIT_CUDA_OK(m.CopyBack());
    const ref::Conv1dShape shape{B, D, L, K, true};
    const ref::Conv1dInputs rin{x_d.data(), w_d.data(), bias_d.data(), h0_d.data(), seq_v.data()};
    std::vector<double> ro(B * D * L), rf(B * D * (K - 1)), rdx(B * D * L), rdw(D * K), rdb(D),
        rdh0(B * D * (K - 1));
    ref::CausalConv1dForward(shape, rin, ro.data(), rf.data());
    ref::CausalConv1dBackward(shape, rin, dout_d.data(), dfin_d.data(),
                              {rdx.data(), rdw.data(), rdb.data(), rdh0.data()});
    EXPECT_LE(RelativeError(out.ToDouble(), ro), 1e-5);
    EXPECT_LE(RelativeError(fs.ToDouble(), rf), 1e-5);
    EXPECT_LE(RelativeError(dx.ToDouble(), rdx), 1e-5);
    EXPECT_LE(RelativeError(dw.ToDouble(), rdw), 1e-5);
    EXPECT_LE(RelativeError(db.ToDouble(), rdb), 1e-5);
    EXPECT_LE(RelativeError(dh0.ToDouble(), rdh0), 1e-5);
  });
}

}  // namespace
}  // namespace ssmkit::testing
