// Prefill then decode equals one longer prefill: for a Mamba-1 mixer's conv + scan,
//   conv1d over L tokens (final_states -> conv_state), scan over L tokens (final_state -> state),
//   then k steps of causal_conv1d_update + selective_state_update
// must give the outputs and states of conv1d + scan over all L + k tokens. This ties the decode
// ops to the sequence ops (the same function, not only each to its own oracle).
// The Mamba-2 version: SSD over L tokens (final_states -> state), then k steps of
// selective_state_update on (B, H, P, N) states, against SSD over all L + k tokens, with both
// SSD algorithms. (The Mamba-2 conv is the same causal_conv1d op as above; the engine's model
// tests check conv + SSD + state update together.)
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "ssmkit/conv1d.hpp"
#include "ssmkit/selective_scan.hpp"
#include "ssmkit/ssd.hpp"
#include "ssmkit/state_update.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

struct Mamba1Case {
  int64_t B = 2, D = 16, N = 16, G = 2, K = 4, L = 37, steps = 5;
  DType dtype = DType::kF32;
  bool multi_step_conv = false;  // one causal_conv1d_update call with (B, D, T) for all steps
  std::string Name() const {
    return "B=" + std::to_string(B) + " D=" + std::to_string(D) + " N=" + std::to_string(N) +
           " G=" + std::to_string(G) + " K=" + std::to_string(K) + " L=" + std::to_string(L) +
           " steps=" + std::to_string(steps) + " " + DTypeName(dtype) +
           (multi_step_conv ? " conv (B, D, T)" : "");
  }
};

// Element (.., t) of every row of a (rows, T) row-major array of doubles.
std::vector<double> Column(const std::vector<double>& v, int64_t rows, int64_t T, int64_t t) {
  std::vector<double> c(rows);
  for (int64_t r = 0; r < rows; ++r) c[r] = v[r * T + t];
  return c;
}

// The first `len` columns of every row.
std::vector<double> Prefix(const std::vector<double>& v, int64_t rows, int64_t T, int64_t len) {
  std::vector<double> p;
  for (int64_t r = 0; r < rows; ++r) p.insert(p.end(), v.begin() + r * T, v.begin() + r * T + len);
  return p;
}

// A view of the first `len` steps of a tensor whose last dimension is time.
Tensor FirstSteps(Tensor t, int64_t len) {
  t.shape[t.rank - 1] = len;
  return t;
}

struct Errors {
  double prefill_conv = 0, prefill_out = 0, step_conv = 0, step_out = 0, conv_state = 0, state = 0;
};

