// Packed sequences given by cu_seqlens in the SSD scan (mamba_chunk_scan_combined with
// cu_seqlens and return_varlen_states), with per-sequence initial states, forward and
// backward, both algorithms, on fresh random inputs with poisoned outputs:
//   - the property test: a packed batch of S sequences of different lengths (1, and lengths
//     that are multiples of no chunk size) equals each sequence run alone: out, varlen_states,
//     final_states and every gradient;
//   - the packed call against the fp64 oracle (which packs on its own), and against the same
//     batch packed by seq_idx (where that is the same function: no initial states);
//   - the oracle's gradients and the fast ones against central finite differences.
// Errors are ||got - want|| / ||want||.
#include <array>
#include <cctype>
#include <ostream>
#include <string>
#include <vector>

#include "ssd_fixture.hpp"
#include "varlen_test_util.hpp"

namespace ssmkit::testing {
namespace {

// Packed against alone: each sequence runs through the same kernel calls either way; only
// the sums of dA, dD and ddt_bias over the sequences are added in another order.
constexpr double kPackedAloneBound = 1e-5;
// Against the fp64 oracle, f32 (as tests/ssd_test.cpp, ssd_grad_test.cpp).
constexpr double kOracleBound = 1e-4;
constexpr double kOracleFdBound = 2e-8;
constexpr double kFastFdBound = 1e-4;

constexpr SsdAlgorithm kAlgorithms[] = {SsdAlgorithm::kSequential, SsdAlgorithm::kChunked};

// Positions [l0, l0 + len) of a (1, L, ...) tensor.
Tensor Slice(const Tensor& t, int64_t l0, int64_t len) { return Narrow(t, 1, l0, len); }

struct VarlenCase {
  std::vector<int64_t> lengths = {1, 9, 37, 2, 64, 1, 21};
  bool h0_per_sequence = true;  // else (1, H, P, N): the first sequence's
  bool with_h0 = true;
  bool d_per_channel = false;
  std::string Name() const {
    std::string s = "S" + std::to_string(lengths.size());
    if (with_h0) s += h0_per_sequence ? "_h0_per_sequence" : "_h0_first";
    if (d_per_channel) s += "_D_HP";
    return s;
  }
};

// gtest prints a parameter with this (its bytes otherwise).
void PrintTo(const VarlenCase& c, std::ostream* os) { *os << c.Name(); }

struct VarlenProblem {
  VarlenCase vc;
  std::vector<int64_t> offsets;
  SsdProblem prob;
  int64_t S = 0;
  HostTensor h0, cu, seq_idx;
  std::vector<double> h0_d;
  std::vector<int64_t> cu_v;
  std::vector<int32_t> seq_idx_v;

  static SsdCase MakeCase(const VarlenCase& vc) {
    SsdCase c;
    c.batch = 1;
    c.seqlen = 0;
    for (int64_t len : vc.lengths) c.seqlen += len;
    c.nheads = 4;
    c.headdim = 6;
    c.ngroups = 2;
    c.dstate = 5;
    c.has_h0 = false;
    c.d_per_channel = vc.d_per_channel;
    return c;
  }

  VarlenProblem(const VarlenCase& c, Rng& rng) : vc(c), prob(MakeCase(c), rng) {
    S = static_cast<int64_t>(vc.lengths.size());
    offsets.assign(1, 0);
    for (int64_t len : vc.lengths) offsets.push_back(offsets.back() + len);
    cu_v = offsets;
    cu = HostTensor({S + 1}, DType::kI32);
    cu.Fill(std::vector<double>(cu_v.begin(), cu_v.end()));
    seq_idx = HostTensor({1, offsets.back()}, DType::kI32);
    for (int64_t k = 0; k < S; ++k)
      for (int64_t l = offsets[k]; l < offsets[k + 1]; ++l) seq_idx_v.push_back(int32_t(k));
    seq_idx.Fill(std::vector<double>(seq_idx_v.begin(), seq_idx_v.end()));
    if (vc.with_h0) {
      const SsdCase& sc = prob.c;
      h0 = HostTensor({H0Rows(), sc.nheads, sc.headdim, sc.dstate}, DType::kF32);
      h0_d = h0.Fill(rng.NormalVec(h0.numel()));
    }
  }

