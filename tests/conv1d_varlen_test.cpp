// Causal conv1d over packed sequences (seq_idx), forward and backward, on fresh random inputs
// with poisoned outputs:
//   - the property test: a packed batch (two rows, sequences of lengths 1, below K - 1, and
//     longer, two of them past two vectors of 16) equals each sequence run alone, the first of a
//     row from the row's initial states and the others from zeros: out, final_states and every
//     gradient;
//   - the packed call against the fp64 oracle, which masks on its own;
//   - the oracle's gradients and the fast ones against central finite differences.
// Errors are ||got - want|| / ||want||.
#include <array>
#include <string>
#include <vector>

#include "ref/conv1d_ref.hpp"
#include "ssmkit/conv1d.hpp"
#include "test_util.hpp"
#include "varlen_test_util.hpp"

namespace ssmkit::testing {
namespace {

constexpr double kPackedAloneBound = 1e-6;  // the same sums either way: measured 0
constexpr double kOracleBound = 1e-5;
constexpr double kOracleFdBound = 1e-8;
constexpr double kFastFdBound = 1e-4;

// Positions [l0, l0 + len) of batch row b of a (B, D, L) tensor.
Tensor Slice(const Tensor& t, int64_t b, int64_t l0, int64_t len) {
  return Narrow(Row(t, b), t.rank - 1, l0, len);
}

struct Packed {
  int64_t B = 2, D = 5, K = 4;
  // below and above K - 1, and past two AVX-512 vectors (the forward reads those in place)
  std::vector<int64_t> lengths = {2, 1, 45, 9, 3, 17, 38};
  std::vector<int64_t> offsets;
  int64_t L = 0;
  HostTensor x, weight, bias, h0, seq_idx;
  std::vector<double> xd, wd, bd, h0d;
  std::vector<int32_t> seq_idx_v;

  Packed(Rng& rng, int64_t K_ = 4, std::vector<int64_t> lens = {2, 1, 45, 9, 3, 17, 38}) : K(K_) {
    lengths = std::move(lens);
    offsets.assign(1, 0);
    for (int64_t len : lengths) offsets.push_back(offsets.back() + len);
    L = offsets.back();
    x = HostTensor({B, D, L}, DType::kF32);
    xd = x.Fill(rng.NormalVec(B * D * L));
    weight = HostTensor({D, K}, DType::kF32);
    wd = weight.Fill(rng.UniformVec(D * K, -0.8, 0.8));
    bias = HostTensor({D}, DType::kF32);
    bd = bias.Fill(rng.UniformVec(D, -0.5, 0.5));
    h0 = HostTensor({B, D, K - 1}, DType::kF32);
    h0d = h0.Fill(rng.NormalVec(B * D * (K - 1)));
    seq_idx = HostTensor({B, L}, DType::kI32);
    for (int64_t b = 0; b < B; ++b) {
      for (size_t k = 0; k < lengths.size(); ++k) {
        for (int64_t l = offsets[k]; l < offsets[k + 1]; ++l)
          seq_idx_v.push_back(static_cast<int32_t>(2 * k + b));
      }
    }
    seq_idx.Fill(std::vector<double>(seq_idx_v.begin(), seq_idx_v.end()));
  }
  int64_t S() const { return static_cast<int64_t>(lengths.size()); }