Errors PrefillThenDecode(const Mamba1Case& c, uint64_t seed) {
  Rng rng(seed);
  const int64_t B = c.B, D = c.D, N = c.N, G = c.G, K = c.K, L = c.L, T = c.L + c.steps;
  const int64_t rows = B * D;
  // Inputs over all L + k tokens.
  HostTensor x({B, D, T}, c.dtype), delta({B, D, T}, c.dtype), z({B, D, T}, c.dtype);
  HostTensor Bm({B, G, N, T}, c.dtype), Cm({B, G, N, T}, c.dtype);
  HostTensor weight({D, K}, DType::kF32), conv_bias({D}, DType::kF32);
  HostTensor A({D, N}, DType::kF32), Dskip({D}, DType::kF32), delta_bias({D}, DType::kF32);
  const std::vector<double> xd = x.Fill(rng.NormalVec(rows * T));
  const std::vector<double> deltad = delta.Fill(rng.UniformVec(rows * T, -4.0, 0.0));
  const std::vector<double> zd = z.Fill(rng.NormalVec(rows * T));
  const std::vector<double> bd = Bm.Fill(rng.NormalVec(B * G * N * T));
  const std::vector<double> cd = Cm.Fill(rng.NormalVec(B * G * N * T));
  weight.Fill(rng.UniformVec(D * K, -0.8, 0.8));
  conv_bias.Fill(rng.UniformVec(D, -0.5, 0.5));
  A.Fill(rng.UniformVec(D * N, -3.0, -0.2));
  Dskip.Fill(rng.UniformVec(D, -1.0, 1.0));
  delta_bias.Fill(rng.UniformVec(D, -0.5, 0.5));
  const CausalConv1dInputs conv_in{x.view(), weight.view(), conv_bias.view(), Tensor{},
                                   Conv1dActivation::kSilu};

  // The reference: conv + scan over all L + k tokens.
  HostTensor u_full({B, D, T}, c.dtype), y_full({B, D, T}, c.dtype);
  HostTensor conv_final_full({B, D, K - 1}, DType::kF32), h_full({B, D, N}, DType::kF32);
  for (HostTensor* t : {&u_full, &y_full, &conv_final_full, &h_full}) t->Poison();
  Status s = CausalConv1dForward(conv_in, u_full.view(), conv_final_full.view());
  EXPECT_TRUE(s.ok()) << s.message();
  SelectiveScanInputs scan_in{u_full.view(), delta.view(), A.view(),          Bm.view(), Cm.view(),
                              Dskip.view(),  z.view(),     delta_bias.view(), Tensor{},  true};
  s = SelectiveScanForward(scan_in, y_full.view(), h_full.view());
  EXPECT_TRUE(s.ok()) << s.message();

  // Prefill over the first L tokens (views of the same inputs).
  HostTensor u_pre({B, D, L}, c.dtype), y_pre({B, D, L}, c.dtype);
  HostTensor conv_state({B, D, K - 1}, DType::kF32), state({B, D, N}, DType::kF32);
  for (HostTensor* t : {&u_pre, &y_pre, &conv_state, &state}) t->Poison();
  CausalConv1dInputs pre_conv_in = conv_in;
  pre_conv_in.x = FirstSteps(x.view(), L);
  s = CausalConv1dForward(pre_conv_in, u_pre.view(), conv_state.view());
  EXPECT_TRUE(s.ok()) << s.message();
  SelectiveScanInputs pre_scan_in = scan_in;
  pre_scan_in.u = u_pre.view();
  pre_scan_in.delta = FirstSteps(delta.view(), L);
  pre_scan_in.B = FirstSteps(Bm.view(), L);
  pre_scan_in.C = FirstSteps(Cm.view(), L);
  pre_scan_in.z = FirstSteps(z.view(), L);
  s = SelectiveScanForward(pre_scan_in, y_pre.view(), state.view());
  EXPECT_TRUE(s.ok()) << s.message();

  // Decode the remaining k tokens one at a time (step inputs copied into (B, D) / (B, G, N)).
  std::vector<double> u_steps, y_steps, u_want, y_want;
  const std::vector<double> u_full_d = u_full.ToDouble(), y_full_d = y_full.ToDouble();
  HostTensor u_all({B, D, c.steps}, c.dtype);
  if (c.multi_step_conv) {  // every step's conv in one call, before the state updates
    HostTensor x_all({B, D, c.steps}, c.dtype);
    std::vector<double> xs;
    for (int64_t r = 0; r < rows; ++r)
      xs.insert(xs.end(), xd.begin() + r * T + L, xd.begin() + (r + 1) * T);
    x_all.Fill(xs);
    u_all.Poison();
    s = CausalConv1dUpdate({x_all.view(), weight.view(), conv_bias.view(), Conv1dActivation::kSilu},
                           conv_state.view(), u_all.view());
    EXPECT_TRUE(s.ok()) << s.message();
  }
  for (int64_t t = L; t < T; ++t) {
    HostTensor x_t({B, D}, c.dtype), u_t({B, D}, c.dtype), dt_t({B, D}, c.dtype),
        z_t({B, D}, c.dtype);
    HostTensor B_t({B, G, N}, c.dtype), C_t({B, G, N}, c.dtype), y_t({B, D}, c.dtype);
    x_t.Fill(Column(xd, rows, T, t));
    dt_t.Fill(Column(deltad, rows, T, t));
    z_t.Fill(Column(zd, rows, T, t));
    B_t.Fill(Column(bd, B * G * N, T, t));
    C_t.Fill(Column(cd, B * G * N, T, t));
    u_t.Poison();
    y_t.Poison();
    if (c.multi_step_conv) {
      u_t.Fill(Column(u_all.ToDouble(), rows, c.steps, t - L));
    } else {
      s = CausalConv1dUpdate({x_t.view(), weight.view(), conv_bias.view(), Conv1dActivation::kSilu},
                             conv_state.view(), u_t.view());
      EXPECT_TRUE(s.ok()) << s.message();
    }
    StateUpdateInputs step_in{u_t.view(),   dt_t.view(), A.view(),          B_t.view(), C_t.view(),
                              Dskip.view(), z_t.view(),  delta_bias.view(), Tensor{},   true};
    s = SelectiveStateUpdate(step_in, state.view(), y_t.view());
    EXPECT_TRUE(s.ok()) << s.message();
    for (double v : u_t.ToDouble()) u_steps.push_back(v);
    for (double v : y_t.ToDouble()) y_steps.push_back(v);
    for (double v : Column(u_full_d, rows, T, t)) u_want.push_back(v);
    for (double v : Column(y_full_d, rows, T, t)) y_want.push_back(v);
  }

  Errors e;
  e.prefill_conv = RelativeError(u_pre.ToDouble(), Prefix(u_full_d, rows, T, L));
  e.prefill_out = RelativeError(y_pre.ToDouble(), Prefix(y_full_d, rows, T, L));
  e.step_conv = RelativeError(u_steps, u_want);
  e.step_out = RelativeError(y_steps, y_want);
  e.conv_state = RelativeError(conv_state.ToDouble(), conv_final_full.ToDouble());
  e.state = RelativeError(state.ToDouble(), h_full.ToDouble());
  return e;
}

