// The Mamba-1 selective scan, forward and backward (include/ssmkit/selective_scan.hpp), in the
// op harness: every algorithm, B and C constant (D, N), variable (B, N, L) and grouped
// (B, G, N, L), every optional input and the final state on and off, L = 1 and odd L, every
// state-size class (1, 2, 4 vectors or memory; a padded N), the channel-tiled path, the
// softplus identity branch, chunk lengths and checkpoint intervals dividing L or not, bf16,
// outer strides bigger than the packed ones, the chunk states, 1 and 2 threads, gradients
// against finite differences and each alone, and every argument rule of src/ops/selective_scan.cpp
// and src/ops/check.cpp.
//
// Bounds (relative L2 against the oracle), as the old tests had them: f32 1e-5 forward (out,
// final_state, chunk_states), 1e-4 gradients (dA, a sum over B L terms, measured 1.5e-5 at
// L = 700); bf16 inputs 1e-2 (out's own rounding; measured <= 3e-3), the f32 states 1e-5. The
// GPU's, from tests/gpu/selective_scan_gpu_test.cpp: f32 1e-4 forward, 1e-3 gradients.
// Finite differences: Richardson's at step 1e-4, the oracle within 2e-8 (measured 2e-9), the
// op within 1e-4.
//
// tests/selective_scan_test.cpp keeps what a table cannot say: bits across runs and thread
// counts, out's bits with and without chunk_states, a gradient requested alone and the backward
// given the forward's chunk states bit for bit, the algorithm names.
#include <algorithm>
#include <cmath>

#include "harness/op_spec.hpp"
#include "ref/selective_scan_ref.hpp"
#include "ssmkit/selective_scan.hpp"

namespace ssmkit::testing::harness {
namespace {

// The form of B or C.
enum class Form { kConstant, kVariable, kGrouped };

struct Scan {
  int64_t B = 2, D = 5, L = 16, N = 4, G = 1;  // G: the groups of a grouped B or C
  Form b_form = Form::kVariable, c_form = Form::kVariable;
  bool skip = true, z = true, delta_bias = true, h0 = true, softplus = true;  // skip: D
  bool final_state = true;    // the output (and so the gradient dfinal_state reaching it)
  bool chunk_states = false;  // the forward's chunk states, an output (CPU only)
  DType dtype = DType::kF32;  // u, delta, z, B, C, out
  int64_t pad = 0;            // every tensor's dimensions but the first: outer strides
  ScanAlgorithm algorithm = ScanAlgorithm::kSequential;
  int64_t chunk = 0;  // options.chunk_length: kChunked's chunks, the backward's checkpoints
  // dt = softplus(delta + bias) log-uniform in [1e-3, dt_max]; A[d, n] = -exp(U(-1, 1)) *
  // (1 + a_slope n), weak to strong decay as in an S4D-real initialised layer; a share
  // big_delta of the deltas past softplus' threshold of 20 (the identity branch); a share
  // growth of the A entries positive, +exp(U(-1, 1)): states that grow.
  double dt_max = 0.5, a_slope = 0.25, big_delta = 0.0, growth = 0.0;

