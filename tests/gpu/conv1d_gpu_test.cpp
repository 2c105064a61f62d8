// causal_conv1d (forward, backward) and causal_conv1d_update on the GPU against the fp64
// oracle: K from 2 to 8, bias and initial_states on and off, silu and none, L shorter than
// K - 1, L past one block tile, f32 and bf16, L = 2^17, updates of T = 1 and T = 3 steps with
// S > K - 1 and out aliasing x. Fresh random inputs, outputs poisoned. Bounds: f32 1e-5,
// bf16 1e-2; held on an H100 (2026-11-23).
#include "gpu_test_util.hpp"
#include "ref/conv1d_ref.hpp"
#include "ssmkit/conv1d.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

struct ConvCase {
  int64_t batch = 2, dim = 5, seqlen = 37, width = 4;
  bool bias = true, init = true, silu = true;
  DType dtype = DType::kF32;
  std::string Name() const {
    return "B" + std::to_string(batch) + " D" + std::to_string(dim) + " L" +
           std::to_string(seqlen) + " K" + std::to_string(width) + (bias ? " bias" : "") +
           (init ? " init" : "") + (silu ? " silu" : "") + " " + DTypeName(dtype);
  }
};

double Bound(DType dtype) { return dtype == DType::kF32 ? 1e-5 : 1e-2; }

void Check(const ConvCase& c, uint64_t seed) {
  SCOPED_TRACE(c.Name());
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const int64_t B = c.batch, D = c.dim, L = c.seqlen, K = c.width;
  HostTensor x({B, D, L}, c.dtype), w({D, K}, DType::kF32), bias({D}, DType::kF32);
  HostTensor h0({B, D, K - 1}, c.dtype), dout({B, D, L}, c.dtype),
      dfinal({B, D, K - 1}, DType::kF32);
  const auto x_d = x.Fill(rng.NormalVec(x.numel()));
  const auto w_d = w.Fill(rng.NormalVec(w.numel(), 0.5));
  const auto bias_d = bias.Fill(rng.NormalVec(D));
  const auto h0_d = h0.Fill(rng.NormalVec(h0.numel()));
  const auto dout_d = dout.Fill(rng.NormalVec(dout.numel()));
  const auto dfinal_d = dfinal.Fill(rng.NormalVec(dfinal.numel()));
  HostTensor out({B, D, L}, c.dtype), fs({B, D, K - 1}, DType::kF32);
  HostTensor dx({B, D, L}, c.dtype), dw({D, K}, DType::kF32), db({D}, DType::kF32),
      dh0({B, D, K - 1}, c.dtype);
  for (HostTensor* t : {&out, &fs, &dx, &dw, &db, &dh0}) t->Poison();

  Mirrors m;
  CausalConv1dInputs in;
  in.x = m.In(x.view());
  in.weight = m.In(w.view());
  if (c.bias) in.bias = m.In(bias.view());
  if (c.init) in.initial_states = m.In(h0.view());
  in.activation = c.silu ? Conv1dActivation::kSilu : Conv1dActivation::kNone;
  ASSERT_TRUE(CausalConv1dForward(in, m.Out(out.view()), m.Out(fs.view())).ok());
  CausalConv1dGrads g;
  g.dx = m.Out(dx.view());
  g.dweight = m.Out(dw.view());
  if (c.bias) g.dbias = m.Out(db.view());
  if (c.init) g.dinitial_states = m.Out(dh0.view());
  const Status s = CausalConv1dBackward(in, m.In(dout.view()), m.In(dfinal.view()), g);
  ASSERT_TRUE(s.ok()) << s.message();
  SSMKIT_CUDA_OK(m.CopyBack());

  ref::Conv1dShape rs{B, D, L, K, c.silu};
  ref::Conv1dInputs ri{x_d.data(), w_d.data(), c.bias ? bias_d.data() : nullptr,
                       c.init ? h0_d.data() : nullptr};
  std::vector<double> r_out(x.numel()), r_fs(fs.numel()), r_dx(x.numel()), r_dw(w.numel()), r_db(D),
      r_dh0(h0.numel());
  ref::CausalConv1dForward(rs, ri, r_out.data(), r_fs.data());
  ref::Conv1dGrads rg{r_dx.data(), r_dw.data(), c.bias ? r_db.data() : nullptr,
                      c.init ? r_dh0.data() : nullptr};
  ref::CausalConv1dBackward(rs, ri, dout_d.data(), dfinal_d.data(), rg);
  EXPECT_LE(RelativeError(out.ToDouble(), r_out), Bound(c.dtype));
  EXPECT_LE(RelativeError(fs.ToDouble(), r_fs), 1e-6);  // copies of inputs
  EXPECT_LE(RelativeError(dx.ToDouble(), r_dx), Bound(c.dtype));
  EXPECT_LE(RelativeError(dw.ToDouble(), r_dw), 1e-4);
  if (c.bias) EXPECT_LE(RelativeError(db.ToDouble(), r_db), 1e-4);
  if (c.init) EXPECT_LE(RelativeError(dh0.ToDouble(), r_dh0), Bound(c.dtype));
}