  int64_t H0Rows() const { return vc.h0_per_sequence ? S : 1; }
  std::vector<int64_t> StateShape() const {
    return {S, prob.c.nheads, prob.c.headdim, prob.c.dstate};
  }

  SsdInputs Inputs() {
    SsdInputs in = prob.Inputs();
    in.cu_seqlens = cu.view();
    in.seq_idx = seq_idx.view();  // mamba_ssm's Mamba2 passes both; they must agree
    if (vc.with_h0) in.initial_states = h0.view();
    return in;
  }

  SsdInputs AloneInputs(int64_t k) {
    SsdInputs full = prob.Inputs(), in = full;
    const int64_t l0 = offsets[k], len = offsets[k + 1] - l0;
    in.x = Slice(full.x, l0, len);
    in.dt = Slice(full.dt, l0, len);
    in.B = Slice(full.B, l0, len);
    in.C = Slice(full.C, l0, len);
    in.z = Slice(full.z, l0, len);
    if (vc.with_h0 && (vc.h0_per_sequence || k == 0))
      in.initial_states = Row(h0.view(), vc.h0_per_sequence ? k : 0);
    return in;
  }

  ref::SsdShape Shape() const {
    ref::SsdShape s = prob.Shape();
    s.nseqs = S;
    s.h0_per_sequence = vc.with_h0 && vc.h0_per_sequence;
    return s;
  }
  ref::SsdInputs RefInputs() const {
    ref::SsdInputs in = prob.RefInputs();
    in.h0 = vc.with_h0 ? h0_d.data() : nullptr;
    in.cu_seqlens = cu_v.data();
    return in;
  }
};

constexpr int kNumGrads = kNumSsdGrads;

// Every gradient, poisoned, shaped like its input (none for an absent input).
struct GradTensors {
  std::array<HostTensor, kNumGrads> t;
  explicit GradTensors(VarlenProblem& vp) {
    const SsdInputs in = vp.Inputs();
    for (int i = 0; i < kNumGrads; ++i) {
      const Tensor& input = in.*SsdTensors::grads[i].input;
      if (!input.defined()) continue;
      t[i] = HostTensor(std::vector<int64_t>(input.shape.begin(), input.shape.begin() + input.rank),
                        input.dtype);
      t[i].Poison();
    }
  }
  SsdGrads Views() {
    Tensor views[kNumGrads];
    for (int i = 0; i < kNumGrads; ++i) {
      if (t[i].numel()) views[i] = t[i].view();
    }
    return StructFromList(SsdTensors::grads, views);
  }
};

struct OutputGrads {
  HostTensor dout, dfinal, dvarlen;
  std::vector<double> dout_d, dfinal_d, dvarlen_d;
  OutputGrads(VarlenProblem& vp, Rng& rng) {
    dout = HostTensor(vp.prob.SeqShape(), DType::kF32);
    dout_d = dout.Fill(rng.NormalVec(dout.numel()));
    dfinal = HostTensor(vp.prob.StateShape(), DType::kF32);
    dfinal_d = dfinal.Fill(rng.NormalVec(dfinal.numel()));
    dvarlen = HostTensor(vp.StateShape(), DType::kF32);
    dvarlen_d = dvarlen.Fill(rng.NormalVec(dvarlen.numel()));
  }
};

struct Forward {
  HostTensor out, final_states, varlen;
  explicit Forward(VarlenProblem& vp)
      : out(vp.prob.SeqShape(), DType::kF32),
        final_states(vp.prob.StateShape(), DType::kF32),
        varlen(vp.StateShape(), DType::kF32) {
    out.Poison();
    final_states.Poison();
    varlen.Poison();
  }
};

class SsdVarlen : public ::testing::TestWithParam<VarlenCase> {};

TEST_P(SsdVarlen, PackedEqualsEachSequenceAlone) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  VarlenProblem vp(GetParam(), rng);
  OutputGrads og(vp, rng);
  const int64_t state = vp.prob.c.nheads * vp.prob.c.headdim * vp.prob.c.dstate;
  for (SsdAlgorithm algorithm : kAlgorithms) {
    for (int64_t chunk : {int64_t{0}, int64_t{16}}) {
      SCOPED_TRACE(std::string(SsdAlgorithmName(algorithm)) + " chunk_size " +
                   std::to_string(chunk));
      SsdOptions options;
      options.algorithm = algorithm;
      options.chunk_size = chunk;
      // Forward.
      Forward packed(vp), alone(vp);
      Status s = SsdForward(
          vp.Inputs(),
          SsdOutputs{packed.out.view(), packed.final_states.view(), packed.varlen.view()}, options);
      ASSERT_TRUE(s.ok()) << s.message();
      for (int64_t k = 0; k < vp.S; ++k) {
        const int64_t l0 = vp.offsets[k], len = vp.offsets[k + 1] - l0;
        s = SsdForward(vp.AloneInputs(k), Slice(alone.out.view(), l0, len),
                       Row(alone.varlen.view(), k), options);
        ASSERT_TRUE(s.ok()) << s.message();
      }
      const std::vector<double> varlen = alone.varlen.ToDouble();
      EXPECT_LE(RelativeError(packed.out.ToDouble(), alone.out.ToDouble()), kPackedAloneBound);
      EXPECT_LE(RelativeError(packed.varlen.ToDouble(), varlen), kPackedAloneBound);
      EXPECT_LE(RelativeError(packed.final_states.ToDouble(),
                              std::vector<double>(varlen.end() - state, varlen.end())),
                kPackedAloneBound);

      // Backward.
      GradTensors pg(vp), ag(vp);
      s = SsdBackward(vp.Inputs(),
                      SsdOutputGrads{og.dout.view(), og.dfinal.view(), og.dvarlen.view()},
                      pg.Views(), options);
      ASSERT_TRUE(s.ok()) << s.message();
      std::array<std::vector<double>, kNumGrads> sums;  // dA, dD, ddt_bias over the sequences
      for (int i : {2, 5, 7}) sums[i].assign(ag.t[i].numel(), 0.0);
      for (int64_t k = 0; k < vp.S; ++k) {
        const int64_t l0 = vp.offsets[k], len = vp.offsets[k + 1] - l0;
        const SsdInputs in = vp.AloneInputs(k);
        std::array<HostTensor, kNumGrads> part;
        SsdGrads g;
        g.dx = Slice(ag.t[0].view(), l0, len);
        g.ddt = Slice(ag.t[1].view(), l0, len);
        g.dB = Slice(ag.t[3].view(), l0, len);
        g.dC = Slice(ag.t[4].view(), l0, len);
        g.dz = Slice(ag.t[6].view(), l0, len);
        Tensor* summed[] = {&g.dA, &g.dD, &g.ddt_bias};
        const int index[] = {2, 5, 7};
        for (int j = 0; j < 3; ++j) {
          const Tensor full = ag.t[index[j]].view();
          part[index[j]] =
              HostTensor(std::vector<int64_t>(full.shape.begin(), full.shape.begin() + full.rank),
                         DType::kF32);
          *summed[j] = part[index[j]].view();
        }
        if (in.initial_states.defined())
          g.dinitial_states = Row(ag.t[8].view(), vp.vc.h0_per_sequence ? k : 0);
        std::vector<double> dlast(og.dvarlen_d.begin() + k * state,
                                  og.dvarlen_d.begin() + (k + 1) * state);
        if (k == vp.S - 1) {
          for (int64_t i = 0; i < state; ++i) dlast[i] += og.dfinal_d[i];
        }
        HostTensor dlast_t(vp.prob.StateShape(), DType::kF32);
        dlast_t.Fill(dlast);
        s = SsdBackward(in, Slice(og.dout.view(), l0, len), dlast_t.view(), g, options);
        ASSERT_TRUE(s.ok()) << s.message();
        for (int i : {2, 5, 7}) {
          const std::vector<double> v = part[i].ToDouble();
          for (size_t j = 0; j < v.size(); ++j) sums[i][j] += v[j];
        }
      }
      for (int i = 0; i < kNumGrads; ++i) {
        if (!pg.t[i].numel()) continue;
        const std::vector<double> want = sums[i].empty() ? ag.t[i].ToDouble() : sums[i];
        EXPECT_LE(RelativeError(pg.t[i].ToDouble(), want), kPackedAloneBound) << SsdGradName(i);
      }
    }
  }
}

TEST_P(SsdVarlen, PackedMatchesTheOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  VarlenProblem vp(GetParam(), rng);
  OutputGrads og(vp, rng);
  std::vector<double> out(vp.prob.SeqSize()), fin(vp.prob.StateSize()),
      var(vp.S * vp.prob.StateSize());
  ref::SsdForward(vp.Shape(), vp.RefInputs(), out.data(), fin.data(), var.data());
  std::array<std::vector<double>, kNumGrads> want;
  GradTensors shapes(vp);
  for (int i = 0; i < kNumGrads; ++i) want[i].resize(shapes.t[i].numel());
  auto ptr = [](std::vector<double>& v) { return v.empty() ? nullptr : v.data(); };
  ref::SsdBackward(vp.Shape(), vp.RefInputs(), og.dout_d.data(), og.dfinal_d.data(),
                   {ptr(want[0]), ptr(want[1]), ptr(want[2]), ptr(want[3]), ptr(want[4]),
                    ptr(want[5]), ptr(want[6]), ptr(want[7]), ptr(want[8])},
                   og.dvarlen_d.data());
  for (SsdAlgorithm algorithm : kAlgorithms) {
    SCOPED_TRACE(SsdAlgorithmName(algorithm));
    SsdOptions options;
    options.algorithm = algorithm;
    options.chunk_size = 16;
    Forward f(vp);
    Status s = SsdForward(
        vp.Inputs(), SsdOutputs{f.out.view(), f.final_states.view(), f.varlen.view()}, options);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_LE(RelativeError(f.out.ToDouble(), out), kOracleBound);
    EXPECT_LE(RelativeError(f.final_states.ToDouble(), fin), kOracleBound);
    EXPECT_LE(RelativeError(f.varlen.ToDouble(), var), kOracleBound);
    GradTensors g(vp);
    s = SsdBackward(vp.Inputs(),
                    SsdOutputGrads{og.dout.view(), og.dfinal.view(), og.dvarlen.view()}, g.Views(),
                    options);
    ASSERT_TRUE(s.ok()) << s.message();
    for (int i = 0; i < kNumGrads; ++i) {
      if (want[i].empty()) continue;
      EXPECT_LE(RelativeError(g.t[i].ToDouble(), want[i]), kOracleBound) << SsdGradName(i);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, SsdVarlen,
                         ::testing::Values(VarlenCase{}, VarlenCase{{1, 9, 37, 2}, false},
                                           VarlenCase{{40, 1, 23}, true, false, true},
                                           VarlenCase{{1}}),
                         [](const ::testing::TestParamInfo<VarlenCase>& info) {
                           return std::to_string(info.index) + "_" + info.param.Name();
                         });

// Without initial states, cu_seqlens and seq_idx pack the same function: the kernels' own
// resets (seq_idx) against one call per sequence (cu_seqlens).
TEST(SsdVarlenSeqIdx, CuSeqlensEqualsSeqIdx) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  VarlenCase vc;
  vc.with_h0 = false;
  VarlenProblem vp(vc, rng);
  for (SsdAlgorithm algorithm : kAlgorithms) {
    SCOPED_TRACE(SsdAlgorithmName(algorithm));
    SsdOptions options;
    options.algorithm = algorithm;
    options.chunk_size = 16;
    Forward by_cu(vp), by_seq_idx(vp);
    SsdInputs in = vp.Inputs();
    ASSERT_TRUE(SsdForward(in, by_cu.out.view(), by_cu.final_states.view(), options).ok());
    in.cu_seqlens = Tensor{};
    ASSERT_TRUE(
        SsdForward(in, by_seq_idx.out.view(), by_seq_idx.final_states.view(), options).ok());
    EXPECT_LE(RelativeError(by_cu.out.ToDouble(), by_seq_idx.out.ToDouble()), kOracleBound);
    EXPECT_LE(RelativeError(by_cu.final_states.ToDouble(), by_seq_idx.final_states.ToDouble()),
              kOracleBound);
  }
}

// The oracle's gradients, and the fast ones, against central finite differences of the loss
// sum(out w) + sum(final wf) + sum(varlen wv) on a small packed problem.
TEST(SsdVarlenGrad, AgainstFiniteDifferences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  VarlenCase vc;
  vc.lengths = {3, 1, 4};
  VarlenProblem vp(vc, rng);
  OutputGrads og(vp, rng);
  auto loss = [&] {
    std::vector<double> out(vp.prob.SeqSize()), fin(vp.prob.StateSize()),
        var(vp.S * vp.prob.StateSize());
    ref::SsdForward(vp.Shape(), vp.RefInputs(), out.data(), fin.data(), var.data());
    double sum = 0;
    for (size_t i = 0; i < out.size(); ++i) sum += out[i] * og.dout_d[i];
    for (size_t i = 0; i < fin.size(); ++i) sum += fin[i] * og.dfinal_d[i];
    for (size_t i = 0; i < var.size(); ++i) sum += var[i] * og.dvarlen_d[i];
    return sum;
  };
  SsdProblem& p = vp.prob;
  std::array<std::vector<double>*, kNumGrads> inputs = {
      &p.x_d, &p.dt_d, &p.A_d, &p.B_d, &p.C_d, &p.D_d, &p.z_d, &p.dt_bias_d, &vp.h0_d};
  std::array<std::vector<double>, kNumGrads> oracle;
  for (int i = 0; i < kNumGrads; ++i) oracle[i].resize(inputs[i]->size());
  ref::SsdBackward(
      vp.Shape(), vp.RefInputs(), og.dout_d.data(), og.dfinal_d.data(),
      {oracle[0].data(), oracle[1].data(), oracle[2].data(), oracle[3].data(), oracle[4].data(),
       oracle[5].data(), oracle[6].data(), oracle[7].data(), oracle[8].data()},
      og.dvarlen_d.data());
  std::array<std::vector<double>, kNumGrads> fd;
  for (int i = 0; i < kNumGrads; ++i) {
    std::vector<double>& x = *inputs[i];
    fd[i].resize(x.size());
    for (size_t j = 0; j < x.size(); ++j) {
      fd[i][j] =
          (4.0 * CentralDifference(x, j, 1e-4, loss) - CentralDifference(x, j, 2e-4, loss)) / 3.0;
    }
    EXPECT_LE(RelativeError(oracle[i], fd[i]), kOracleFdBound) << SsdGradName(i);
  }
  for (SsdAlgorithm algorithm : kAlgorithms) {
    SCOPED_TRACE(SsdAlgorithmName(algorithm));
    SsdOptions options;
    options.algorithm = algorithm;
    options.chunk_size = 2;
    GradTensors fast(vp);
    const Status s = SsdBackward(
        vp.Inputs(), SsdOutputGrads{og.dout.view(), og.dfinal.view(), og.dvarlen.view()},
        fast.Views(), options);
    ASSERT_TRUE(s.ok()) << s.message();
    for (int i = 0; i < kNumGrads; ++i)
      EXPECT_LE(RelativeError(fast.t[i].ToDouble(), fd[i]), kFastFdBound) << SsdGradName(i);
  }
}

}  // namespace
}  // namespace ssmkit::testing