  CausalConv1dInputs Inputs() {
    CausalConv1dInputs in;
    in.x = x.view();
    in.weight = weight.view();
    in.bias = bias.view();
    in.initial_states = h0.view();
    in.activation = Conv1dActivation::kSilu;
    in.seq_idx = seq_idx.view();
    return in;
  }
  CausalConv1dInputs Alone(int64_t b, int64_t k) {
    CausalConv1dInputs in = Inputs();
    in.seq_idx = Tensor{};
    in.x = Slice(x.view(), b, offsets[k], offsets[k + 1] - offsets[k]);
    in.initial_states = k == 0 ? Slice(h0.view(), b, 0, K - 1) : Tensor{};
    return in;
  }
  ref::Conv1dShape Shape() const { return {B, D, L, K, true}; }
  ref::Conv1dInputs RefInputs() const {
    return {xd.data(), wd.data(), bd.data(), h0d.data(), seq_idx_v.data()};
  }
};

TEST(Conv1dVarlen, PackedEqualsEachSequenceAlone) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  for (int64_t K : {2, 4, 8}) {
    SCOPED_TRACE("K = " + std::to_string(K));
    Packed p(rng, K);
    HostTensor out({p.B, p.D, p.L}, DType::kF32), fin({p.B, p.D, K - 1}, DType::kF32);
    HostTensor out_alone({p.B, p.D, p.L}, DType::kF32), fin_alone({p.B, p.D, K - 1}, DType::kF32);
    for (HostTensor* t : {&out, &fin, &out_alone, &fin_alone}) t->Poison();
    Status s = CausalConv1dForward(p.Inputs(), out.view(), fin.view());
    ASSERT_TRUE(s.ok()) << s.message();
    HostTensor dout({p.B, p.D, p.L}, DType::kF32), dfin({p.B, p.D, K - 1}, DType::kF32);
    dout.Fill(rng.NormalVec(dout.numel()));
    dfin.Fill(rng.NormalVec(dfin.numel()));
    HostTensor dx({p.B, p.D, p.L}, DType::kF32), dw({p.D, K}, DType::kF32), db({p.D}, DType::kF32),
        dh0({p.B, p.D, K - 1}, DType::kF32);
    HostTensor dx_alone({p.B, p.D, p.L}, DType::kF32), dh0_alone({p.B, p.D, K - 1}, DType::kF32);
    for (HostTensor* t : {&dx, &dw, &db, &dh0, &dx_alone, &dh0_alone}) t->Poison();
    s = CausalConv1dBackward(p.Inputs(), dout.view(), dfin.view(),
                             {dx.view(), dw.view(), db.view(), dh0.view()});
    ASSERT_TRUE(s.ok()) << s.message();
    std::vector<double> dw_sum(p.D * K, 0.0), db_sum(p.D, 0.0);
    for (int64_t b = 0; b < p.B; ++b) {
      for (int64_t k = 0; k < p.S(); ++k) {
        const int64_t l0 = p.offsets[k], len = p.lengths[k];
        const bool last = k == p.S() - 1;
        const Tensor fin_k = last ? Slice(fin_alone.view(), b, 0, K - 1) : Tensor{};
        s = CausalConv1dForward(p.Alone(b, k), Slice(out_alone.view(), b, l0, len), fin_k);
        ASSERT_TRUE(s.ok()) << s.message();
        HostTensor dw_k({p.D, K}, DType::kF32), db_k({p.D}, DType::kF32);
        const CausalConv1dGrads g{Slice(dx_alone.view(), b, l0, len), dw_k.view(), db_k.view(),
                                  k == 0 ? Slice(dh0_alone.view(), b, 0, K - 1) : Tensor{}};
        s = CausalConv1dBackward(p.Alone(b, k), Slice(dout.view(), b, l0, len),
                                 last ? Slice(dfin.view(), b, 0, K - 1) : Tensor{}, g);
        ASSERT_TRUE(s.ok()) << s.message();
        const std::vector<double> wk = dw_k.ToDouble(), bk = db_k.ToDouble();
        for (size_t i = 0; i < wk.size(); ++i) dw_sum[i] += wk[i];
        for (size_t i = 0; i < bk.size(); ++i) db_sum[i] += bk[i];
      }
    }
    EXPECT_LE(RelativeError(out.ToDouble(), out_alone.ToDouble()), kPackedAloneBound);
    EXPECT_LE(RelativeError(fin.ToDouble(), fin_alone.ToDouble()), kPackedAloneBound);
    EXPECT_LE(RelativeError(dx.ToDouble(), dx_alone.ToDouble()), kPackedAloneBound);
    EXPECT_LE(RelativeError(dh0.ToDouble(), dh0_alone.ToDouble()), kPackedAloneBound);
    EXPECT_LE(RelativeError(dw.ToDouble(), dw_sum), kOracleBound);
    EXPECT_LE(RelativeError(db.ToDouble(), db_sum), kOracleBound);

    // The oracle.
    std::vector<double> ro(p.B * p.D * p.L), rf(p.B * p.D * (K - 1));
    ref::CausalConv1dForward(p.Shape(), p.RefInputs(), ro.data(), rf.data());
    EXPECT_LE(RelativeError(out.ToDouble(), ro), kOracleBound);
    EXPECT_LE(RelativeError(fin.ToDouble(), rf), kOracleBound);
    std::vector<double> rdx(p.B * p.D * p.L), rdw(p.D * K), rdb(p.D), rdh0(p.B * p.D * (K - 1));
    ref::CausalConv1dBackward(p.Shape(), p.RefInputs(), dout.ToDouble().data(),
                              dfin.ToDouble().data(),
                              {rdx.data(), rdw.data(), rdb.data(), rdh0.data()});
    EXPECT_LE(RelativeError(dx.ToDouble(), rdx), kOracleBound);
    EXPECT_LE(RelativeError(dw.ToDouble(), rdw), kOracleBound);
    EXPECT_LE(RelativeError(db.ToDouble(), rdb), kOracleBound);
    EXPECT_LE(RelativeError(dh0.ToDouble(), rdh0), kOracleBound);
  }
}

TEST(Conv1dVarlen, GradientsAgainstFiniteDifferences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  Packed p(rng, 3, {1, 4, 2});
  HostTensor dout({p.B, p.D, p.L}, DType::kF32), dfin({p.B, p.D, 2}, DType::kF32);
  const std::vector<double> w = dout.Fill(rng.NormalVec(dout.numel()));
  const std::vector<double> wf = dfin.Fill(rng.NormalVec(dfin.numel()));
  auto loss = [&] {
    std::vector<double> o(p.B * p.D * p.L), f(p.B * p.D * 2);
    ref::CausalConv1dForward(p.Shape(), p.RefInputs(), o.data(), f.data());
    double sum = 0;
    for (size_t i = 0; i < o.size(); ++i) sum += o[i] * w[i];
    for (size_t i = 0; i < f.size(); ++i) sum += f[i] * wf[i];
    return sum;
  };
  std::array<std::vector<double>*, 4> inputs = {&p.xd, &p.wd, &p.bd, &p.h0d};
  std::array<std::vector<double>, 4> oracle;
  for (int i = 0; i < 4; ++i) oracle[i].resize(inputs[i]->size());
  ref::CausalConv1dBackward(
      p.Shape(), p.RefInputs(), w.data(), wf.data(),
      {oracle[0].data(), oracle[1].data(), oracle[2].data(), oracle[3].data()});
  HostTensor dx({p.B, p.D, p.L}, DType::kF32), dw({p.D, 3}, DType::kF32), db({p.D}, DType::kF32),
      dh0({p.B, p.D, 2}, DType::kF32);
  for (HostTensor* t : {&dx, &dw, &db, &dh0}) t->Poison();
  const Status s = CausalConv1dBackward(p.Inputs(), dout.view(), dfin.view(),
                                        {dx.view(), dw.view(), db.view(), dh0.view()});
  ASSERT_TRUE(s.ok()) << s.message();
  const std::array<std::vector<double>, 4> fast = {dx.ToDouble(), dw.ToDouble(), db.ToDouble(),
                                                   dh0.ToDouble()};
  const char* names[] = {"dx", "dweight", "dbias", "dinitial_states"};
  for (int i = 0; i < 4; ++i) {
    std::vector<double>& x = *inputs[i];
    std::vector<double> fd(x.size());
    for (size_t j = 0; j < x.size(); ++j) fd[j] = CentralDifference(x, j, 1e-6, loss);
    EXPECT_LE(RelativeError(oracle[i], fd), kOracleFdBound) << names[i];
    EXPECT_LE(RelativeError(fast[i], fd), kFastFdBound) << names[i];
  }
}

}  // namespace
}  // namespace ssmkit::testing
