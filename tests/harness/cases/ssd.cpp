// The Mamba-2 SSD scan, forward and backward (include/ssmkit/ssd.hpp), in the op harness: both
// algorithms (and kAuto), every optional input on and off and each off in turn, seq_idx resets,
// dt_limit, groups and heads per group, D per head and per channel, chunk sizes dividing L or
// not, one step and decode-length sequences, odd P and N, bf16, the softplus identity branch,
// a long Mamba-2 sized sequence, outer strides, 1 to 3 threads, gradients against finite
// differences and each alone without dfinal_states, and every argument rule of src/ops/ssd.cpp
// and src/ops/check.cpp.
//
// Bounds (relative L2 against the oracle), as the old tests had them: f32 1e-5 forward and
// backward, bf16 1e-2; dA, dD and ddt_bias, per-head sums over B L terms of both signs whose
// f32 rounding does not cancel as the terms do (ddt_bias measured 3.3e-4 at L = 1024, its
// terms' absolute sum 450x the result), within the larger of a case's sum_tol and 8 times
// their rounding noise (Arg::GradNoise). The GPU's, from tests/gpu/ssd_gpu_test.cpp: 5e-3
// forward (1e-2 bf16, the mma variant), 2e-2 gradients. Finite differences: step 1e-5, the
// oracle within 1e-6, the op within 1e-4.
//
// tests/ssd_test.cpp keeps what a table cannot say: bits across runs and thread counts,
// forward and backward, and the algorithm names.
#include <cmath>
#include <limits>

#include "harness/op_spec.hpp"
#include "ref/ssd_ref.hpp"
#include "ssmkit/ssd.hpp"

namespace ssmkit::testing::harness {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Ssd {
  int64_t B = 2, L = 24, H = 4, P = 8, G = 2, N = 16;
  bool skip = true, d_per_channel = false, z = true, dt_bias = true, h0 = true;  // skip: D
  bool seq_idx = false, softplus = true;
  float dt_min = 0.0f, dt_max = kInf;
  bool final_states = true;   // the output
  bool dfinal = true;         // the gradient reaching final_states
  DType dtype = DType::kF32;  // x, dt, B, C, z, out
  int64_t pad = 0;            // every tensor's dimensions but the first: outer strides
  SsdAlgorithm algorithm = SsdAlgorithm::kSequential;
  int64_t chunk = 0;       // options.chunk_size
  double big_dt = 0.0;     // the share of dt past softplus' threshold of 20 (the identity)
  double seq_break = 0.2;  // with seq_idx: the chance a position starts a new sequence
  // dA, dD, ddt_bias: within the larger of this and 8 times their rounding noise; 0: the
  // gradients' own bound alone (the old tests of bf16, of a gradient alone and of threads).
  double sum_tol = 1e-5;