TEST(PrefillDecode, Mamba1ConvAndScanThenSteps) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  int n = 0;
  Errors worst[2];
  for (int64_t K : {2, 4, 8}) {
    for (int64_t L : {int64_t{2}, int64_t{37}}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        for (bool multi : {false, true}) {
          Mamba1Case c;
          c.K = K;
          c.L = L;
          c.dtype = dtype;
          c.multi_step_conv = multi;
          c.N = K == 8 ? 5 : 16;
          c.G = K == 2 ? 1 : 2;
          SCOPED_TRACE(c.Name());
          const Errors e = PrefillThenDecode(c, seed + n++);
          // f32: rounding only. bf16: u and y are stored in bf16, and the decode path's conv sums
          // in another order than the sequence path's, so a u may round to the neighbouring
          // bf16 value (2^-8 relative) and carry into y and the state.
          const double tol = dtype == DType::kF32 ? 1e-5 : 2e-2;
          EXPECT_LE(e.prefill_conv, tol);
          EXPECT_LE(e.prefill_out, tol);
          EXPECT_LE(e.step_conv, tol);
          EXPECT_LE(e.step_out, tol);
          EXPECT_EQ(e.conv_state, 0.0) << "the conv state holds copies of the inputs";
          EXPECT_LE(e.state, tol);
          Errors& w = worst[dtype == DType::kBF16];
          w.step_out = std::max(w.step_out, e.step_out);
          w.state = std::max(w.state, e.state);
        }
      }
    }
  }
  std::printf(
      "prefill+decode vs one prefill, worst: f32 out %.3g state %.3g; bf16 out %.3g state %.3g\n",
      worst[0].step_out, worst[0].state, worst[1].step_out, worst[1].state);
}

// ---- Mamba-2: SSD prefill, then state-update steps ----

struct Mamba2Case {
  int64_t B = 2, H = 4, P = 8, G = 2, N = 16, L = 37, steps = 5;
  DType dtype = DType::kF32;
  SsdAlgorithm algorithm = SsdAlgorithm::kSequential;
  std::string Name() const {
    return "B=" + std::to_string(B) + " H=" + std::to_string(H) + " P=" + std::to_string(P) +
           " G=" + std::to_string(G) + " N=" + std::to_string(N) + " L=" + std::to_string(L) +
           " steps=" + std::to_string(steps) + " " + DTypeName(dtype) + " " +
           SsdAlgorithmName(algorithm);
  }
};

// A (B, T, ...) tensor (time second) viewed at its first `len` steps.
Tensor FirstStepsOfTimeMajor(Tensor t, int64_t len) {
  t.shape[1] = len;
  return t;
}

// Step t of a (B, T, ...) tensor as a (B, ...) view: no copy, the batch stride kept.
Tensor StepOfTimeMajor(const Tensor& t, int64_t step) {
  Tensor s;
  s.data = static_cast<char*>(t.data) + step * t.strides[1] * DTypeSize(t.dtype);
  s.dtype = t.dtype;
  s.rank = t.rank - 1;
  s.shape[0] = t.shape[0];
  s.strides[0] = t.strides[0];
  for (int d = 2; d < t.rank; ++d) {
    s.shape[d - 1] = t.shape[d];
    s.strides[d - 1] = t.strides[d];
  }
  return s;
}

struct Mamba2Errors {
  double prefill_out = 0, step_out = 0, state = 0;
};