  std::string Name() const {
    const char* forms = "cvg";
    return std::string(ScanAlgorithmName(algorithm)) + " B=" + std::to_string(B) +
           " D=" + std::to_string(D) + " L=" + std::to_string(L) + " N=" + std::to_string(N) +
           " G=" + std::to_string(G) + " B/C=" + forms[static_cast<int>(b_form)] +
           forms[static_cast<int>(c_form)] + " opts=" + std::to_string(skip) + std::to_string(z) +
           std::to_string(delta_bias) + std::to_string(h0) + std::to_string(softplus) +
           (final_state ? " final" : "") + (chunk_states ? " chunk_states" : "") + " " +
           DTypeName(dtype) + " pad=" + std::to_string(pad) + " chunk=" + std::to_string(chunk) +
           (big_delta > 0 ? " big-delta" : "") + (a_slope == 0 ? " mild" : "") +
           (growth > 0 ? " growth" : "");
  }
  SelectiveScanOptions Options() const { return {algorithm, chunk}; }
  int64_t ChunkCount() const { return SelectiveScanChunkCount(L, Options()); }
  std::vector<int64_t> Seq() const { return {B, D, L}; }
  std::vector<int64_t> State() const { return {B, D, N}; }
  std::vector<int64_t> BC(Form form) const {
    switch (form) {
      case Form::kConstant:
        return {D, N};
      case Form::kVariable:
        return {B, N, L};
      case Form::kGrouped:
        return {B, G, N, L};
    }
    return {};
  }
};

// delta = softplus^-1(dt) (dt itself without softplus), before the bias. Big deltas (delta +
// bias in [20.5, 24.5], at least 0.5 from the threshold so finite differences never straddle
// it) skip l = 0: every path from h0 to the loss passes exp(dt_0 A), and exp(20 A) ~ 0 would
// leave dh0 too small for finite differences to check.
std::vector<double> Deltas(const Scan& p, Rng& rng) {
  std::vector<double> delta(static_cast<size_t>(p.B * p.D * p.L));
  for (size_t i = 0; i < delta.size(); ++i) {
    const double dt = std::exp(rng.Uniform(std::log(1e-3), std::log(p.dt_max)));
    delta[i] = p.softplus ? std::log(std::expm1(dt)) : dt;
    if (p.big_delta > 0 && i % p.L != 0 && rng.Uniform(0, 1) < p.big_delta)
      delta[i] = rng.Uniform(21.0, 24.0);
  }
  return delta;
}

std::vector<double> Decays(const Scan& p, Rng& rng) {
  std::vector<double> a(static_cast<size_t>(p.D * p.N));
  for (int64_t d = 0; d < p.D; ++d) {
    for (int64_t n = 0; n < p.N; ++n)
      a[d * p.N + n] = -std::exp(rng.Uniform(-1.0, 1.0)) * (1.0 + p.a_slope * n);
  }
  for (double& v : a) {
    if (rng.Uniform(0, 1) < p.growth) v = std::exp(rng.Uniform(-1.0, 1.0));
  }
  return a;
}

void Make(const Scan& p, Problem& prob) {
  const bool f32 = p.dtype == DType::kF32;
  prob.PadOuterDims(true);
  prob.DefaultTol(f32 ? 1e-4 : 1e-2, f32 ? 1e-3 : 1e-2);  // the gradients
  prob.Input("u", p.Seq(), p.dtype, p.pad).Normal();
  prob.Input("delta", p.Seq(), p.dtype, p.pad).Given(Deltas(p, prob.rng()));
  prob.Input("A", {p.D, p.N}, DType::kF32, p.pad).Given(Decays(p, prob.rng()));
  prob.Input("B", p.BC(p.b_form), p.dtype, p.pad).Normal();
  prob.Input("C", p.BC(p.c_form), p.dtype, p.pad).Normal();
  if (p.skip) prob.Input("D", {p.D}, DType::kF32).Normal();
  if (p.z) prob.Input("z", p.Seq(), p.dtype, p.pad).Normal();
  // Without softplus dt = delta + bias must stay positive, as the decay exp(dt A) < 1 assumes.
  if (p.delta_bias) {
    prob.Input("delta_bias", {p.D}, DType::kF32)
        .Uniform(p.softplus ? -0.5 : 0.0, p.softplus ? 0.5 : 0.05);
  }
  if (p.h0) prob.Input("initial_state", p.State(), DType::kF32, p.pad).Normal();
  prob.DefaultTol(f32 ? 1e-5 : 1e-2, f32 ? 1e-4 : 1e-2);
  prob.Output("out", p.Seq(), p.dtype, p.pad);
  // f32 whatever the inputs' dtype, from the same (rounded) inputs.
  if (p.final_state) prob.Output("final_state", p.State(), DType::kF32, p.pad).Tol(1e-5, 1e-4);
  if (p.chunk_states) {
    prob.Output("chunk_states", {p.B, p.D, p.ChunkCount(), p.N}, DType::kF32, p.pad)
        .Tol(1e-5)
        .NoUpstream();
  }
}

ref::ScanShape RefShape(const Scan& p) {
  ref::ScanShape s;
  s.batch = p.B;
  s.dim = p.D;
  s.seqlen = p.L;
  s.dstate = p.N;
  s.b_variable = p.b_form != Form::kConstant;
  s.c_variable = p.c_form != Form::kConstant;
  s.b_groups = p.b_form == Form::kGrouped ? p.G : 1;
  s.c_groups = p.c_form == Form::kGrouped ? p.G : 1;
  s.delta_softplus = p.softplus;
  return s;
}

ref::ScanInputs RefInputs(Values& v) {
  return {v["u"],          v["delta"],        v["A"], v["B"], v["C"], v["D"], v["z"],
          v["delta_bias"], v["initial_state"]};
}

// Each (..., L) row of `values` cut to its first `steps` elements.
std::vector<double> Prefix(const double* values, int64_t size, int64_t L, int64_t steps) {
  std::vector<double> cut;
  for (int64_t row = 0; row < size / L; ++row)
    cut.insert(cut.end(), values + row * L, values + row * L + steps);
  return cut;
}

// The oracle's state (B, D, N) after the first `steps` steps: h0 (or zeros) for none.
std::vector<double> StateAfter(const Scan& p, Values& v, int64_t steps) {
  std::vector<double> state(static_cast<size_t>(p.B * p.D * p.N));
  if (steps == 0) {
    if (p.h0) std::copy_n(v["initial_state"], state.size(), state.begin());
    return state;
  }
  Scan q = p;
  q.L = steps;
  const int64_t seq = p.B * p.D * p.L;
  auto bc = [&](const char* name, Form form) {
    return form == Form::kConstant ? std::vector<double>(v[name], v[name] + p.D * p.N)
                                   : Prefix(v[name], v.at(name).size(), p.L, steps);
  };
  const std::vector<double> u = Prefix(v["u"], seq, p.L, steps),
                            delta = Prefix(v["delta"], seq, p.L, steps),
                            z = p.z ? Prefix(v["z"], seq, p.L, steps) : std::vector<double>(),
                            B = bc("B", p.b_form), C = bc("C", p.c_form);
  ref::ScanInputs in = RefInputs(v);
  in.u = u.data();
  in.delta = delta.data();
  in.B = B.data();
  in.C = C.data();
  in.z = p.z ? z.data() : nullptr;
  std::vector<double> out(static_cast<size_t>(p.B * p.D * steps));
  ref::SelectiveScanForward(RefShape(q), in, out.data(), state.data());
  return state;
}

void OracleForward(const Scan& p, Values& v) {
  ref::SelectiveScanForward(RefShape(p), RefInputs(v), v["out"], v["final_state"]);
  if (!p.chunk_states) return;
  // Entry k (of K) of row (b, d): the state entering step k Q.
  const int64_t K = p.ChunkCount(), Q = p.chunk > 0 ? p.chunk : kDefaultScanChunkLength;
  for (int64_t k = 0; k < K; ++k) {
    const std::vector<double> state = StateAfter(p, v, k * Q);
    for (int64_t row = 0; row < p.B * p.D; ++row)
      std::copy_n(&state[row * p.N], p.N, v["chunk_states"] + (row * K + k) * p.N);
  }
}

void OracleBackward(const Scan& p, Values& v) {
  ref::SelectiveScanBackward(RefShape(p), RefInputs(v), v["dout"], v["dfinal_state"],
                             {v["du"], v["ddelta"], v["dA"], v["dB"], v["dC"], v["dD"], v["dz"],
                              v["ddelta_bias"], v["dinitial_state"]});
}

SelectiveScanInputs Inputs(const Scan& p, Bound& b) {
  return {.u = b["u"],
          .delta = b["delta"],
          .A = b["A"],
          .B = b["B"],
          .C = b["C"],
          .D = b["D"],
          .z = b["z"],
          .delta_bias = b["delta_bias"],
          .initial_state = b["initial_state"],
          .delta_softplus = p.softplus};
}

Status Forward(const Scan& p, Bound& b) {
  return SelectiveScanForward(Inputs(p, b), b["out"], b["final_state"], b["chunk_states"],
                              p.Options());
}

// chunk_states is bound on the backward only by a bad input's mutation (the forward's output).
Status Backward(const Scan& p, Bound& b) {
  return SelectiveScanBackward(Inputs(p, b), b["dout"], b["dfinal_state"], b["chunk_states"],
                               {b["du"], b["ddelta"], b["dA"], b["dB"], b["dC"], b["dD"], b["dz"],
                                b["ddelta_bias"], b["dinitial_state"]},
                               p.Options());
}

constexpr ScanAlgorithm kStable[] = {ScanAlgorithm::kSequential, ScanAlgorithm::kChunked,
                                     ScanAlgorithm::kBlelloch, ScanAlgorithm::kHillisSteele};
constexpr ScanAlgorithm kPairs[] = {ScanAlgorithm::kChunked, ScanAlgorithm::kBlelloch,
                                    ScanAlgorithm::kHillisSteele};

// Log-space computes h_l = P_l (h0 + sum_k x_k / P_k), P_l = exp(sum_{k<=l} dt_k A): 1/P
// overflows f32 once the summed decay passes ~88 (docs/numerics.md), so it runs only where that
// is sane: L <= 64 with mild decay, dt <= 0.1 and |A| <= e. The other algorithms run on the
// realistic (strong) decays with the same bounds.
Scan LogSpace(Scan s) {
  s.algorithm = ScanAlgorithm::kLogSpace;
  s.dt_max = 0.1;
  s.a_slope = 0.0;
  return s;
}

// `s` under each stable algorithm (chunk `chunk`).
void EveryStableAlgorithm(const Scan& s, int64_t chunk, std::vector<Scan>& out) {
  for (ScanAlgorithm a : kStable) {
    Scan t = s;
    t.algorithm = a;
    t.chunk = chunk;
    out.push_back(t);
  }
}

// `s` under each stable algorithm (chunk `chunk`), and under log-space (default chunk).
void EveryAlgorithm(const Scan& s, int64_t chunk, std::vector<Scan>& out) {
  EveryStableAlgorithm(s, chunk, out);
  out.push_back(LogSpace(s));
}

Scan Dims(int64_t B, int64_t D, int64_t L, int64_t N) {
  Scan s;
  s.B = B;
  s.D = D;
  s.L = L;
  s.N = N;
  return s;
}

Scan Forms(Scan s, Form b_form, Form c_form, int64_t G) {
  s.b_form = b_form;
  s.c_form = c_form;
  s.G = G;
  return s;
}

// D, z, delta_bias, initial_state and softplus from the bits of `mask`, in that order.
Scan WithOptions(Scan s, int mask) {
  s.skip = mask & 1;
  s.z = mask & 2;
  s.delta_bias = mask & 4;
  s.h0 = mask & 8;
  s.softplus = mask & 16;
  return s;
}

Scan WithDtype(Scan s, DType dtype, int64_t pad = 0) {
  s.dtype = dtype;
  s.pad = pad;
  return s;
}

// The old selective_scan_test.cpp's forward tests; the kernel paths each reaches are in
// src/cpu/scan_forward.cpp: L = 1 (one step), channel tiles (sequential, variable B/C, D / G a
// multiple of the vector width W), per-row state in 1, 2 or 4 vectors or in memory, the pairs.
std::vector<Case<Scan>> ForwardCases() {
  std::vector<Scan> short_rows, long_rows, tiled, options, identity, chunks, bf16, padded, states,
      targets;
  // Short sequences (odd L, L = 1), small states, every B/C form.
  for (int64_t L : {1, 2, 7, 37, 61}) {
    for (int64_t N : {1, 4, 16}) EveryAlgorithm(Dims(2, 5, L, N), 8, short_rows);
  }
  for (auto [b, c] : std::vector<std::pair<Form, Form>>{{Form::kGrouped, Form::kGrouped},
                                                        {Form::kConstant, Form::kConstant},
                                                        {Form::kConstant, Form::kVariable},
                                                        {Form::kVariable, Form::kConstant},
                                                        {Form::kGrouped, Form::kConstant}}) {
    EveryAlgorithm(Forms(Dims(2, 6, 29, 4), b, c, 3), 8, short_rows);
  }
  // Long rows and every state-size class: N / W = 1, 2, 4 vectors or more, a padded N (5).
  for (int64_t N : {1, 5, 16, 32, 64, 256}) {
    for (ScanAlgorithm a : kStable) {
      Scan s = Dims(2, 2, N == 256 ? 301 : 500, N);
      s.algorithm = a;
      long_rows.push_back(s);
    }
  }
  // The channel-tiled path (B = 2: tiles of both batches in one call); one group, several tiles
  // per batch, 256 states.
  for (int64_t N : {1, 5, 16, 64}) {
    for (DType dtype : {DType::kF32, DType::kBF16})
      tiled.push_back(
          WithDtype(Forms(Dims(2, 64, 53, N), Form::kGrouped, Form::kVariable, 2), dtype));
  }
  tiled.push_back(Dims(1, 48, 40, 256));
  // Every combination of D, z, delta_bias, initial_state, softplus and final_state on the
  // per-row, tiled and one-step paths; the pair algorithms get all on, all off and each off.
  for (int mask = 0; mask < 64; ++mask) {
    for (int64_t D : {5, 32}) {
      for (int64_t L : {45, 1}) {
        if (D == 32 && L == 1) continue;
        Scan s = WithOptions(Dims(2, D, L, 16), mask);
        s.final_state = mask & 32;
        options.push_back(s);
      }
    }
  }
  for (int mask : {0, 31, 31 & ~1, 31 & ~2, 31 & ~4, 31 & ~8, 31 & ~16}) {
    for (bool final_state : {false, true}) {
      Scan s = WithOptions(Dims(2, 5, 45, 16), mask);
      s.final_state = final_state;
      for (ScanAlgorithm a : kPairs) {
        Scan t = s;
        t.algorithm = a;
        options.push_back(t);
      }
      options.push_back(LogSpace(s));
    }
  }
  // A tenth of the deltas past 20 (decays exp(dt A) ~ 0 that reset the state); half of them
  // at L = 1.
  Scan big = Dims(2, 6, 40, 8);
  big.big_delta = 0.1;
  EveryStableAlgorithm(big, big.chunk, identity);
  Scan big_tiled = big, big_step = big;
  big_tiled.D = 32;
  big_step.L = 1;
  big_step.big_delta = 0.5;
  identity.push_back(big_tiled);
  identity.push_back(big_step);
  // A quarter of A positive (exp(dt A) up to ~e^1.4 a step), in channel tiles too: the tiled
  // forward takes its decays-only path (no upper clamp of the exponent) only where every
  // exponent is <= 0.
  Scan growth = Dims(2, 32, 16, 8);
  growth.growth = 0.25;
  EveryStableAlgorithm(growth, growth.chunk, identity);
  // Chunk lengths dividing L or not, and longer than L.
  for (int64_t L : {37, 100}) {
    for (int64_t chunk : {1, 2, 3, 7, 16, 36, 37, 38, 63, 64, 99, 100, 101, 1000}) {
      Scan s = Dims(2, 3, L, chunk % 2 ? 4 : 16);
      s.algorithm = ScanAlgorithm::kChunked;
      s.chunk = chunk;
      chunks.push_back(s);
    }
  }
  for (Form form : {Form::kConstant, Form::kVariable, Form::kGrouped}) {
    const Scan s = WithDtype(Forms(Dims(2, 4, 77, 16), form, form, 2), DType::kBF16);
    for (ScanAlgorithm a : kStable) {
      Scan t = s;
      t.algorithm = a;
      bf16.push_back(t);
    }
    Scan short_row = LogSpace(s);
    short_row.L = 40;
    bf16.push_back(short_row);
  }
  bf16.push_back(WithDtype(Dims(1, 24, 1, 16), DType::kBF16));
  // Every tensor inside a larger buffer (u's batch stride (D + 3)(L + 3) > D L), B and C in
  // every form.
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (Form form : {Form::kConstant, Form::kVariable, Form::kGrouped}) {
      const Scan s = WithDtype(
          Forms(Dims(2, 4, 21, 5), form, form == Form::kConstant ? Form::kGrouped : form, 2), dtype,
          3);
      EveryAlgorithm(s, 4, padded);
      Scan step = s;
      step.L = 1;
      padded.push_back(step);
    }
    padded.push_back(WithDtype(Dims(2, 32, 19, 16), dtype, 2));
  }
  // The chunk states: every algorithm, constant and variable B/C (per-row and tiled paths),
  // L = 1, chunks dividing L or not and longer than L, with and without h0, strided.
  int k = 0;
  for (ScanAlgorithm a :
       {ScanAlgorithm::kSequential, ScanAlgorithm::kChunked, ScanAlgorithm::kBlelloch,
        ScanAlgorithm::kHillisSteele, ScanAlgorithm::kLogSpace}) {
    for (Form form : {Form::kConstant, Form::kVariable}) {
      for (int64_t L : {1, 37, 150}) {
        for (int64_t chunk : {0, 7, 16, 200}) {
          if (a == ScanAlgorithm::kLogSpace && L > 64) continue;
          Scan s = WithDtype(Forms(Dims(2, 32, L, 16), form, form, 1), DType::kF32, 2);
          s.h0 = k++ % 2 == 0;
          s.final_state = false;
          s.chunk_states = true;
          s.chunk = chunk;
          if (a == ScanAlgorithm::kLogSpace) s = LogSpace(s);
          s.algorithm = a;
          states.push_back(s);
        }
      }
    }
  }
  // The old every-target test's shapes (W = 16, 8 or 4 changes N's padding, the tile width and
  // which N fit in registers).
  for (int64_t N : {1, 5, 16, 48}) {
    EveryAlgorithm(Dims(2, 3, 50, N), 16, targets);
    targets.push_back(WithDtype(Dims(2, 32, 50, N), N == 5 ? DType::kBF16 : DType::kF32));
    targets.push_back(Dims(2, 13, 1, N));
  }
  constexpr Checks kForward = {.backward = false};
  return {
      {"short_rows", short_rows, kForward},
      {"long_rows_every_state_size", long_rows, kForward},
      {"channel_tiled", tiled, kForward},
      {"optional_inputs", options, kForward},
      {"softplus_identity", identity, kForward},
      {"chunk_lengths", chunks, kForward},
      {"bf16", bf16, kForward},
      {"outer_strides", padded, kForward},
      {"chunk_states", states, {.backward = false, .cuda = false}},
      {"targets", targets, kForward},
  };
}

// The old selective_scan_grad_test.cpp's.
std::vector<Case<Scan>> BackwardCases() {
  // Small shapes for finite differences (chunk 3: several checkpoints even on these rows): every
  // B/C form, L = 1, odd L, no optional input, the identity branch, channel tiles (D = 16).
  const Scan base = Dims(2, 2, 7, 3);
  std::vector<Scan> small = {base,
                             Dims(2, 2, 1, 1),
                             Forms(Dims(2, 4, 5, 3), Form::kGrouped, Form::kGrouped, 2),
                             Forms(Dims(2, 2, 9, 3), Form::kConstant, Form::kConstant, 1),
                             Forms(Dims(2, 2, 7, 4), Form::kConstant, Form::kVariable, 1),
                             Forms(Dims(2, 4, 5, 3), Form::kGrouped, Form::kConstant, 2),
                             WithOptions(base, 0),
                             base,
                             Dims(1, 16, 6, 2)};
  small[7].big_delta = 0.25;
  for (Scan& s : small) s.chunk = 3;
  // Mid shapes: checkpoints at the default interval, long adjoint chains, every state-size
  // class, every B/C form, both layouts.
  std::vector<Scan> mid;
  for (int64_t L : {200, 457, 700}) mid.push_back(Dims(2, 24, L, 16));
  for (int64_t N : {1, 4, 64}) mid.push_back(Dims(2, 6, 300, N));
  mid.push_back(Dims(1, 3, 70, 256));
  const Scan grouped_constant = Forms(Dims(2, 12, 200, 16), Form::kGrouped, Form::kConstant, 3);
  mid.push_back(grouped_constant);
  mid.push_back(Forms(grouped_constant, Form::kConstant, Form::kConstant, 3));
  mid.push_back(Forms(Dims(2, 64, 150, 16), Form::kGrouped, Form::kVariable, 2));
  mid.push_back(Forms(Dims(2, 32, 77, 5), Form::kGrouped, Form::kVariable, 2));
  std::vector<Scan> bf16, intervals, options, padded, threaded, targets;
  for (Form form : {Form::kConstant, Form::kVariable, Form::kGrouped}) {
    for (int64_t D : {8, 32})
      bf16.push_back(WithDtype(Forms(Dims(2, D, 90, 16), form, form, 2), DType::kBF16));
    for (int64_t D : {4, 32}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        Scan s = WithDtype(Forms(Dims(2, D, 23, 5), form, form, 2), dtype, 3);
        s.chunk = 8;
        padded.push_back(s);
      }
    }
    for (int64_t D : {6, 64}) threaded.push_back(Forms(Dims(3, D, 150, 16), form, form, 2));
  }
  // The checkpoint interval changes only the recomputation schedule.
  for (int64_t D : {4, 16}) {
    for (int64_t chunk : {1, 7, 33, 64, 99, 100, 101, 250}) {
      Scan s = Dims(2, D, 100, 16);
      s.chunk = chunk;
      intervals.push_back(s);
    }
  }
  // Every combination of the optional inputs and dfinal_state, per-row and tiled.
  for (int mask = 0; mask < 64; ++mask) {
    Scan s = WithOptions(Dims(2, mask % 2 ? 16 : 3, 30, 8), mask);
    s.final_state = mask & 32;
    options.push_back(s);
  }
  for (int64_t N : {1, 5, 16}) {
    for (int64_t D : {3, 32}) {
      Scan s = WithDtype(Dims(2, D, 50, N), N == 5 && D == 32 ? DType::kBF16 : DType::kF32);
      s.chunk = 16;
      targets.push_back(s);
    }
  }
  // tests/selective_scan_test.cpp's backward from the forward's chunk states has these bits.
  std::vector<Scan> chunked;
  for (Form form : {Form::kConstant, Form::kVariable, Form::kGrouped}) {
    for (int64_t chunk : {0, 7, 32}) {
      for (DType dtype : {DType::kF32, DType::kBF16}) {
        Scan s = WithDtype(Forms(Dims(2, 32, 150, 16), form, form, 2), dtype, 3);
        s.chunk = chunk;
        chunked.push_back(s);
      }
    }
  }
  std::vector<Scan> alone;
  for (Form form : {Form::kConstant, Form::kVariable}) {
    for (int64_t D : {4, 32}) alone.push_back(Forms(Dims(2, D, 30, 8), form, form, 1));
  }
  return {
      {"grad_small", small, {.finite_differences = true, .grads_alone = true}},
      {"grad_mid_shapes", mid},
      {"grad_bf16", bf16},
      {"grad_checkpoint_intervals", intervals},
      {"grad_optional_inputs", options},
      {"grad_outer_strides", padded},
      {"grad_threads_1", threaded, {.threads = 1}},
      {"grad_threads_2", threaded, {.threads = 2}},
      {"grad_targets", targets},
      {"grad_chunk_state_shapes", chunked},
      {"grads_alone", alone, {.grads_alone = true}},
  };
}