  std::string Name() const {
    return std::string(SsdAlgorithmName(algorithm)) + " chunk=" + std::to_string(chunk) +
           " B=" + std::to_string(B) + " L=" + std::to_string(L) + " H=" + std::to_string(H) +
           " P=" + std::to_string(P) + " G=" + std::to_string(G) + " N=" + std::to_string(N) +
           (skip ? (d_per_channel ? " D(H,P)" : " D(H)") : "") + (z ? " z" : "") +
           (dt_bias ? " bias" : "") + (h0 ? " h0" : "") + (seq_idx ? " seq_idx" : "") +
           (softplus ? " softplus" : "") + " dt in [" + std::to_string(dt_min) + ", " +
           std::to_string(dt_max) + "]" + (final_states ? " final" : "") +
           (dfinal ? "" : " no-dfinal") + " " + DTypeName(dtype) + " pad=" + std::to_string(pad) +
           (big_dt > 0 ? " big-dt" : "");
  }
  std::vector<int64_t> Seq() const { return {B, L, H, P}; }
  std::vector<int64_t> State() const { return {B, H, P, N}; }
};

// dt around softplus^-1(dt) for dt log-uniform in [1e-3, 0.2] (dt itself without softplus),
// as in a trained Mamba-2 layer.
double DrawDt(const Ssd& p, Rng& rng) {
  const double d = std::exp(rng.Uniform(std::log(1e-3), std::log(0.2)));
  return p.softplus ? std::log(std::expm1(d)) : d;
}

// dt_limit clamps dt, a kink in the loss: a central difference straddling it measures neither
// side's derivative. Each raw dt whose effective dt (softplus(dt + bias)) lies within 5% of
// dt_min or dt_max (more than bf16 rounding of the raw value moves it) is drawn again.
bool NearLimit(const Ssd& p, double dt, double bias) {
  double eff = dt + bias;
  if (p.softplus && eff <= 20.0) eff = std::log1p(std::exp(eff));
  auto near = [eff](double limit) {
    return std::isfinite(limit) && limit > 0 && std::abs(eff - limit) < 0.05 * limit;
  };
  return near(p.dt_min) || near(p.dt_max);
}

std::vector<double> Dts(const Ssd& p, const std::vector<double>& bias, Rng& rng) {
  std::vector<double> dt(static_cast<size_t>(p.B * p.L * p.H));
  for (size_t i = 0; i < dt.size(); ++i) {
    dt[i] = DrawDt(p, rng);
    if (p.big_dt > 0 && rng.Uniform(0, 1) < p.big_dt) dt[i] = rng.Uniform(20.5, 22.0);
    const double b = bias.empty() ? 0.0 : bias[i % p.H];
    for (int tries = 0; tries < 1000 && NearLimit(p, dt[i], b); ++tries) dt[i] = DrawDt(p, rng);
  }
  return dt;
}

// Per row, a sequence id that steps up at a position with chance seq_break. Row b starts at
// b + 1: only the changes matter, and an input is never all zero (short rows have none).
std::vector<double> SeqIdx(const Ssd& p, Rng& rng) {
  std::vector<double> idx;
  for (int64_t b = 0; b < p.B; ++b) {
    int64_t id = b + 1;
    for (int64_t l = 0; l < p.L; ++l) {
      if (l > 0 && rng.Uniform(0, 1) < p.seq_break) ++id;
      idx.push_back(id);
    }
  }
  return idx;
}

void Make(const Ssd& p, Problem& prob) {
  const bool f32 = p.dtype == DType::kF32;
  prob.PadOuterDims(true);
  prob.DefaultTol(f32 ? 1e-5 : 1e-2, 2e-2);  // the gradients
  // Without softplus dt + bias must stay positive, as the decay exp(dt A) < 1 assumes.
  std::vector<double> bias;
  if (p.dt_bias) {
    bias = prob.rng().UniformVec(p.H, p.softplus ? -0.5 : 0.0, p.softplus ? 0.5 : 0.02);
  }
  const std::vector<double> dt = Dts(p, bias, prob.rng());
  prob.Input("x", p.Seq(), p.dtype, p.pad).Normal();
  prob.Input("dt", {p.B, p.L, p.H}, p.dtype, p.pad).Given(dt);
  const double noise = p.sum_tol > 0 ? 8.0 : 0.0;
  const double sum_tol = std::max(f32 ? 1e-5 : 1e-2, p.sum_tol);
  std::vector<double> A = prob.rng().UniformVec(p.H, 0.0, std::log(16.0));
  for (double& a : A) a = -std::exp(a);  // Mamba-2's A in [-16, -1]
  prob.Input("A", {p.H}, DType::kF32).Given(A).GradTol(sum_tol, 2e-2).GradNoise(noise);
  prob.Input("B", {p.B, p.L, p.G, p.N}, p.dtype, p.pad).Normal();
  prob.Input("C", {p.B, p.L, p.G, p.N}, p.dtype, p.pad).Normal();
  if (p.skip) {
    prob.Input("D", p.d_per_channel ? std::vector<int64_t>{p.H, p.P} : std::vector<int64_t>{p.H},
               DType::kF32, p.d_per_channel ? p.pad : 0)
        .Normal()
        .GradTol(sum_tol, 2e-2)
        .GradNoise(noise);
  }
  if (p.z) prob.Input("z", p.Seq(), p.dtype, p.pad).Normal();
  if (p.dt_bias)
    prob.Input("dt_bias", {p.H}, DType::kF32).Given(bias).GradTol(sum_tol, 2e-2).GradNoise(noise);
  if (p.h0) prob.Input("initial_states", p.State(), DType::kF32, p.pad).Normal();
  if (p.seq_idx)
    prob.Input("seq_idx", {p.B, p.L}, DType::kI32).Given(SeqIdx(p, prob.rng())).NoGrad();
  prob.DefaultTol(f32 ? 1e-5 : 1e-2, f32 ? 5e-3 : 1e-2);
  prob.Output("out", p.Seq(), p.dtype, p.pad);
  if (p.final_states) {
    Arg& fin = prob.Output("final_states", p.State(), DType::kF32, p.pad);
    if (!p.dfinal) fin.NoUpstream();
  }
}

ref::SsdShape RefShape(const Ssd& p) {
  ref::SsdShape s{p.B, p.L, p.H, p.P, p.G, p.N};
  s.d_per_channel = p.d_per_channel;
  s.dt_softplus = p.softplus;
  s.dt_min = p.dt_min;
  s.dt_max = p.dt_max;
  return s;
}

// The oracle's inputs; seq_idx as int32 in `idx`, which must outlive them.
ref::SsdInputs RefInputs(const Ssd& p, Values& v, std::vector<int32_t>& idx) {
  if (p.seq_idx) idx.assign(v["seq_idx"], v["seq_idx"] + p.B * p.L);
  return {v["x"],
          v["dt"],
          v["A"],
          v["B"],
          v["C"],
          v["D"],
          v["z"],
          v["dt_bias"],
          v["initial_states"],
          p.seq_idx ? idx.data() : nullptr};
}

void OracleForward(const Ssd& p, Values& v) {
  std::vector<int32_t> idx;
  ref::SsdForward(RefShape(p), RefInputs(p, v, idx), v["out"], v["final_states"]);
}

void OracleBackward(const Ssd& p, Values& v) {
  std::vector<int32_t> idx;
  ref::SsdBackward(RefShape(p), RefInputs(p, v, idx), v["dout"], v["dfinal_states"],
                   {v["dx"], v["ddt"], v["dA"], v["dB"], v["dC"], v["dD"], v["dz"], v["ddt_bias"],
                    v["dinitial_states"]});
}

SsdInputs Inputs(const Ssd& p, Bound& b) {
  return {.x = b["x"],
          .dt = b["dt"],
          .A = b["A"],
          .B = b["B"],
          .C = b["C"],
          .D = b["D"],
          .z = b["z"],
          .dt_bias = b["dt_bias"],
          .initial_states = b["initial_states"],
          .seq_idx = b["seq_idx"],
          .dt_softplus = p.softplus,
          .dt_min = p.dt_min,
          .dt_max = p.dt_max};
}

SsdOptions Options(const Ssd& p) { return {p.algorithm, p.chunk}; }

Status Forward(const Ssd& p, Bound& b) {
  return SsdForward(Inputs(p, b), b["out"], b["final_states"], Options(p));
}

Status Backward(const Ssd& p, Bound& b) {
  return SsdBackward(Inputs(p, b), b["dout"], b["dfinal_states"],
                     {b["dx"], b["ddt"], b["dA"], b["dB"], b["dC"], b["dD"], b["dz"], b["ddt_bias"],
                      b["dinitial_states"]},
                     Options(p));
}

constexpr SsdAlgorithm kAlgorithms[] = {SsdAlgorithm::kSequential, SsdAlgorithm::kChunked};

// Every option on: seq_idx and a dt_limit of [0.002, 0.15] too.
Ssd AllOn() {
  Ssd s;
  s.seq_idx = true;
  s.dt_min = 0.002f;
  s.dt_max = 0.15f;
  return s;
}

// `s` under both algorithms, chunk `chunk`.
void BothAlgorithms(Ssd s, int64_t chunk, std::vector<Ssd>& out) {
  s.chunk = chunk;
  for (SsdAlgorithm a : kAlgorithms) {
    s.algorithm = a;
    out.push_back(s);
  }
}

Ssd Sizes(Ssd s, int64_t L, int64_t P, int64_t N) {
  s.L = L;
  s.P = P;
  s.N = N;
  return s;
}

// The old ssd_test.cpp's forward tests.
std::vector<Case<Ssd>> ForwardCases() {
  std::vector<Ssd> options, groups, chunks, steps, odd, bf16, identity, long_rows, strided, targets;
  // All on, all off, each off in turn (softplus off with dt_limit [0, 1]; dt_limit off), and
  // final_states absent.
  Ssd off;
  off.skip = off.z = off.dt_bias = off.h0 = off.softplus = false;
  BothAlgorithms(AllOn(), 8, options);
  BothAlgorithms(off, 8, options);
  for (int option = 0; option < 7; ++option) {
    Ssd s = AllOn();
    switch (option) {
      case 0:
        s.skip = false;
        break;
      case 1:
        s.z = false;
        break;
      case 2:
        s.dt_bias = false;
        break;
      case 3:
        s.h0 = false;
        break;
      case 4:
        s.seq_idx = false;
        break;
      case 5:
        s.softplus = false;
        s.dt_min = 0.0f;
        s.dt_max = 1.0f;
        break;
      case 6:
        s.dt_min = 0.0f;
        s.dt_max = kInf;
        break;
    }
    BothAlgorithms(s, 8, options);
  }
  Ssd no_final = AllOn();
  no_final.final_states = false;
  BothAlgorithms(no_final, 8, options);
  // Heads per group; D per head and per channel.
  for (int64_t G : {1, 2, 4}) {
    Ssd s = AllOn();
    s.G = G;
    BothAlgorithms(s, 8, groups);
  }
  Ssd per_channel = AllOn();
  per_channel.d_per_channel = true;
  BothAlgorithms(per_channel, 8, groups);
  // Chunk sizes that divide L, that do not, one step, and longer than L.
  for (int64_t q : {1, 5, 10, 16, 25, 50, 64, 256}) {
    Ssd s = AllOn();
    s.L = 50;
    s.algorithm = SsdAlgorithm::kChunked;
    s.chunk = q;
    chunks.push_back(s);
  }
  // Decode-length sequences (the sequential path's short-sequence kernel), with and without h0,
  // N a multiple of 16 (states read and written in place) and not, one after the other so a
  // thread's scratch from an earlier call must not leak in; the default algorithm too.
  for (int64_t L : {1, 5}) {
    for (bool h0 : {true, false}) {
      for (int64_t N : {128, 24}) {
        Ssd s = Sizes(AllOn(), L, 8, N);
        s.h0 = h0;
        BothAlgorithms(s, 0, steps);
      }
    }
  }
  // Head dims and state sizes off the vector width, and P = N = 1.
  for (auto [P, N] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {17, 33}, {64, 24}, {24, 128}})
    BothAlgorithms(Sizes(AllOn(), 19, P, N), 7, odd);
  Ssd half = AllOn();
  half.dtype = DType::kBF16;
  BothAlgorithms(half, 8, bf16);
  // dt > 20: a decay of exp(20 A) ~ 0, a reset in all but name.
  Ssd big = AllOn();
  big.big_dt = 0.05;
  big.dt_max = kInf;
  BothAlgorithms(big, 8, identity);
  // Mamba-2 sized heads over a long sequence: many chunks, many rebases of the scaled state.
  Ssd mamba2;
  mamba2.B = 1;
  mamba2.H = 2;
  mamba2.G = 1;
  mamba2 = Sizes(mamba2, 2048, 64, 128);
  long_rows.push_back(mamba2);
  for (int64_t q : {256, 100}) {
    mamba2.algorithm = SsdAlgorithm::kChunked;
    mamba2.chunk = q;
    long_rows.push_back(mamba2);
  }
  // Every tensor a view into a larger buffer (the zxbcdt projection of a Mamba-2 layer):
  // strides on every dimension but the last.
  Ssd views;
  views.B = 2;
  views.L = 20;
  views.skip = views.z = views.dt_bias = views.h0 = false;
  views.pad = 3;
  BothAlgorithms(views, 6, strided);
  Ssd views_all = AllOn();
  views_all.pad = 2;
  BothAlgorithms(views_all, 6, strided);
  // The old every-target test's (the vector width changes the padding of P and N, the register
  // tiles and the short-sequence path's lane sums).
  for (auto [L, P, N] :
       {std::tuple<int64_t, int64_t, int64_t>{3, 13, 5}, {40, 8, 16}, {40, 24, 33}}) {
    BothAlgorithms(Sizes(AllOn(), L, P, N), 16, targets);
    Ssd s = Sizes(AllOn(), L, P, N);
    s.dtype = DType::kBF16;
    s.chunk = 16;
    targets.push_back(s);
  }
  // The default algorithm, as the old determinism test ran it, at 1, 2 and 3 threads.
  std::vector<Ssd> threaded;
  for (SsdAlgorithm a : {SsdAlgorithm::kAuto, SsdAlgorithm::kSequential, SsdAlgorithm::kChunked}) {
    Ssd s = AllOn();
    s.L = 40;
    s.algorithm = a;
    s.chunk = 16;
    threaded.push_back(s);
  }
  constexpr Checks kForward = {.backward = false};
  return {
      {"options", options, kForward},
      {"groups_and_d", groups, kForward},
      {"chunk_sizes", chunks, kForward},
      {"decode_lengths", steps, kForward},
      {"odd_sizes", odd, kForward},
      {"bf16", bf16, kForward},
      {"softplus_identity", identity, kForward},
      {"long_sequence", long_rows, kForward},
      {"outer_strides", strided, kForward},
      {"targets", targets, kForward},
      {"threads_1", threaded, {.backward = false, .threads = 1}},
      {"threads_2", threaded, {.backward = false, .threads = 2}},
      {"threads_3", threaded, {.backward = false, .threads = 3}},
  };
}

