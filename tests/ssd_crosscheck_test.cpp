// SSD cross-checks that need no oracle:
//  (a) with A a scalar per head, SSD is the Mamba-1 selective scan (include/ssmkit/
//      selective_scan.hpp), forward and backward, under this mapping (channel d = h * P + p):
//        u[b, d, l]       = x[b, l, h, p]            delta[b, d, l] = dt[b, l, h]
//        A_m1[d, n]       = A[h]                     B_m1[b, g, n, l] = B[b, l, g, n] (C alike)
//        D_m1[d]          = D[h] or D[h, p]          z_m1[b, d, l]  = z[b, l, h, p]
//        delta_bias[d]    = dt_bias[h]               initial_state[b, d, n] = initial_states[b, h,
//        p, n]
//      (groups agree: Mamba-1 channel d reads group d / (H P / G) = h / (H / G)); dt_limit at
//      its default, which with softplus never clamps. Gradients map back by summing over the
//      channels of a head: ddt[b, l, h] = sum_p ddelta[b, h P + p, l], dA[h] = sum_{p, n}
//      dA_m1[h P + p, n], ddt_bias[h] = sum_p ddelta_bias[h P + p], dD[h] = sum_p dD_m1.
//  (b) a packed batch with seq_idx equals its sequences run one by one;
//  (c) chunk sizes that do not divide L give the same result as ones that do.
#include <algorithm>
#include <string>
#include <vector>

#include "ssd_fixture.hpp"
#include "ssmkit/selective_scan.hpp"