std::vector<Case<Scan>> Cases() {
  std::vector<Case<Scan>> cases = ForwardCases();
  for (Case<Scan>& c : BackwardCases()) cases.push_back(std::move(c));
  return cases;
}

using Bad = BadInput<Scan>;
constexpr Call kFwd = Call::kForward, kBwd = Call::kBackward;

// B = 2, D = 4, L = 9, N = 3; B variable (B, N, L), C grouped (B, G = 2, N, L); every optional
// input, final_state and chunk_states (K = 1 at the default chunk of 64).
Scan Valid() {
  Scan s = Forms(Dims(2, 4, 9, 3), Form::kVariable, Form::kGrouped, 2);
  s.chunk_states = true;
  return s;
}

// The backward's chunk_states (the forward's output, unbound on a backward), as a spare.
void BindChunkStates(Bound& b, std::vector<int64_t> shape) {
  b["chunk_states"] = b.Spare(std::move(shape), DType::kF32);
}

std::vector<Bad> OptionAndInputRules() {
  return {
      // options, checked first by both entry points
      {"AlgorithmAboveRange",
       kFwd,
       [](Scan& p, Bound&) { p.algorithm = static_cast<ScanAlgorithm>(5); },
       {"selective_scan: options.algorithm: expected a ScanAlgorithm value 0..4, given 5"}},
      {"AlgorithmNegative",
       kFwd,
       [](Scan& p, Bound&) { p.algorithm = static_cast<ScanAlgorithm>(-1); },
       {"options.algorithm: expected a ScanAlgorithm value 0..4, given -1"}},
      {"NegativeChunkLength",
       kFwd,
       [](Scan& p, Bound&) { p.chunk = -4; },
       {"selective_scan: options.chunk_length: expected 0 (default) or a positive length, given "
        "-4"}},
      {"BackwardAlgorithmOutOfRange",
       kBwd,
       [](Scan& p, Bound&) { p.algorithm = static_cast<ScanAlgorithm>(7); },
       {"options.algorithm:", "given 7"}},
      {"BackwardNegativeChunkLength",
       kBwd,
       [](Scan& p, Bound&) { p.chunk = -1; },
       {"options.chunk_length:", "given -1"}},
      // u: null, rank, B / D / L >= 1, dtype, strides, device
      {"UNull",
       kFwd,
       [](Scan&, Bound& b) { b["u"].data = nullptr; },
       {"selective_scan: u: expected a tensor (B, D, L), given null"}},
      {"URank",
       kFwd,
       [](Scan&, Bound& b) { b["u"].rank = 2; },
       {"u: expected rank 3, given rank 2 (2, 4)"}},
      {"UZeroBatch",
       kFwd,
       [](Scan&, Bound& b) { b["u"].shape[0] = 0; },
       {"u: expected batch B >= 1, given B = 0"}},
      {"UZeroChannels",
       kFwd,
       [](Scan&, Bound& b) { b["u"].shape[1] = 0; },
       {"u: expected channels D >= 1, given D = 0"}},
      {"UZeroLength",
       kFwd,
       [](Scan&, Bound& b) { b["u"].shape[2] = 0; },
       {"u: expected sequence length L >= 1, given L = 0"}},
      {"UDtype",
       kFwd,
       [](Scan&, Bound& b) { b["u"].dtype = DType::kF16; },
       {"u: expected dtype f32 or bf16, given f16"}},
      {"ULastDimStride",
       kFwd,
       [](Scan&, Bound& b) { b["u"].strides[2] = 2; },
       {"u: expected stride 1 on the last dimension, given stride 2"}},
      {"UNegativeStride",
       kFwd,
       [](Scan&, Bound& b) { b["u"].strides[0] = -36; },
       {"u: expected non-negative strides, given stride -36 on dimension 0"}},
      {"UOnCuda",
       kFwd,
       [](Scan&, Bound& b) { b["u"].device = Device::kCuda; },
       {"u: expected a CPU tensor, given a CUDA tensor"}},
      {"BackwardUZeroLength",
       kBwd,
       [](Scan&, Bound& b) { b["u"].shape[2] = 0; },
       {"u:", "given L = 0"}},
      {"BackwardUNull", kBwd, [](Scan&, Bound& b) { b["u"].data = nullptr; }, {"u:", "given null"}},
      // A: null, rank, N in [1, 256], shape, dtype, strides
      {"ANull",
       kFwd,
       [](Scan&, Bound& b) { b["A"].data = nullptr; },
       {"A: expected a tensor (D, N), given null"}},
      {"ARank",
       kFwd,
       [](Scan&, Bound& b) { b["A"].rank = 1; },
       {"A: expected rank 2, given rank 1 (4,)"}},
      {"AZeroState",
       kFwd,
       [](Scan&, Bound& b) { b["A"].shape[1] = 0; },
       {"A: expected state size N in [1, 256], given N = 0"}},
      {"AStateAbove256",
       kFwd,
       [](Scan&, Bound& b) { b["A"].shape[1] = 257; },
       {"A: expected state size N in [1, 256], given N = 257"}},
      {"AShape",
       kFwd,
       [](Scan&, Bound& b) { b["A"].shape[0] = 5; },
       {"A: expected shape (D, N) = (4, 3), given (5, 3)"}},
      {"ADtype",
       kFwd,
       [](Scan&, Bound& b) { b["A"].dtype = DType::kBF16; },
       {"A: expected dtype f32, given bf16"}},
      {"ALastDimStride",
       kFwd,
       [](Scan&, Bound& b) { b["A"].strides[1] = 3; },
       {"A: expected stride 1 on the last dimension, given stride 3"}},
      {"ANegativeStride",
       kFwd,
       [](Scan&, Bound& b) { b["A"].strides[0] = -3; },
       {"A: expected non-negative strides, given stride -3 on dimension 0"}},
      // delta
      {"DeltaNull",
       kFwd,
       [](Scan&, Bound& b) { b["delta"].data = nullptr; },
       {"delta: expected a tensor of shape (B, D, L) = (2, 4, 9), given null"}},
      {"DeltaShapeLength",
       kFwd,
       [](Scan&, Bound& b) { b["delta"].shape[2] = 8; },
       {"delta: expected shape (B, D, L) = (2, 4, 9), given (2, 4, 8)"}},
      {"DeltaShapeBatch",
       kFwd,
       [](Scan&, Bound& b) { b["delta"].shape[0] = 1; },
       {"delta: expected shape (B, D, L) = (2, 4, 9), given (1, 4, 9)"}},
      {"DeltaRank",
       kFwd,
       [](Scan&, Bound& b) { b["delta"].rank = 2; },
       {"delta: expected shape (B, D, L) = (2, 4, 9), given (2, 4)"}},
      {"DeltaDtype",
       kFwd,
       [](Scan&, Bound& b) { b["delta"].dtype = DType::kI32; },
       {"delta: expected dtype f32 or bf16, given i32"}},
      {"DeltaLastDimStride",
       kFwd,
       [](Scan&, Bound& b) { b["delta"].strides[2] = 0; },
       {"delta: expected stride 1 on the last dimension, given stride 0"}},
      {"DeltaNegativeStride",
       kFwd,
       [](Scan&, Bound& b) { b["delta"].strides[1] = -9; },
       {"delta: expected non-negative strides, given stride -9 on dimension 1"}},
      {"DeltaOnCuda",
       kFwd,
       [](Scan&, Bound& b) { b["delta"].device = Device::kCuda; },
       {"delta: expected a CPU tensor, given a CUDA tensor"}},
  };
}