// The small problem of the old gradient tests: every option on, P = 3, N = 4, L = 12.
Ssd Small() {
  Ssd s = AllOn();
  s.L = 12;
  s.P = 3;
  s.N = 4;
  return s;
}

// The old ssd_grad_test.cpp's.
std::vector<Case<Ssd>> BackwardCases() {
  // The finite-difference variants: all on; no options, D per channel, one group; the
  // softplus identity branch; many short sequences.
  std::vector<Ssd> fd;
  Ssd bare = Small();
  bare.z = bare.dt_bias = bare.h0 = bare.seq_idx = bare.softplus = false;
  bare.d_per_channel = true;
  bare.G = 1;
  bare.dt_min = 0.0f;
  bare.dt_max = kInf;
  Ssd big = Small(), short_seqs = Small();
  big.big_dt = 0.1;
  short_seqs.seq_break = 0.5;
  for (const Ssd& s : {Small(), bare, big, short_seqs}) BothAlgorithms(s, 5, fd);
  // Mid shapes, every option on, chunks that do and do not divide L.
  std::vector<Ssd> mid;
  for (int variant = 0; variant < 3; ++variant) {
    Ssd s;
    s = Sizes(s, 100, 16, 32);
    s.seq_idx = variant != 1;
    s.seq_break = 0.03;
    s.d_per_channel = variant == 2;
    s.dt_min = variant == 0 ? 0.002f : 0.0f;
    s.dt_max = variant == 0 ? 0.15f : kInf;
    BothAlgorithms(s, 25, mid);
    s.algorithm = SsdAlgorithm::kChunked;
    s.chunk = 32;
    mid.push_back(s);
  }
  // Mamba-2 sized heads over a long sequence: dA and ddt_bias measured up to 5e-5 (chunked,
  // Q = 256), everything else below 1e-5.
  std::vector<Ssd> long_rows;
  Ssd mamba2;
  mamba2.B = 1;
  mamba2.H = 2;
  mamba2.G = 1;
  mamba2 = Sizes(mamba2, 1024, 64, 64);
  mamba2.sum_tol = 2e-4;
  BothAlgorithms(mamba2, 256, long_rows);
  std::vector<Ssd> odd, targets, bf16, alone, threaded;
  for (auto [L, P, N] : {std::tuple<int64_t, int64_t, int64_t>{1, 8, 16}, {9, 1, 1}, {13, 17, 33}})
    BothAlgorithms(Sizes(Small(), L, P, N), 4, odd);
  for (auto [L, P, N] :
       {std::tuple<int64_t, int64_t, int64_t>{3, 13, 5}, {40, 8, 16}, {40, 24, 33}}) {
    Ssd s = Sizes(Small(), L, P, N);
    s.sum_tol = 1e-4;
    BothAlgorithms(s, 16, targets);
  }
  Ssd half = Sizes(Small(), 40, 8, 16);
  half.dtype = DType::kBF16;
  half.sum_tol = 0.0;
  BothAlgorithms(half, 8, bf16);
  // Each gradient alone, without dfinal_states.
  Ssd partial = Small();
  partial.L = 30;
  partial.dfinal = false;
  partial.sum_tol = 0.0;
  BothAlgorithms(partial, 7, alone);
  Ssd wide = Small();
  wide.B = 1;
  wide.L = 40;
  wide.H = 6;
  wide.G = 1;
  wide.sum_tol = 0.0;
  BothAlgorithms(wide, 16, threaded);
  wide.algorithm = SsdAlgorithm::kAuto;  // the old valid-call test ran the backward with it too
  threaded.push_back(wide);
  return {
      {"grad_small", fd, {.finite_differences = true}},
      {"grad_mid_shapes", mid},
      {"grad_long_sequence", long_rows},
      {"grad_odd_sizes", odd},
      {"grad_targets", targets},
      {"grad_bf16", bf16},
      {"grads_alone", alone, {.grads_alone = true}},
      {"grad_threads_1", threaded, {.threads = 1}},
      {"grad_threads_2", threaded, {.threads = 2}},
      {"grad_threads_3", threaded, {.threads = 3}},
  };
}