namespace ssmkit::testing {
namespace {

const SsdAlgorithm kAlgorithms[] = {SsdAlgorithm::kSequential, SsdAlgorithm::kChunked};

// f32 tensors in the layout a call needs, from doubles.
HostTensor F32(std::vector<int64_t> shape, const std::vector<double>& values) {
  HostTensor t(std::move(shape), DType::kF32);
  t.Fill(values);
  return t;
}

// Every SSD gradient as doubles, from the fast backward.
struct Grads {
  std::vector<double> dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dh0;
};

Grads RunBackward(SsdProblem& prob, const std::vector<double>& dout_v,
                  const std::vector<double>* dfinal_v, const SsdOptions& options) {
  const SsdCase& c = prob.c;
  HostTensor dout = F32(prob.SeqShape(), dout_v);
  HostTensor dfinal = dfinal_v ? F32(prob.StateShape(), *dfinal_v) : HostTensor();
  HostTensor dx(prob.SeqShape(), DType::kF32), dz(prob.SeqShape(), DType::kF32);
  HostTensor ddt({c.batch, c.seqlen, c.nheads}, DType::kF32), dA({c.nheads}, DType::kF32);
  HostTensor dB({c.batch, c.seqlen, c.ngroups, c.dstate}, DType::kF32), dC = dB;
  HostTensor dD = c.d_per_channel ? HostTensor({c.nheads, c.headdim}, DType::kF32)
                                  : HostTensor({c.nheads}, DType::kF32);
  HostTensor ddt_bias({c.nheads}, DType::kF32), dh0(prob.StateShape(), DType::kF32);
  SsdGrads g;
  g.dx = dx.view();
  g.ddt = ddt.view();
  g.dA = dA.view();
  g.dB = dB.view();
  g.dC = dC.view();
  if (c.has_D) g.dD = dD.view();
  if (c.has_z) g.dz = dz.view();
  if (c.has_dt_bias) g.ddt_bias = ddt_bias.view();
  if (c.has_h0) g.dinitial_states = dh0.view();
  for (HostTensor* t : {&dx, &dz, &ddt, &dA, &dB, &dC, &dD, &ddt_bias, &dh0}) t->Poison();
  const Status s =
      SsdBackward(prob.Inputs(), dout.view(), dfinal_v ? dfinal.view() : Tensor{}, g, options);
  EXPECT_TRUE(s.ok()) << s.message();
  Grads r{
      dx.ToDouble(), ddt.ToDouble(), dA.ToDouble(), dB.ToDouble(), dC.ToDouble(), {}, {}, {}, {}};
  if (c.has_D) r.dD = dD.ToDouble();
  if (c.has_z) r.dz = dz.ToDouble();
  if (c.has_dt_bias) r.ddt_bias = ddt_bias.ToDouble();
  if (c.has_h0) r.dh0 = dh0.ToDouble();
  return r;
}

// dA and ddt_bias are per-head sums over B * L * P terms of both signs: two f32 summation
// orders (other chunk sizes, the sequential path) leave them ~1e-5 apart where every other
// gradient agrees to ~1e-6, so they get `sum_tol` (measured up to 1.9e-5 at chunk 95 vs 32).
void ExpectGradsClose(const Grads& got, const Grads& want, double tol, const std::string& what,
                      double sum_tol = 1e-4) {
  const std::vector<double>* g[] = {&got.dx, &got.ddt, &got.dA,       &got.dB, &got.dC,
                                    &got.dD, &got.dz,  &got.ddt_bias, &got.dh0};
  const std::vector<double>* w[] = {&want.dx, &want.ddt, &want.dA,       &want.dB, &want.dC,
                                    &want.dD, &want.dz,  &want.ddt_bias, &want.dh0};
  for (int k = 0; k < kNumSsdGrads; ++k) {
    if (g[k]->empty() && w[k]->empty()) continue;
    const bool per_head_sum = k == 2 || k == 7;
    EXPECT_LE(RelativeError(*g[k], *w[k]), per_head_sum ? std::max(tol, sum_tol) : tol)
        << what << ": " << SsdGradName(k);
  }
}

// (a) SSD == Mamba-1 selective scan with A a scalar per head.
TEST(SsdCrossCheck, EqualsSelectiveScanWithScalarA) {
  for (bool per_channel_D : {false, true}) {
    for (SsdAlgorithm algorithm : kAlgorithms) {
      const uint64_t seed = FreshSeed();
      SCOPED_TRACE(SeedTrace(seed));
      Rng rng(seed);
      SsdCase c;
      c.batch = 2;
      c.seqlen = 37;
      c.nheads = 4;
      c.headdim = 8;
      c.ngroups = 2;
      c.dstate = 16;
      c.d_per_channel = per_channel_D;
      SsdProblem prob(c, rng);
      const int64_t Bn = c.batch, L = c.seqlen, H = c.nheads, P = c.headdim, G = c.ngroups,
                    N = c.dstate;
      const int64_t D = H * P;
      // The Mamba-1 problem, element by element through the mapping above.
      std::vector<double> u(Bn * D * L), delta(Bn * D * L), z(Bn * D * L), A(D * N),
          Bm(Bn * G * N * L), Cm(Bn * G * N * L), Dm(D), bias(D), h0(Bn * D * N);
      for (int64_t b = 0; b < Bn; ++b) {
        for (int64_t l = 0; l < L; ++l) {
          for (int64_t h = 0; h < H; ++h) {
            for (int64_t p = 0; p < P; ++p) {
              const int64_t d = h * P + p, xi = ((b * L + l) * H + h) * P + p;
              u[(b * D + d) * L + l] = prob.x_d[xi];
              z[(b * D + d) * L + l] = prob.z_d[xi];
              delta[(b * D + d) * L + l] = prob.dt_d[(b * L + l) * H + h];
            }
          }
          for (int64_t g = 0; g < G; ++g) {
            for (int64_t n = 0; n < N; ++n) {
              Bm[((b * G + g) * N + n) * L + l] = prob.B_d[((b * L + l) * G + g) * N + n];
              Cm[((b * G + g) * N + n) * L + l] = prob.C_d[((b * L + l) * G + g) * N + n];
            }
          }
        }
      }
      for (int64_t d = 0; d < D; ++d) {
        const int64_t h = d / P, p = d % P;
        for (int64_t n = 0; n < N; ++n) A[d * N + n] = prob.A_d[h];
        Dm[d] = prob.D_d[per_channel_D ? h * P + p : h];
        bias[d] = prob.dt_bias_d[h];
      }
      h0 = prob.h0_d;  // (B, H, P, N) is (B, D, N)
      HostTensor tu = F32({Bn, D, L}, u), tdelta = F32({Bn, D, L}, delta), tz = F32({Bn, D, L}, z);
      HostTensor tA = F32({D, N}, A), tB = F32({Bn, G, N, L}, Bm), tC = F32({Bn, G, N, L}, Cm);
      HostTensor tD = F32({D}, Dm), tbias = F32({D}, bias), th0 = F32({Bn, D, N}, h0);
      SelectiveScanInputs m1;
      m1.u = tu.view();
      m1.delta = tdelta.view();
      m1.A = tA.view();
      m1.B = tB.view();
      m1.C = tC.view();
      m1.D = tD.view();
      m1.z = tz.view();
      m1.delta_bias = tbias.view();
      m1.initial_state = th0.view();
      m1.delta_softplus = true;
      HostTensor m1_out({Bn, D, L}, DType::kF32), m1_final({Bn, D, N}, DType::kF32);
      ASSERT_TRUE(SelectiveScanForward(m1, m1_out.view(), m1_final.view()).ok());
      std::vector<double> out, fin;
      ASSERT_TRUE(RunForward(prob, Algo(algorithm, 16), &out, &fin).ok());
      const std::vector<double> m1_out_d = m1_out.ToDouble();
      std::vector<double> mapped(out.size());
      for (int64_t b = 0; b < Bn; ++b)
        for (int64_t l = 0; l < L; ++l)
          for (int64_t d = 0; d < D; ++d)
            mapped[(b * L + l) * D + d] = m1_out_d[(b * D + d) * L + l];
      EXPECT_LE(RelativeError(out, mapped), 1e-5) << SsdAlgorithmName(algorithm) << " out";
      EXPECT_LE(RelativeError(fin, m1_final.ToDouble()), 1e-5)
          << SsdAlgorithmName(algorithm) << " final";

      // Backward: the same loss through both.
      const std::vector<double> w = rng.NormalVec(Bn * L * D), wf = rng.NormalVec(Bn * D * N);
      std::vector<double> w_m1(w.size());
      for (int64_t b = 0; b < Bn; ++b)
        for (int64_t l = 0; l < L; ++l)
          for (int64_t d = 0; d < D; ++d) w_m1[(b * D + d) * L + l] = w[(b * L + l) * D + d];
      HostTensor dout_m1 = F32({Bn, D, L}, w_m1), dfinal_m1 = F32({Bn, D, N}, wf);
      HostTensor du({Bn, D, L}, DType::kF32), ddelta({Bn, D, L}, DType::kF32),
          dz({Bn, D, L}, DType::kF32);
      HostTensor dA({D, N}, DType::kF32), dB({Bn, G, N, L}, DType::kF32),
          dC({Bn, G, N, L}, DType::kF32);
      HostTensor dD({D}, DType::kF32), dbias({D}, DType::kF32), dh0({Bn, D, N}, DType::kF32);
      const SelectiveScanGrads g{du.view(), ddelta.view(), dA.view(),    dB.view(), dC.view(),
                                 dD.view(), dz.view(),     dbias.view(), dh0.view()};
      ASSERT_TRUE(SelectiveScanBackward(m1, dout_m1.view(), dfinal_m1.view(), g).ok());
      Grads want;
      want.dx.assign(out.size(), 0.0);
      want.dz.assign(out.size(), 0.0);
      want.ddt.assign(Bn * L * H, 0.0);
      want.dA.assign(H, 0.0);
      want.dB.assign(Bn * L * G * N, 0.0);
      want.dC.assign(Bn * L * G * N, 0.0);
      want.dD.assign(per_channel_D ? H * P : H, 0.0);
      want.ddt_bias.assign(H, 0.0);
      want.dh0 = dh0.ToDouble();
      const auto du_d = du.ToDouble(), ddelta_d = ddelta.ToDouble(), dz_d = dz.ToDouble(),
                 dA_d = dA.ToDouble();
      const auto dB_d = dB.ToDouble(), dC_d = dC.ToDouble(), dD_d = dD.ToDouble(),
                 dbias_d = dbias.ToDouble();
      for (int64_t b = 0; b < Bn; ++b) {
        for (int64_t l = 0; l < L; ++l) {
          for (int64_t d = 0; d < D; ++d) {
            want.dx[(b * L + l) * D + d] = du_d[(b * D + d) * L + l];
            want.dz[(b * L + l) * D + d] = dz_d[(b * D + d) * L + l];
            want.ddt[(b * L + l) * H + d / P] += ddelta_d[(b * D + d) * L + l];
          }
          for (int64_t g2 = 0; g2 < G; ++g2) {
            for (int64_t n = 0; n < N; ++n) {
              want.dB[((b * L + l) * G + g2) * N + n] = dB_d[((b * G + g2) * N + n) * L + l];
              want.dC[((b * L + l) * G + g2) * N + n] = dC_d[((b * G + g2) * N + n) * L + l];
            }
          }
        }
      }
      for (int64_t d = 0; d < D; ++d) {
        for (int64_t n = 0; n < N; ++n) want.dA[d / P] += dA_d[d * N + n];
        want.dD[per_channel_D ? d : d / P] += dD_d[d];
        want.ddt_bias[d / P] += dbias_d[d];
      }
      const Grads got = RunBackward(prob, w, &wf, Algo(algorithm, 16));
      ExpectGradsClose(got, want, 2e-5,
                       std::string("vs selective scan, ") + SsdAlgorithmName(algorithm));
    }
  }
}

// (b) One batch row packing several sequences (seq_idx) equals the sequences run alone; the
// initial state belongs to the first one, the final state to the last.
TEST(SsdCrossCheck, PackedSequencesEqualSeparateRuns) {
  const std::vector<int64_t> lengths = {13, 1, 30, 7, 21};
  int64_t total = 0;
  for (int64_t n : lengths) total += n;
  for (SsdAlgorithm algorithm : kAlgorithms) {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(SeedTrace(seed));
    Rng rng(seed);
    SsdCase c;
    c.batch = 1;
    c.seqlen = total;
    c.nheads = 4;
    c.headdim = 8;
    c.ngroups = 2;
    c.dstate = 16;
    c.has_seq_idx = true;
    c.seq_break = 0.0;  // the fixture's ids are replaced below
    SsdProblem packed(c, rng);
    // seq_idx: one id per sequence, starting from 3 (any values work; only changes matter).
    std::vector<double> ids;
    for (size_t k = 0; k < lengths.size(); ++k) ids.insert(ids.end(), lengths[k], 3.0 + 2.0 * k);
    packed.seq_idx.Fill(ids);
    packed.seq_idx_v.assign(ids.begin(), ids.end());
    const std::vector<double> w = rng.NormalVec(packed.SeqSize()),
                              wf = rng.NormalVec(packed.StateSize());
    std::vector<double> out, fin;
    ASSERT_TRUE(RunForward(packed, Algo(algorithm, 8), &out, &fin).ok());
    const Grads got = RunBackward(packed, w, &wf, Algo(algorithm, 8));

    Grads want;
    want.dA.assign(c.nheads, 0.0);
    want.dD.assign(c.nheads, 0.0);
    want.ddt_bias.assign(c.nheads, 0.0);
    std::vector<double> want_out, want_fin;
    const int64_t H = c.nheads, P = c.headdim, G = c.ngroups, N = c.dstate;
    int64_t start = 0;
    for (size_t k = 0; k < lengths.size(); ++k) {
      const int64_t len = lengths[k];
      SsdCase one = c;
      one.seqlen = len;
      one.has_seq_idx = false;
      one.has_h0 = k == 0;
      SsdProblem alone(one, rng);  // then overwritten with the packed values of its span
      auto span = [&](const std::vector<double>& v, int64_t per_step) {
        return std::vector<double>(v.begin() + start * per_step,
                                   v.begin() + (start + len) * per_step);
      };
      alone.x_d = alone.x.Fill(span(packed.x_d, H * P));
      alone.z_d = alone.z.Fill(span(packed.z_d, H * P));
      alone.dt_d = alone.dt.Fill(span(packed.dt_d, H));
      alone.B_d = alone.B.Fill(span(packed.B_d, G * N));
      alone.C_d = alone.C.Fill(span(packed.C_d, G * N));
      alone.A_d = alone.A.Fill(packed.A_d);
      alone.D_d = alone.D.Fill(packed.D_d);
      alone.dt_bias_d = alone.dt_bias.Fill(packed.dt_bias_d);
      if (k == 0) alone.h0_d = alone.h0.Fill(packed.h0_d);
      std::vector<double> o, f;
      ASSERT_TRUE(RunForward(alone, Algo(algorithm, 8), &o, &f).ok());
      want_out.insert(want_out.end(), o.begin(), o.end());
      const bool last = k + 1 == lengths.size();
      if (last) want_fin = f;
      const Grads g = RunBackward(alone, span(w, H * P), last ? &wf : nullptr, Algo(algorithm, 8));
      for (auto [dst, src] : {std::pair{&want.dx, &g.dx},
                              {&want.dz, &g.dz},
                              {&want.ddt, &g.ddt},
                              {&want.dB, &g.dB},
                              {&want.dC, &g.dC}}) {
        dst->insert(dst->end(), src->begin(), src->end());
      }
      for (int64_t h = 0; h < H; ++h) {
        want.dA[h] += g.dA[h];
        want.dD[h] += g.dD[h];
        want.ddt_bias[h] += g.ddt_bias[h];
      }
      if (k == 0) want.dh0 = g.dh0;
      start += len;
    }
    EXPECT_LE(RelativeError(out, want_out), 1e-5) << SsdAlgorithmName(algorithm);
    EXPECT_LE(RelativeError(fin, want_fin), 1e-5) << SsdAlgorithmName(algorithm);
    ExpectGradsClose(got, want, 1e-5,
                     std::string("packed vs separate, ") + SsdAlgorithmName(algorithm));
  }
}

// (c) Chunk sizes that do not divide L agree with one that does, and with the sequential
// algorithm, forward and backward.
TEST(SsdCrossCheck, ChunkSizesThatDoNotDivideL) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  SsdCase c;
  c.batch = 2;
  c.seqlen = 96;
  c.nheads = 4;
  c.headdim = 16;
  c.ngroups = 1;
  c.dstate = 32;
  c.has_seq_idx = true;
  c.seq_break = 0.02;
  SsdProblem prob(c, rng);
  const std::vector<double> w = rng.NormalVec(prob.SeqSize()), wf = rng.NormalVec(prob.StateSize());
  std::vector<double> ref_out, ref_fin;
  ASSERT_TRUE(RunForward(prob, Algo(SsdAlgorithm::kChunked, 32), &ref_out, &ref_fin).ok());
  const Grads ref = RunBackward(prob, w, &wf, Algo(SsdAlgorithm::kChunked, 32));
  for (int64_t q : {7, 25, 50, 95, 97}) {
    std::vector<double> out, fin;
    ASSERT_TRUE(RunForward(prob, Algo(SsdAlgorithm::kChunked, q), &out, &fin).ok());
    EXPECT_LE(RelativeError(out, ref_out), 1e-5) << "chunk " << q;
    EXPECT_LE(RelativeError(fin, ref_fin), 1e-5) << "chunk " << q;
    ExpectGradsClose(RunBackward(prob, w, &wf, Algo(SsdAlgorithm::kChunked, q)), ref, 1e-5,
                     "chunk " + std::to_string(q) + " vs 32");
  }
  std::vector<double> out, fin;
  ASSERT_TRUE(RunForward(prob, Algo(SsdAlgorithm::kSequential), &out, &fin).ok());
  EXPECT_LE(RelativeError(out, ref_out), 1e-5);
  EXPECT_LE(RelativeError(fin, ref_fin), 1e-5);
  ExpectGradsClose(RunBackward(prob, w, &wf, Algo(SsdAlgorithm::kSequential)), ref, 1e-5,
                   "sequential vs chunk 32");
}

}  // namespace
}  // namespace ssmkit::testing