std::vector<Bad> BCRules() {
  return {
      // B (variable in the valid call): null, rank, each form's shape, groups, dtype, strides
      {"BNull",
       kFwd,
       [](Scan&, Bound& b) { b["B"].data = nullptr; },
       {"B: expected a tensor (D, N), (B, N, L) or (B, G, N, L), given null"}},
      {"BRankFive",
       kFwd,
       [](Scan&, Bound& b) {
         b["B"] = b.Spare({2, 1, 2, 3, 9}, DType::kF32);
       },
       {"B: expected rank 2 or 3 or 4, given rank 5 (2, 1, 2, 3, 9)"}},
      {"BRankOne",
       kFwd,
       [](Scan&, Bound& b) { b["B"] = b.Spare({3}, DType::kF32); },
       {"B: expected rank 2 or 3 or 4, given rank 1"}},
      {"BConstantShape",
       kFwd,
       [](Scan&, Bound& b) {
         b["B"] = b.Spare({4, 2}, DType::kF32);
       },
       {"B: expected shape (D, N) = (4, 3), given (4, 2)"}},
      {"BVariableShape",
       kFwd,
       [](Scan&, Bound& b) {
         b["B"] = b.Spare({2, 3, 10}, DType::kF32);
       },
       {"B: expected shape (B, N, L) = (2, 3, 9), given (2, 3, 10)"}},
      {"BGroupedShape",
       kFwd,
       [](Scan&, Bound& b) {
         b["B"] = b.Spare({2, 2, 4, 9}, DType::kF32);
       },
       {"B: expected shape (B, G, N, L) = (2, 2, 3, 9), given (2, 2, 4, 9)"}},
      {"BGroupsNotDividingD",
       kFwd,
       [](Scan&, Bound& b) {
         b["B"] = b.Spare({2, 3, 3, 9}, DType::kF32);
       },
       {"B: expected a group count G dividing D = 4, given G = 3"}},
      {"BZeroGroups",
       kFwd,
       [](Scan&, Bound& b) {
         b["B"] = b.Spare({2, 1, 3, 9}, DType::kF32);  // memory of its own: not a null tensor
         b["B"].shape[1] = 0;
       },
       {"B: expected a group count G dividing D = 4, given G = 0"}},
      {"BDtype",
       kFwd,
       [](Scan&, Bound& b) { b["B"].dtype = DType::kF16; },
       {"B: expected dtype f32 or bf16, given f16"}},
      {"BLastDimStride",
       kFwd,
       [](Scan&, Bound& b) { b["B"].strides[2] = 2; },
       {"B: expected stride 1 on the last dimension, given stride 2"}},
      {"BNegativeStride",
       kFwd,
       [](Scan&, Bound& b) { b["B"].strides[1] = -9; },
       {"B: expected non-negative strides, given stride -9 on dimension 1"}},
      // C (grouped in the valid call)
      {"CNull",
       kFwd,
       [](Scan&, Bound& b) { b["C"].data = nullptr; },
       {"C: expected a tensor (D, N), (B, N, L) or (B, G, N, L), given null"}},
      {"CRank",
       kFwd,
       [](Scan&, Bound& b) {
         b["C"] = b.Spare({2, 1, 2, 3, 9}, DType::kF32);
       },
       {"C: expected rank 2 or 3 or 4, given rank 5"}},
      {"CConstantShape",
       kFwd,
       [](Scan&, Bound& b) {
         b["C"] = b.Spare({3, 3}, DType::kF32);
       },
       {"C: expected shape (D, N) = (4, 3), given (3, 3)"}},
      {"CVariableShape",
       kFwd,
       [](Scan&, Bound& b) {
         b["C"] = b.Spare({1, 3, 9}, DType::kF32);
       },
       {"C: expected shape (B, N, L) = (2, 3, 9), given (1, 3, 9)"}},
      {"CGroupedShape",
       kFwd,
       [](Scan&, Bound& b) { b["C"].shape[3] = 8; },
       {"C: expected shape (B, G, N, L) = (2, 2, 3, 9), given (2, 2, 3, 8)"}},
      {"CGroupsNotDividingD",
       kFwd,
       [](Scan&, Bound& b) {
         b["C"] = b.Spare({2, 8, 3, 9}, DType::kF32);
       },
       {"C: expected a group count G dividing D = 4, given G = 8"}},
      {"CDtype",
       kFwd,
       [](Scan&, Bound& b) { b["C"].dtype = DType::kI64; },
       {"C: expected dtype f32 or bf16, given i64"}},
      {"CLastDimStride",
       kFwd,
       [](Scan&, Bound& b) { b["C"].strides[3] = 3; },
       {"C: expected stride 1 on the last dimension, given stride 3"}},
      {"CNegativeStride",
       kFwd,
       [](Scan&, Bound& b) { b["C"].strides[0] = -54; },
       {"C: expected non-negative strides, given stride -54 on dimension 0"}},
      // the optional inputs
      {"DShape",
       kFwd,
       [](Scan&, Bound& b) { b["D"].shape[0] = 3; },
       {"D: expected shape (D) = (4,), given (3,)"}},
      {"DRank",
       kFwd,
       [](Scan&, Bound& b) {
         b["D"] = b.Spare({4, 1}, DType::kF32);
       },
       {"D: expected shape (D) = (4,), given (4, 1)"}},
      {"DDtype",
       kFwd,
       [](Scan&, Bound& b) { b["D"].dtype = DType::kBF16; },
       {"D: expected dtype f32, given bf16"}},
      {"DStride",
       kFwd,
       [](Scan&, Bound& b) { b["D"].strides[0] = 2; },
       {"D: expected stride 1 on the last dimension, given stride 2"}},
      {"ZShape",
       kFwd,
       [](Scan&, Bound& b) { b["z"].shape[1] = 5; },
       {"z: expected shape (B, D, L) = (2, 4, 9), given (2, 5, 9)"}},
      {"ZDtype",
       kFwd,
       [](Scan&, Bound& b) { b["z"].dtype = DType::kI32; },
       {"z: expected dtype f32 or bf16, given i32"}},
      {"ZLastDimStride",
       kFwd,
       [](Scan&, Bound& b) { b["z"].strides[2] = 4; },
       {"z: expected stride 1 on the last dimension, given stride 4"}},
      {"ZNegativeStride",
       kFwd,
       [](Scan&, Bound& b) { b["z"].strides[0] = -36; },
       {"z: expected non-negative strides, given stride -36 on dimension 0"}},
      {"DeltaBiasShape",
       kFwd,
       [](Scan&, Bound& b) { b["delta_bias"].shape[0] = 8; },
       {"delta_bias: expected shape (D) = (4,), given (8,)"}},
      {"DeltaBiasDtype",
       kFwd,
       [](Scan&, Bound& b) { b["delta_bias"].dtype = DType::kF16; },
       {"delta_bias: expected dtype f32, given f16"}},
      {"DeltaBiasStride",
       kFwd,
       [](Scan&, Bound& b) { b["delta_bias"].strides[0] = 3; },
       {"delta_bias: expected stride 1 on the last dimension, given stride 3"}},
      {"InitialStateShape",
       kFwd,
       [](Scan&, Bound& b) { b["initial_state"].shape[2] = 4; },
       {"initial_state: expected shape (B, D, N) = (2, 4, 3), given (2, 4, 4)"}},
      {"InitialStateDtype",
       kFwd,
       [](Scan&, Bound& b) { b["initial_state"].dtype = DType::kBF16; },
       {"initial_state: expected dtype f32, given bf16"}},
      {"InitialStateStride",
       kFwd,
       [](Scan&, Bound& b) { b["initial_state"].strides[2] = 2; },
       {"initial_state: expected stride 1 on the last dimension, given stride 2"}},
  };
}