Mamba2Errors SsdPrefillThenSteps(const Mamba2Case& c, uint64_t seed) {
  Rng rng(seed);
  const int64_t B = c.B, H = c.H, P = c.P, G = c.G, N = c.N, L = c.L, T = c.L + c.steps;
  HostTensor x({B, T, H, P}, c.dtype), z({B, T, H, P}, c.dtype), dt({B, T, H}, c.dtype);
  HostTensor Bm({B, T, G, N}, c.dtype), Cm({B, T, G, N}, c.dtype);
  HostTensor A({H}, DType::kF32), Dskip({H}, DType::kF32), dt_bias({H}, DType::kF32);
  HostTensor h0({B, H, P, N}, DType::kF32);
  x.Fill(rng.NormalVec(x.numel()));
  z.Fill(rng.NormalVec(z.numel()));
  dt.Fill(rng.UniformVec(dt.numel(), -4.0, 0.0));
  Bm.Fill(rng.NormalVec(Bm.numel()));
  Cm.Fill(rng.NormalVec(Cm.numel()));
  A.Fill(rng.UniformVec(H, -8.0, -1.0));
  Dskip.Fill(rng.UniformVec(H, -1.0, 1.0));
  dt_bias.Fill(rng.UniformVec(H, -0.5, 0.5));
  h0.Fill(rng.NormalVec(h0.numel()));
  SsdInputs in;
  in.x = x.view();
  in.dt = dt.view();
  in.A = A.view();
  in.B = Bm.view();
  in.C = Cm.view();
  in.D = Dskip.view();
  in.z = z.view();
  in.dt_bias = dt_bias.view();
  in.initial_states = h0.view();
  in.dt_softplus = true;
  SsdOptions options;
  options.algorithm = c.algorithm;
  options.chunk_size = 16;  // several chunks, the last one partial

  // The reference: SSD over all L + k tokens.
  HostTensor out_full({B, T, H, P}, c.dtype), final_full({B, H, P, N}, DType::kF32);
  out_full.Poison();
  final_full.Poison();
  Status s = SsdForward(in, out_full.view(), final_full.view(), options);
  EXPECT_TRUE(s.ok()) << s.message();

  // Prefill over the first L tokens.
  SsdInputs pre = in;
  for (Tensor* t : {&pre.x, &pre.dt, &pre.B, &pre.C, &pre.z}) *t = FirstStepsOfTimeMajor(*t, L);
  HostTensor out_pre({B, L, H, P}, c.dtype), state({B, H, P, N}, DType::kF32);
  out_pre.Poison();
  state.Poison();
  s = SsdForward(pre, out_pre.view(), state.view(), options);
  EXPECT_TRUE(s.ok()) << s.message();

  // The remaining k tokens, one state update each, reading step views of the same inputs.
  std::vector<double> got, want;
  const std::vector<double> full = out_full.ToDouble();
  for (int64_t t = L; t < T; ++t) {
    HostTensor y_t({B, H, P}, c.dtype);
    y_t.Poison();
    StateUpdateInputs step{StepOfTimeMajor(in.x, t),
                           StepOfTimeMajor(in.dt, t),
                           A.view(),
                           StepOfTimeMajor(in.B, t),
                           StepOfTimeMajor(in.C, t),
                           Dskip.view(),
                           StepOfTimeMajor(in.z, t),
                           dt_bias.view(),
                           Tensor{},
                           true};
    s = SelectiveStateUpdate(step, state.view(), y_t.view());
    EXPECT_TRUE(s.ok()) << s.message();
    for (double v : y_t.ToDouble()) got.push_back(v);
    for (int64_t b = 0; b < B; ++b) {
      const auto row = full.begin() + (b * T + t) * H * P;
      want.insert(want.end(), row, row + H * P);
    }
  }
  std::vector<double> prefix;
  for (int64_t b = 0; b < B; ++b) {
    const auto row = full.begin() + b * T * H * P;
    prefix.insert(prefix.end(), row, row + L * H * P);
  }
  Mamba2Errors e;
  e.prefill_out = RelativeError(out_pre.ToDouble(), prefix);
  e.step_out = RelativeError(got, want);
  e.state = RelativeError(state.ToDouble(), final_full.ToDouble());
  return e;
}

TEST(PrefillDecode, Mamba2SsdThenStateUpdates) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  int n = 0;
  for (SsdAlgorithm algorithm : {SsdAlgorithm::kSequential, SsdAlgorithm::kChunked}) {
    for (int64_t L : {int64_t{1}, int64_t{37}}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        for (int64_t N : {int64_t{16}, int64_t{5}}) {
          Mamba2Case c;
          c.algorithm = algorithm;
          c.L = L;
          c.dtype = dtype;
          c.N = N;
          c.G = N == 5 ? 1 : 2;
          SCOPED_TRACE(c.Name());
          const Mamba2Errors e = SsdPrefillThenSteps(c, seed + n++);
          // f32: rounding only. bf16: out is stored in bf16 (2^-9 relative per element); the
          // state is f32 from the same bf16 inputs on both paths.
          const double tol = dtype == DType::kF32 ? 1e-5 : 1e-2;
          EXPECT_LE(e.prefill_out, tol);
          EXPECT_LE(e.step_out, tol);
          EXPECT_LE(e.state, 1e-5);
        }
      }
    }
  }
}

}  // namespace
}  // namespace ssmkit::testing