std::vector<Case<Ssd>> Cases() {
  std::vector<Case<Ssd>> cases = ForwardCases();
  for (Case<Ssd>& c : BackwardCases()) cases.push_back(std::move(c));
  return cases;
}

using Bad = BadInput<Ssd>;
constexpr Call kFwd = Call::kForward, kBwd = Call::kBackward;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// B = 2, L = 9, H = 4, P = 3, G = 2, N = 5, every optional input present (seq_idx too).
Ssd Valid() {
  Ssd s = Sizes(Ssd{}, 9, 3, 5);
  s.seq_idx = true;
  return s;
}

std::vector<Bad> BadInputs() {
  return {

      // ---- options
      {"AlgorithmAboveRange",
       kFwd,
       [](Ssd& p, Bound&) { p.algorithm = static_cast<SsdAlgorithm>(3); },
       {"ssd: options.algorithm: expected an SsdAlgorithm value 0..2, given 3"}},
      {"AlgorithmNegative",
       kFwd,
       [](Ssd& p, Bound&) { p.algorithm = static_cast<SsdAlgorithm>(-1); },
       {"options.algorithm: expected an SsdAlgorithm value 0..2, given -1"}},
      {"NegativeChunkSize",
       kFwd,
       [](Ssd& p, Bound&) { p.chunk = -4; },
       {"ssd: options.chunk_size: expected 0 (default) or a positive length, given -4"}},
      {"BackwardAlgorithmOutOfRange",
       kBwd,
       [](Ssd& p, Bound&) { p.algorithm = static_cast<SsdAlgorithm>(9); },
       {"options.algorithm:", "given 9"}},
      {"BackwardNegativeChunkSize",
       kBwd,
       [](Ssd& p, Bound&) { p.chunk = -1; },
       {"options.chunk_size:", "given -1"}},

      // ---- x: null, rank, every size >= 1, dtype, strides, device
      {"XNull",
       kFwd,
       [](Ssd&, Bound& b) { b["x"].data = nullptr; },
       {"ssd: x: expected a tensor (B, L, H, P), given null"}},
      {"XRank",
       kFwd,
       [](Ssd&, Bound& b) { b["x"].rank = 3; },
       {"x: expected rank 4, given rank 3 (2, 9, 4)"}},
      {"XZeroBatch",
       kFwd,
       [](Ssd&, Bound& b) { b["x"].shape[0] = 0; },
       {"x: expected batch B >= 1, given B = 0"}},
      {"XZeroLength",
       kFwd,
       [](Ssd&, Bound& b) { b["x"].shape[1] = 0; },
       {"x: expected sequence length L >= 1, given L = 0"}},
      {"XZeroHeads",
       kFwd,
       [](Ssd&, Bound& b) { b["x"].shape[2] = 0; },
       {"x: expected heads H >= 1, given H = 0"}},
      {"XZeroHeadDim",
       kFwd,
       [](Ssd&, Bound& b) { b["x"].shape[3] = 0; },
       {"x: expected head dim P >= 1, given P = 0"}},
      {"XDtype",
       kFwd,
       [](Ssd&, Bound& b) { b["x"].dtype = DType::kF16; },
       {"x: expected dtype f32 or bf16, given f16"}},
      {"XLastDimStride",
       kFwd,
       [](Ssd&, Bound& b) { b["x"].strides[3] = 2; },
       {"x: expected stride 1 on the last dimension, given stride 2"}},
      {"XNegativeStride",
       kFwd,
       [](Ssd&, Bound& b) { b["x"].strides[0] = -108; },
       {"x: expected non-negative strides, given stride -108 on dimension 0"}},
      {"XOnCuda",
       kFwd,
       [](Ssd&, Bound& b) { b["x"].device = Device::kCuda; },
       {"x: expected a CPU tensor, given a CUDA tensor"}},
      {"BackwardXNull", kBwd, [](Ssd&, Bound& b) { b["x"].data = nullptr; }, {"x:", "given null"}},
      {"BackwardXZeroLength",
       kBwd,
       [](Ssd&, Bound& b) { b["x"].shape[1] = 0; },
       {"x:", "given L = 0"}},

      // ---- dt
      {"DtNull",
       kFwd,
       [](Ssd&, Bound& b) { b["dt"].data = nullptr; },
       {"dt: expected a tensor of shape (B, L, H) = (2, 9, 4), given null"}},
      {"DtShape",
       kFwd,
       [](Ssd&, Bound& b) { b["dt"].shape[2] = 3; },
       {"dt: expected shape (B, L, H) = (2, 9, 4), given (2, 9, 3)"}},
      {"DtRank",
       kFwd,
       [](Ssd&, Bound& b) {
         b["dt"] = b.Spare({2, 9, 4, 1}, DType::kF32);
       },
       {"dt: expected shape (B, L, H) = (2, 9, 4), given (2, 9, 4, 1)"}},
      {"DtDtype",
       kFwd,
       [](Ssd&, Bound& b) { b["dt"].dtype = DType::kI32; },
       {"dt: expected dtype f32 or bf16, given i32"}},
      {"DtLastDimStride",
       kFwd,
       [](Ssd&, Bound& b) { b["dt"].strides[2] = 3; },
       {"dt: expected stride 1 on the last dimension, given stride 3"}},
      {"DtOnCuda",
       kFwd,
       [](Ssd&, Bound& b) { b["dt"].device = Device::kCuda; },
       {"dt: expected a CPU tensor, given a CUDA tensor"}},

      // ---- A
      {"ANull",
       kFwd,
       [](Ssd&, Bound& b) { b["A"].data = nullptr; },
       {"A: expected a tensor of shape (H) = (4,), given null"}},
      {"AShape",
       kFwd,
       [](Ssd&, Bound& b) { b["A"].shape[0] = 5; },
       {"A: expected shape (H) = (4,), given (5,)"}},
      {"APerState",
       kFwd,
       [](Ssd&, Bound& b) {
         b["A"] = b.Spare({4, 5}, DType::kF32);
       },
       {"A: expected shape (H) = (4,), given (4, 5)"}},
      {"ADtype",
       kFwd,
       [](Ssd&, Bound& b) { b["A"].dtype = DType::kBF16; },
       {"A: expected dtype f32, given bf16"}},
      {"AStride",
       kFwd,
       [](Ssd&, Bound& b) { b["A"].strides[0] = 2; },
       {"A: expected stride 1 on the last dimension, given stride 2"}},

      // ---- B: null, rank, N >= 1, groups, shape, dtype, strides
      {"BNull",
       kFwd,
       [](Ssd&, Bound& b) { b["B"].data = nullptr; },
       {"ssd: B: expected a tensor (B, L, G, N), given null"}},
      {"BRank",
       kFwd,
       [](Ssd&, Bound& b) {
         b["B"] = b.Spare({2, 9, 10}, DType::kF32);
       },
       {"B: expected rank 4, given rank 3 (2, 9, 10)"}},
      {"BZeroState",
       kFwd,
       [](Ssd&, Bound& b) {
         b["B"] = b.Spare({2, 9, 2, 1}, DType::kF32);  // memory of its own: not a null tensor
         b["B"].shape[3] = 0;
       },
       {"B: expected state size N >= 1, given N = 0"}},
      {"BGroupsNotDividingH",
       kFwd,
       [](Ssd&, Bound& b) {
         b["B"] = b.Spare({2, 9, 3, 5}, DType::kF32);
       },
       {"B: expected a group count G dividing H = 4, given G = 3"}},
      {"BZeroGroups",
       kFwd,
       [](Ssd&, Bound& b) {
         b["B"] = b.Spare({2, 9, 1, 5}, DType::kF32);  // memory of its own: not a null tensor
         b["B"].shape[2] = 0;
       },
       {"B: expected a group count G dividing H = 4, given G = 0"}},
      {"BShapeLength",
       kFwd,
       [](Ssd&, Bound& b) { b["B"].shape[1] = 8; },
       {"B: expected shape (B, L, G, N) = (2, 9, 2, 5), given (2, 8, 2, 5)"}},
      {"BShapeBatch",
       kFwd,
       [](Ssd&, Bound& b) { b["B"].shape[0] = 1; },
       {"B: expected shape (B, L, G, N) = (2, 9, 2, 5), given (1, 9, 2, 5)"}},
      {"BDtype",
       kFwd,
       [](Ssd&, Bound& b) { b["B"].dtype = DType::kF16; },
       {"B: expected dtype f32 or bf16, given f16"}},
      {"BLastDimStride",
       kFwd,
       [](Ssd&, Bound& b) { b["B"].strides[3] = 2; },
       {"B: expected stride 1 on the last dimension, given stride 2"}},
      {"BNegativeStride",
       kFwd,
       [](Ssd&, Bound& b) { b["B"].strides[1] = -10; },
       {"B: expected non-negative strides, given stride -10 on dimension 1"}},

      // ---- C
      {"CNull",
       kFwd,
       [](Ssd&, Bound& b) { b["C"].data = nullptr; },
       {"C: expected a tensor of shape (B, L, G, N) = (2, 9, 2, 5), given null"}},
      {"CShapeState",
       kFwd,
       [](Ssd&, Bound& b) { b["C"].shape[3] = 4; },
       {"C: expected shape (B, L, G, N) = (2, 9, 2, 5), given (2, 9, 2, 4)"}},
      {"CGroupsDifferFromB",
       kFwd,
       [](Ssd&, Bound& b) {
         b["C"] = b.Spare({2, 9, 1, 5}, DType::kF32);
       },
       {"C: expected shape (B, L, G, N) = (2, 9, 2, 5), given (2, 9, 1, 5)"}},
      {"CDtype",
       kFwd,
       [](Ssd&, Bound& b) { b["C"].dtype = DType::kI64; },
       {"C: expected dtype f32 or bf16, given i64"}},
      {"COnCuda",
       kFwd,
       [](Ssd&, Bound& b) { b["C"].device = Device::kCuda; },
       {"C: expected a CPU tensor, given a CUDA tensor"}},

      // ---- D (optional): (H) or (H, P)
      {"DRank",
       kFwd,
       [](Ssd&, Bound& b) {
         b["D"] = b.Spare({4, 3, 1}, DType::kF32);
       },
       {"D: expected rank 1 or 2, given rank 3 (4, 3, 1)"}},
      {"DPerHeadShape",
       kFwd,
       [](Ssd&, Bound& b) { b["D"].shape[0] = 5; },
       {"D: expected shape (H) = (4,), given (5,)"}},
      {"DPerChannelShape",
       kFwd,
       [](Ssd&, Bound& b) {
         b["D"] = b.Spare({4, 2}, DType::kF32);
       },
       {"D: expected shape (H, P) = (4, 3), given (4, 2)"}},
      {"DDtype",
       kFwd,
       [](Ssd&, Bound& b) { b["D"].dtype = DType::kBF16; },
       {"D: expected dtype f32, given bf16"}},

      // ---- z, dt_bias, initial_states, seq_idx (optional)
      {"ZShape",
       kFwd,
       [](Ssd&, Bound& b) { b["z"].shape[2] = 5; },
       {"z: expected shape (B, L, H, P) = (2, 9, 4, 3), given (2, 9, 5, 3)"}},
      {"ZDtype",
       kFwd,
       [](Ssd&, Bound& b) { b["z"].dtype = DType::kI32; },
       {"z: expected dtype f32 or bf16, given i32"}},
      {"ZLastDimStride",
       kFwd,
       [](Ssd&, Bound& b) { b["z"].strides[3] = 4; },
       {"z: expected stride 1 on the last dimension, given stride 4"}},
      {"DtBiasShape",
       kFwd,
       [](Ssd&, Bound& b) { b["dt_bias"].shape[0] = 8; },
       {"dt_bias: expected shape (H) = (4,), given (8,)"}},
      {"DtBiasDtype",
       kFwd,
       [](Ssd&, Bound& b) { b["dt_bias"].dtype = DType::kF16; },
       {"dt_bias: expected dtype f32, given f16"}},
      {"InitialStatesShape",
       kFwd,
       [](Ssd&, Bound& b) { b["initial_states"].shape[3] = 4; },
       {"initial_states: expected shape (B, H, P, N) = (2, 4, 3, 5), given (2, 4, 3, 4)"}},
      {"InitialStatesDtype",
       kFwd,
       [](Ssd&, Bound& b) { b["initial_states"].dtype = DType::kBF16; },
       {"initial_states: expected dtype f32, given bf16"}},
      {"InitialStatesStride",
       kFwd,
       [](Ssd&, Bound& b) { b["initial_states"].strides[3] = 2; },
       {"initial_states: expected stride 1 on the last dimension, given stride 2"}},
      {"SeqIdxShape",
       kFwd,
       [](Ssd&, Bound& b) { b["seq_idx"].shape[1] = 8; },
       {"seq_idx: expected shape (B, L) = (2, 9), given (2, 8)"}},
      {"SeqIdxFloat",
       kFwd,
       [](Ssd&, Bound& b) { b["seq_idx"].dtype = DType::kF32; },
       {"seq_idx: expected dtype i32, given f32"}},
      {"SeqIdxInt64",
       kFwd,
       [](Ssd&, Bound& b) { b["seq_idx"].dtype = DType::kI64; },
       {"seq_idx: expected dtype i32, given i64"}},

      // ---- dt_limit
      {"DtLimitInverted",
       kFwd,
       [](Ssd& p, Bound&) { p.dt_min = 1.0f, p.dt_max = 0.5f; },
       {"ssd: dt_limit: expected dt_min <= dt_max (neither NaN), given (1.000000, 0.500000)"}},
      {"DtLimitNaN",
       kFwd,
       [](Ssd& p, Bound&) { p.dt_max = kNaN; },
       {"dt_limit: expected dt_min <= dt_max (neither NaN), given (0.000000, nan)"}},
      {"BackwardDtLimitNaN",
       kBwd,
       [](Ssd& p, Bound&) { p.dt_min = kNaN; },
       {"dt_limit:", "given (nan, "}},

      // ---- out and final_states (forward)
      {"OutNull",
       kFwd,
       [](Ssd&, Bound& b) { b["out"] = Tensor{}; },
       {"out: expected a tensor of shape (B, L, H, P) = (2, 9, 4, 3), given null"}},
      {"OutShape",
       kFwd,
       [](Ssd&, Bound& b) { b["out"].shape[1] = 3; },
       {"out: expected shape (B, L, H, P) = (2, 9, 4, 3), given (2, 3, 4, 3)"}},
      {"OutDtypeNotX",
       kFwd,
       [](Ssd&, Bound& b) { b["out"].dtype = DType::kBF16; },
       {"out: expected dtype f32, given bf16"}},
      {"OutDtypeNotBf16X",
       kFwd,
       [](Ssd&, Bound& b) { b["x"].dtype = DType::kBF16; },
       {"out: expected dtype bf16, given f32"}},
      {"OutOnCuda",
       kFwd,
       [](Ssd&, Bound& b) { b["out"].device = Device::kCuda; },
       {"out: expected a CPU tensor, given a CUDA tensor"}},
      {"FinalStatesShape",
       kFwd,
       [](Ssd&, Bound& b) { b["final_states"].shape[0] = 1; },
       {"final_states: expected shape (B, H, P, N) = (2, 4, 3, 5), given (1, 4, 3, 5)"}},
      {"FinalStatesDtype",
       kFwd,
       [](Ssd&, Bound& b) { b["final_states"].dtype = DType::kBF16; },
       {"final_states: expected dtype f32, given bf16"}},

      // ---- dout and dfinal_states (backward)
      {"DoutNull",
       kBwd,
       [](Ssd&, Bound& b) { b["dout"] = Tensor{}; },
       {"dout: expected a tensor of shape (B, L, H, P) = (2, 9, 4, 3), given null"}},
      {"DoutShape",
       kBwd,
       [](Ssd&, Bound& b) { b["dout"].shape[3] = 4; },
       {"dout: expected shape (B, L, H, P) = (2, 9, 4, 3), given (2, 9, 4, 4)"}},
      {"DoutDtype",
       kBwd,
       [](Ssd&, Bound& b) { b["dout"].dtype = DType::kBF16; },
       {"dout: expected dtype f32, given bf16"}},
      {"DfinalStatesShape",
       kBwd,
       [](Ssd&, Bound& b) { b["dfinal_states"].shape[1] = 2; },
       {"dfinal_states: expected shape (B, H, P, N) = (2, 4, 3, 5), given (2, 2, 3, 5)"}},
      {"DfinalStatesDtype",
       kBwd,
       [](Ssd&, Bound& b) { b["dfinal_states"].dtype = DType::kBF16; },
       {"dfinal_states: expected dtype f32, given bf16"}},

      // ---- gradients: each one's shape (as its input) and dtype (its input's)
      {"DxShape",
       kBwd,
       [](Ssd&, Bound& b) { b["dx"].shape[0] = 1; },
       {"dx: expected shape (as x) = (2, 9, 4, 3), given (1, 9, 4, 3)"}},
      {"DxDtype",
       kBwd,
       [](Ssd&, Bound& b) { b["dx"].dtype = DType::kBF16; },
       {"dx: expected dtype f32, given bf16"}},
      {"DxStride",
       kBwd,
       [](Ssd&, Bound& b) { b["dx"].strides[3] = 2; },
       {"dx: expected stride 1 on the last dimension, given stride 2"}},
      {"DdtShape",
       kBwd,
       [](Ssd&, Bound& b) { b["ddt"].shape[1] = 2; },
       {"ddt: expected shape (as dt) = (2, 9, 4), given (2, 2, 4)"}},
      {"DdtDtype",
       kBwd,
       [](Ssd&, Bound& b) { b["ddt"].dtype = DType::kF16; },
       {"ddt: expected dtype f32, given f16"}},
      {"DAShape",
       kBwd,
       [](Ssd&, Bound& b) { b["dA"].shape[0] = 2; },
       {"dA: expected shape (as A) = (4,), given (2,)"}},
      {"DADtype",
       kBwd,
       [](Ssd&, Bound& b) { b["dA"].dtype = DType::kBF16; },
       {"dA: expected dtype f32, given bf16"}},
      {"DBShape",
       kBwd,
       [](Ssd&, Bound& b) { b["dB"].shape[2] = 1; },
       {"dB: expected shape (as B) = (2, 9, 2, 5), given (2, 9, 1, 5)"}},
      {"DBDtype",
       kBwd,
       [](Ssd&, Bound& b) { b["dB"].dtype = DType::kBF16; },
       {"dB: expected dtype f32, given bf16"}},
      {"DCShape",
       kBwd,
       [](Ssd&, Bound& b) { b["dC"].shape[3] = 8; },
       {"dC: expected shape (as C) = (2, 9, 2, 5), given (2, 9, 2, 8)"}},
      {"DCDtype",
       kBwd,
       [](Ssd&, Bound& b) { b["dC"].dtype = DType::kBF16; },
       {"dC: expected dtype f32, given bf16"}},
      {"DDShape",
       kBwd,
       [](Ssd&, Bound& b) { b["dD"].shape[0] = 5; },
       {"dD: expected shape (as D) = (4,), given (5,)"}},
      {"DDOtherForm",
       kBwd,
       [](Ssd&, Bound& b) {
         b["dD"] = b.Spare({4, 3}, DType::kF32);
       },
       {"dD: expected shape (as D) = (4,), given (4, 3)"}},
      {"DDDtype",
       kBwd,
       [](Ssd&, Bound& b) { b["dD"].dtype = DType::kBF16; },
       {"dD: expected dtype f32, given bf16"}},
      {"DzShape",
       kBwd,
       [](Ssd&, Bound& b) { b["dz"].shape[1] = 1; },
       {"dz: expected shape (as z) = (2, 9, 4, 3), given (2, 1, 4, 3)"}},
      {"DzDtype",
       kBwd,
       [](Ssd&, Bound& b) { b["dz"].dtype = DType::kBF16; },
       {"dz: expected dtype f32, given bf16"}},
      {"DdtBiasShape",
       kBwd,
       [](Ssd&, Bound& b) { b["ddt_bias"].shape[0] = 1; },
       {"ddt_bias: expected shape (as dt_bias) = (4,), given (1,)"}},
      {"DdtBiasDtype",
       kBwd,
       [](Ssd&, Bound& b) { b["ddt_bias"].dtype = DType::kF16; },
       {"ddt_bias: expected dtype f32, given f16"}},
      {"DinitialStatesShape",
       kBwd,
       [](Ssd&, Bound& b) { b["dinitial_states"].shape[2] = 4; },
       {"dinitial_states: expected shape (as initial_states) = (2, 4, 3, 5), given (2, 4, 4, 5)"}},
      {"DinitialStatesDtype",
       kBwd,
       [](Ssd&, Bound& b) { b["dinitial_states"].dtype = DType::kBF16; },
       {"dinitial_states: expected dtype f32, given bf16"}},

      // ---- a gradient for an absent optional input
      {"DDWithoutD",
       kBwd,
       [](Ssd&, Bound& b) { b["D"] = Tensor{}; },
       {"dD: expected no tensor, since D is absent, given a tensor of shape (4,)"}},
      {"DzWithoutZ",
       kBwd,
       [](Ssd&, Bound& b) { b["z"] = Tensor{}; },
       {"dz: expected no tensor, since z is absent, given a tensor of shape (2, 9, 4, 3)"}},
      {"DdtBiasWithoutDtBias",
       kBwd,
       [](Ssd&, Bound& b) { b["dt_bias"] = Tensor{}; },
       {"ddt_bias: expected no tensor, since dt_bias is absent, given a tensor of shape (4,)"}},
      {"DinitialStatesWithoutInitialStates",
       kBwd,
       [](Ssd&, Bound& b) { b["initial_states"] = Tensor{}; },
       {"dinitial_states: expected no tensor, since initial_states is absent, given a tensor of "
        "shape (2, 4, 3, 5)"}},
  };
}

OpSpec<Ssd> SsdSpec() {
  return {.name = "ssd",
          .make = Make,
          .oracle_forward = OracleForward,
          .oracle_backward = OracleBackward,
          .forward = Forward,
          .backward = Backward,
          .cases = Cases(),
          .valid = Valid(),
          .bad_inputs = BadInputs(),
          .cuda_variants = {&cuda::kSsdVariants},
          .fd = {.step = 1e-5, .oracle = 1e-6, .op = 1e-4}};
}

}  // namespace

SSMKIT_HARNESS_OP(SsdSpec);

}  // namespace ssmkit::testing::harness