std::vector<Bad> OutputRules() {
  return {
      // out and final_state (forward)
      {"OutNull",
       kFwd,
       [](Scan&, Bound& b) { b["out"] = Tensor{}; },
       {"out: expected a tensor of shape (B, D, L) = (2, 4, 9), given null"}},
      {"OutShape",
       kFwd,
       [](Scan&, Bound& b) { b["out"].shape[1] = 3; },
       {"out: expected shape (B, D, L) = (2, 4, 9), given (2, 3, 9)"}},
      {"OutDtypeNotU",
       kFwd,
       [](Scan&, Bound& b) { b["out"].dtype = DType::kBF16; },
       {"out: expected dtype f32, given bf16"}},
      {"OutDtypeNotBf16U",
       kFwd,
       [](Scan&, Bound& b) {
         for (const char* name : {"u", "delta", "z", "B", "C"}) b[name].dtype = DType::kBF16;
       },
       {"out: expected dtype bf16, given f32"}},
      {"OutStride",
       kFwd,
       [](Scan&, Bound& b) { b["out"].strides[2] = 2; },
       {"out: expected stride 1 on the last dimension, given stride 2"}},
      {"OutOnCuda",
       kFwd,
       [](Scan&, Bound& b) { b["out"].device = Device::kCuda; },
       {"out: expected a CPU tensor, given a CUDA tensor"}},
      {"FinalStateShape",
       kFwd,
       [](Scan&, Bound& b) { b["final_state"].shape[0] = 1; },
       {"final_state: expected shape (B, D, N) = (2, 4, 3), given (1, 4, 3)"}},
      {"FinalStateDtype",
       kFwd,
       [](Scan&, Bound& b) { b["final_state"].dtype = DType::kBF16; },
       {"final_state: expected dtype f32, given bf16"}},
      {"FinalStateStride",
       kFwd,
       [](Scan&, Bound& b) { b["final_state"].strides[2] = 5; },
       {"final_state: expected stride 1 on the last dimension, given stride 5"}},
      // dout and dfinal_state (backward)
      {"DoutNull",
       kBwd,
       [](Scan&, Bound& b) { b["dout"] = Tensor{}; },
       {"dout: expected a tensor of shape (B, D, L) = (2, 4, 9), given null"}},
      {"DoutShape",
       kBwd,
       [](Scan&, Bound& b) { b["dout"].shape[2] = 10; },
       {"dout: expected shape (B, D, L) = (2, 4, 9), given (2, 4, 10)"}},
      {"DoutDtype",
       kBwd,
       [](Scan&, Bound& b) { b["dout"].dtype = DType::kBF16; },
       {"dout: expected dtype f32, given bf16"}},
      {"DoutStride",
       kBwd,
       [](Scan&, Bound& b) { b["dout"].strides[2] = 2; },
       {"dout: expected stride 1 on the last dimension, given stride 2"}},
      {"DfinalStateShape",
       kBwd,
       [](Scan&, Bound& b) { b["dfinal_state"].shape[1] = 2; },
       {"dfinal_state: expected shape (B, D, N) = (2, 4, 3), given (2, 2, 3)"}},
      {"DfinalStateDtype",
       kBwd,
       [](Scan&, Bound& b) { b["dfinal_state"].dtype = DType::kBF16; },
       {"dfinal_state: expected dtype f32, given bf16"}},
      // chunk states (B, D, K, N), K = ceil(L / Q): Q = 64 gives K = 1, Q = 4 gives K = 3
      {"ChunkStatesShape",
       kFwd,
       [](Scan&, Bound& b) { b["chunk_states"].shape[2] = 2; },
       {"chunk_states: expected shape (B, D, K, N), K = ceil(L / Q) = (2, 4, 1, 3), given (2, 4, "
        "2, 3)"}},
      {"ChunkStatesShapeForTheChunkLength",
       kBwd,
       [](Scan& p, Bound& b) {
         p.chunk = 4;
         BindChunkStates(b, {2, 4, 1, 3});
       },
       {"chunk_states: expected shape (B, D, K, N), K = ceil(L / Q) = (2, 4, 3, 3), given (2, 4, "
        "1, 3)"}},
      {"ChunkStatesRank",
       kBwd,
       [](Scan&, Bound& b) {
         BindChunkStates(b, {2, 4, 3});
       },
       {"chunk_states", "(2, 4, 1, 3)", "given (2, 4, 3)"}},
      {"ChunkStatesOnCuda",
       kBwd,
       [](Scan&, Bound& b) {
         BindChunkStates(b, {2, 4, 1, 3});
         b["chunk_states"].device = Device::kCuda;
       },
       {"chunk_states: expected a CPU tensor, given a CUDA tensor"}},
      {"ChunkStatesWithTheCudaBackend",
       kFwd,
       [](Scan&, Bound& b) {
         for (const char* name : {"u", "delta", "A", "B", "C", "D", "z", "delta_bias",
                                  "initial_state", "out", "final_state", "chunk_states"})
           b[name].device = Device::kCuda;
       },
       {"chunk_states: expected undefined on the CUDA backend (CPU only for now), given a CUDA "
        "tensor"}},
      {"ChunkStatesDtype",
       kFwd,
       [](Scan&, Bound& b) { b["chunk_states"].dtype = DType::kBF16; },
       {"chunk_states: expected dtype f32, given bf16"}},
  };
}