TEST(Conv1dGpu, ForwardAndBackwardMatchTheOracle) {
  SSMKIT_REQUIRE_GPU();
  ForEachVariant({&kConv1dVariants, &kConv1dBackwardVariants}, [&] {
    const uint64_t seed = FreshSeed();
    for (int64_t k = 2; k <= 8; ++k) {
      ConvCase c;
      c.width = k;
      Check(c, seed);
    }
    ConvCase bare;
    bare.bias = bare.init = bare.silu = false;
    Check(bare, seed);
    ConvCase shorter;  // L < K - 1: final_states reach into initial_states
    shorter.seqlen = 2;
    shorter.width = 6;
    Check(shorter, seed);
    ConvCase tiles;  // several tiles of 512 positions
    tiles.seqlen = 1500;
    tiles.dim = 64;
    Check(tiles, seed);
    ConvCase bf16 = tiles;
    bf16.dtype = DType::kBF16;
    Check(bf16, seed);
    ConvCase long_seq;
    long_seq.batch = 1;
    long_seq.dim = 8;
    long_seq.seqlen = 1 << 17;
    Check(long_seq, seed);
  });
}

// Cases the "unrolled" kernels cover (rows 16-byte aligned: L a multiple of 8), forward and
// backward, with the variants required so they prove those kernels ran: every width, L shorter
// than K - 1 and than a vector, L not a multiple of a vector or a block tile, f32 / bf16,
// options off, long L.
TEST(Conv1dGpu, UnrolledKernelsCoverAlignedRows) {
  SSMKIT_REQUIRE_GPU();
  ScopedVariant forward("SSMKIT_CUDA_CONV1D", "unrolled!");
  ScopedVariant backward("SSMKIT_CUDA_CONV1D_BWD", "unrolled!");
  const uint64_t seed = FreshSeed();
  for (int64_t k = 2; k <= 8; ++k) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      ConvCase c;
      c.width = k;
      c.seqlen = 40;
      c.dtype = dtype;
      Check(c, seed);
    }
  }
  ConvCase bare;
  bare.seqlen = 40;
  bare.bias = bare.init = bare.silu = false;
  Check(bare, seed);
  ConvCase shorter;  // L < K - 1 and L < one vector
  shorter.seqlen = 8;
  shorter.width = 8;
  shorter.dtype = DType::kBF16;
  Check(shorter, seed);
  ConvCase f32_short = shorter;
  f32_short.seqlen = 4;
  f32_short.dtype = DType::kF32;
  Check(f32_short, seed);
  ConvCase tiles;  // several tiles of 128 vectors, the last one partial
  tiles.seqlen = 2056;
  tiles.dim = 64;
  tiles.dtype = DType::kBF16;
  Check(tiles, seed);
  ConvCase long_seq;
  long_seq.batch = 1;
  long_seq.dim = 8;
  long_seq.seqlen = 1 << 17;
  Check(long_seq, seed);
}

TEST(Conv1dGpu, UpdateMatchesTheOracle) {
  SSMKIT_REQUIRE_GPU();
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (int64_t T : {1, 3}) {
    for (int64_t S : {3, 4, 7}) {
      for (bool alias : {false, true}) {
        Rng rng(seed + T * 100 + S * 10 + alias);
        const int64_t B = 3, D = 70, K = 4;
        HostTensor x({B, D, T}, DType::kF32), w({D, K}, DType::kF32), bias({D}, DType::kF32);
        HostTensor state({B, D, S}, DType::kF32), out({B, D, T}, DType::kF32);
        const auto x_d = x.Fill(rng.NormalVec(x.numel()));
        const auto w_d = w.Fill(rng.NormalVec(w.numel()));
        const auto bias_d = bias.Fill(rng.NormalVec(D));
        std::vector<double> state_d = state.Fill(rng.NormalVec(state.numel()));
        out.Poison();
        Mirrors m;
        CausalConv1dUpdateInputs in;
        in.x = alias ? m.Out(x.view()) : m.In(x.view());
        in.weight = m.In(w.view());
        in.bias = m.In(bias.view());
        in.activation = Conv1dActivation::kSilu;
        const Tensor out_t = alias ? in.x : m.Out(out.view());
        const Status s = CausalConv1dUpdate(in, m.Out(state.view()), out_t);
        ASSERT_TRUE(s.ok()) << s.message();
        SSMKIT_CUDA_OK(m.CopyBack());
        std::vector<double> r_out(x.numel());
        ref::Conv1dShape rs{B, D, T, K, true};
        ref::CausalConv1dUpdate(rs, S, x_d.data(), w_d.data(), bias_d.data(), state_d.data(),
                                r_out.data());
        EXPECT_LE(RelativeError((alias ? x : out).ToDouble(), r_out), 1e-5)
            << "T=" << T << " S=" << S << " alias=" << alias;
        EXPECT_LE(RelativeError(state.ToDouble(), state_d), 1e-7);
      }
    }
  }
}

}  // namespace
}  // namespace ssmkit::testing