// Each gradient's shape (its input's) and dtype (its input's); one for an absent input.
std::vector<Bad> GradientRules() {
  return {
      {"DuShape",
       kBwd,
       [](Scan&, Bound& b) { b["du"].shape[0] = 1; },
       {"du: expected shape (as u) = (2, 4, 9), given (1, 4, 9)"}},
      {"DuDtype",
       kBwd,
       [](Scan&, Bound& b) { b["du"].dtype = DType::kBF16; },
       {"du: expected dtype f32, given bf16"}},
      {"DuStride",
       kBwd,
       [](Scan&, Bound& b) { b["du"].strides[2] = 2; },
       {"du: expected stride 1 on the last dimension, given stride 2"}},
      {"DdeltaShape",
       kBwd,
       [](Scan&, Bound& b) { b["ddelta"].shape[1] = 2; },
       {"ddelta: expected shape (as delta) = (2, 4, 9), given (2, 2, 9)"}},
      {"DdeltaDtype",
       kBwd,
       [](Scan&, Bound& b) { b["ddelta"].dtype = DType::kF16; },
       {"ddelta: expected dtype f32, given f16"}},
      {"DAShape",
       kBwd,
       [](Scan&, Bound& b) { b["dA"].shape[1] = 2; },
       {"dA: expected shape (as A) = (4, 3), given (4, 2)"}},
      {"DADtype",
       kBwd,
       [](Scan&, Bound& b) { b["dA"].dtype = DType::kBF16; },
       {"dA: expected dtype f32, given bf16"}},
      {"DBOtherForm",
       kBwd,
       [](Scan&, Bound& b) {
         b["dB"] = b.Spare({4, 3}, DType::kF32);
       },
       {"dB: expected shape (as B) = (2, 3, 9), given (4, 3)"}},
      {"DBDtype",
       kBwd,
       [](Scan&, Bound& b) { b["dB"].dtype = DType::kBF16; },
       {"dB: expected dtype f32, given bf16"}},
      {"DCShape",
       kBwd,
       [](Scan&, Bound& b) { b["dC"].shape[3] = 8; },
       {"dC: expected shape (as C) = (2, 2, 3, 9), given (2, 2, 3, 8)"}},
      {"DCDtype",
       kBwd,
       [](Scan&, Bound& b) { b["dC"].dtype = DType::kBF16; },
       {"dC: expected dtype f32, given bf16"}},
      {"DDShape",
       kBwd,
       [](Scan&, Bound& b) { b["dD"].shape[0] = 5; },
       {"dD: expected shape (as D) = (4,), given (5,)"}},
      {"DDDtype",
       kBwd,
       [](Scan&, Bound& b) { b["dD"].dtype = DType::kBF16; },
       {"dD: expected dtype f32, given bf16"}},
      {"DzShape",
       kBwd,
       [](Scan&, Bound& b) { b["dz"].shape[2] = 1; },
       {"dz: expected shape (as z) = (2, 4, 9), given (2, 4, 1)"}},
      {"DzDtype",
       kBwd,
       [](Scan&, Bound& b) { b["dz"].dtype = DType::kBF16; },
       {"dz: expected dtype f32, given bf16"}},
      {"DdeltaBiasShape",
       kBwd,
       [](Scan&, Bound& b) { b["ddelta_bias"].shape[0] = 1; },
       {"ddelta_bias: expected shape (as delta_bias) = (4,), given (1,)"}},
      {"DdeltaBiasDtype",
       kBwd,
       [](Scan&, Bound& b) { b["ddelta_bias"].dtype = DType::kF16; },
       {"ddelta_bias: expected dtype f32, given f16"}},
      {"DinitialStateShape",
       kBwd,
       [](Scan&, Bound& b) { b["dinitial_state"].shape[2] = 4; },
       {"dinitial_state: expected shape (as initial_state) = (2, 4, 3), given (2, 4, 4)"}},
      {"DinitialStateDtype",
       kBwd,
       [](Scan&, Bound& b) { b["dinitial_state"].dtype = DType::kBF16; },
       {"dinitial_state: expected dtype f32, given bf16"}},
      {"DDWithoutD",
       kBwd,
       [](Scan&, Bound& b) { b["D"] = Tensor{}; },
       {"dD: expected no tensor, since D is absent, given a tensor of shape (4,)"}},
      {"DzWithoutZ",
       kBwd,
       [](Scan&, Bound& b) { b["z"] = Tensor{}; },
       {"dz: expected no tensor, since z is absent, given a tensor of shape (2, 4, 9)"}},
      {"DdeltaBiasWithoutDeltaBias",
       kBwd,
       [](Scan&, Bound& b) { b["delta_bias"] = Tensor{}; },
       {"ddelta_bias: expected no tensor, since delta_bias is absent, given a tensor of shape "
        "(4,)"}},
      {"DinitialStateWithoutInitialState",
       kBwd,
       [](Scan&, Bound& b) { b["initial_state"] = Tensor{}; },
       {"dinitial_state: expected no tensor, since initial_state is absent, given a tensor of "
        "shape (2, 4, 3)"}},
  };
}

OpSpec<Scan> SelectiveScanSpec() {
  return {.name = "selective_scan",
          .make = Make,
          .oracle_forward = OracleForward,
          .oracle_backward = OracleBackward,
          .forward = Forward,
          .backward = Backward,
          .cases = Cases(),
          .valid = Valid(),
          .bad_inputs =
              Concat<Scan>({OptionAndInputRules(), BCRules(), OutputRules(), GradientRules()}),
          .cuda_variants = {&cuda::kScanVariants, &cuda::kScanBackwardVariants},
          // Step 2e-4: the oracle-vs-FD error here is rounding (it grows as the step shrinks:
          // 3.5e-8 at 1e-4, 2.4e-8 at 5e-5, 7.9e-9 at 2e-4 for seed 1796089282739622848, dA,
          // L = 1); over 300 seeds the worst was 4.6e-9 at 1e-4, 1.2e-9 at 2e-4, and 1.4e-8 at
          // 4e-4, where the O(h^4) truncation shows.
          .fd = {.step = 2e-4, .oracle = 2e-8, .op = 1e-4, .richardson = true}};
}

}  // namespace

SSMKIT_HARNESS_OP(SelectiveScanSpec);

}  // namespace ssmkit::testing::harness
