// Packed sequences (variable-length batches) in the selective scan: cu_seqlens with
// per-sequence initial states and varlen_states, and seq_idx, forward and backward, on fresh
// random inputs with poisoned outputs.
//   - The property test: a packed batch of S sequences of different lengths (1, and lengths
//     that are multiples of no chunk length, some starting on a chunk boundary) equals each
//     sequence run alone: out, varlen_states, final_state and every gradient, for every
//     algorithm, B/C form and checkpoint interval, with and without the forward's chunk states.
//   - The packed call against the fp64 oracle (which implements the packing independently).
//   - The oracle's analytic backward against central finite differences of its forward, and
//     the fast backward against the same differences.
//   - Bit-exact determinism of the packed backward.
// Errors are ||got - want|| / ||want||.
#include <array>
#include <cctype>
#include <ostream>
#include <string>
#include <vector>

#include "selective_scan_fixture.hpp"
#include "varlen_test_util.hpp"

namespace ssmkit::testing {
namespace {

// Packed against alone: the same steps in the same order, except that sums over time (dA,
// dD, ddelta_bias, a constant dB / dC) are added up per sequence. Measured <= 3e-7.
constexpr double kPackedAloneBound = 1e-5;
// Packed fast kernels against the fp64 oracle (as tests/selective_scan_*_test.cpp): f32.
constexpr double kOracleBound = 1e-4;
// bf16 tensors: the oracle reads the same rounded inputs, so what remains is the rounding of
// the outputs and gradients to bf16 (2^-9 relative per element).
constexpr double kBf16OracleBound = 1e-2;
// The oracle against finite differences, and the fast backward against them.
constexpr double kOracleFdBound = 2e-8;
constexpr double kFastFdBound = 1e-4;

constexpr ScanAlgorithm kAlgorithms[] = {ScanAlgorithm::kSequential, ScanAlgorithm::kChunked,
                                         ScanAlgorithm::kBlelloch, ScanAlgorithm::kHillisSteele,
                                         ScanAlgorithm::kLogSpace};

// Positions [l0, l0 + len) of batch row b of a tensor whose last dimension is time ((B, D, L),
// (B, N, L), (B, G, N, L)); a constant (D, N) B or C is returned as is.
Tensor Slice(const Tensor& t, int64_t b, int64_t l0, int64_t len) {
  if (t.rank == 2) return t;
  return Narrow(Row(t, b), t.rank - 1, l0, len);
}

// A packed problem: `lengths` per batch row (each row the same layout), inputs from the
// fixture (without its h0), and initial states either one per sequence (cu_seqlens, batch 1)
// or one per row.
struct VarlenCase {
  std::vector<int64_t> lengths = {1, 15, 64, 3, 45, 1, 29};  // starts 16, 80, 128: on chunks
  int64_t batch = 1, dim = 6, dstate = 5, groups = 2;
  BCForm b_form = BCForm::kVariable, c_form = BCForm::kVariable;
  bool cu_seqlens = true;  // else seq_idx
  bool with_h0 = true;     // (S, D, N) with cu_seqlens, else (B, D, N)
  DType dtype = DType::kF32;

  std::string Name() const {
    const char* forms = "cvg";
    std::string s = cu_seqlens ? "cu_seqlens" : "seq_idx";
    s += " B=" + std::to_string(batch) + " S=" + std::to_string(lengths.size()) +
         " B/C=" + forms[static_cast<int>(b_form)] + forms[static_cast<int>(c_form)] +
         (with_h0 ? " h0" : "") + " " + DTypeName(dtype);
    return s;
  }
};

// gtest prints a parameter with this (its bytes otherwise).
void PrintTo(const VarlenCase& c, std::ostream* os) { *os << c.Name(); }

struct VarlenProblem {
  VarlenCase vc;
  std::vector<int64_t> offsets;  // (S + 1) within a row
  ScanProblem prob;
  int64_t S = 0, h0_rows = 0;
  PaddedTensor h0;
  std::vector<double> h0_d;
  HostTensor cu, seq_idx;
  std::vector<int64_t> cu_v;
  std::vector<int32_t> seq_idx_v;

  static ScanCase MakeCase(const VarlenCase& vc) {
    ScanCase c;
    c.batch = vc.batch;
    c.dim = vc.dim;
    c.dstate = vc.dstate;
    c.groups = vc.groups;
    c.b_form = vc.b_form;
    c.c_form = vc.c_form;
    c.has_h0 = false;
    c.dtype = vc.dtype;
    c.seqlen = 0;
    for (int64_t len : vc.lengths) c.seqlen += len;
    return c;
  }

  VarlenProblem(const VarlenCase& c, Rng& rng) : vc(c), prob(MakeCase(c), rng) {
    S = static_cast<int64_t>(vc.lengths.size());
    offsets.assign(1, 0);
    for (int64_t len : vc.lengths) offsets.push_back(offsets.back() + len);
    const int64_t L = offsets.back();
    if (vc.cu_seqlens) {
      cu_v = offsets;
      cu = HostTensor({S + 1}, DType::kI64);
      cu.Fill(std::vector<double>(cu_v.begin(), cu_v.end()));
    } else {
      seq_idx = HostTensor({vc.batch, L}, DType::kI32);
      for (int64_t b = 0; b < vc.batch; ++b) {
        for (int64_t k = 0; k < S; ++k) {  // ids need not be consecutive, only non-decreasing
          for (int64_t l = offsets[k]; l < offsets[k + 1]; ++l)
            seq_idx_v.push_back(static_cast<int32_t>(3 * k + b));
        }
      }
      seq_idx.Fill(std::vector<double>(seq_idx_v.begin(), seq_idx_v.end()));
    }
    if (vc.with_h0) {
      h0_rows = vc.cu_seqlens ? S : vc.batch;
      h0 = PaddedTensor({h0_rows, vc.dim, vc.dstate}, DType::kF32);
      h0_d = h0.Fill(rng.NormalVec(h0_rows * vc.dim * vc.dstate));
    }
  }

  int64_t L() const { return offsets.back(); }
  int64_t StateRows() const { return vc.cu_seqlens ? S : 0; }

  SelectiveScanInputs Inputs() {
    SelectiveScanInputs in = prob.Inputs();
    if (vc.with_h0) in.initial_state = h0.view();
    if (vc.cu_seqlens) in.cu_seqlens = cu.view();
    if (!vc.cu_seqlens) in.seq_idx = seq_idx.view();
    return in;
  }

  // Sequence k of row b on its own.
  SelectiveScanInputs AloneInputs(int64_t b, int64_t k) {
    SelectiveScanInputs full = prob.Inputs(), in = full;
    const int64_t l0 = offsets[k], len = offsets[k + 1] - l0;
    in.u = Slice(full.u, b, l0, len);
    in.delta = Slice(full.delta, b, l0, len);
    in.B = Slice(full.B, b, l0, len);
    in.C = Slice(full.C, b, l0, len);
    if (full.z.defined()) in.z = Slice(full.z, b, l0, len);
    in.initial_state = Tensor{};
    if (vc.with_h0 && vc.cu_seqlens) in.initial_state = Row(h0.view(), k);
    if (vc.with_h0 && !vc.cu_seqlens && k == 0) in.initial_state = Row(h0.view(), b);
    return in;
  }

  ref::ScanShape Shape() const {
    ref::ScanShape s = prob.Shape();
    s.nseqs = vc.cu_seqlens ? S : 0;
    s.h0_per_sequence = vc.cu_seqlens && vc.with_h0;
    return s;
  }
  ref::ScanInputs RefInputs() const {
    ref::ScanInputs in = prob.RefInputs();
    in.h0 = vc.with_h0 ? h0_d.data() : nullptr;
    in.cu_seqlens = vc.cu_seqlens ? cu_v.data() : nullptr;
    in.seq_idx = vc.cu_seqlens ? nullptr : seq_idx_v.data();
    return in;
  }
};

// A forward's outputs, poisoned: out (B, D, L), final_state (B, D, N), varlen_states
// (S, D, N) with cu_seqlens.
struct ForwardResult {
  HostTensor out, final_state, varlen;
  explicit ForwardResult(const VarlenProblem& vp) {
    const ScanCase& c = vp.prob.c;
    out = HostTensor({c.batch, c.dim, c.seqlen}, c.dtype);
    final_state = HostTensor({c.batch, c.dim, c.dstate}, DType::kF32);
    if (vp.StateRows()) varlen = HostTensor({vp.StateRows(), c.dim, c.dstate}, DType::kF32);
    out.Poison();
    final_state.Poison();
    varlen.Poison();
  }
};

constexpr int kNumGrads = kNumScanGrads;

// Every gradient, poisoned, shaped like its input (none for an absent input).
struct GradTensors {
  std::array<HostTensor, kNumGrads> t;
  GradTensors(VarlenProblem& vp) {
    const SelectiveScanInputs in = vp.Inputs();
    for (int i = 0; i < kNumGrads; ++i) {
      const Tensor& input = in.*SelectiveScanTensors::grads[i].input;
      if (!input.defined()) continue;
      t[i] = HostTensor(std::vector<int64_t>(input.shape.begin(), input.shape.begin() + input.rank),
                        input.dtype);
      t[i].Poison();
    }
  }
  SelectiveScanGrads Views() {
    Tensor views[kNumGrads];
    for (int i = 0; i < kNumGrads; ++i) {
      if (t[i].numel() > 0) views[i] = t[i].view();
    }
    return StructFromList(SelectiveScanTensors::grads, views);
  }
};

// dout, dfinal_state, dvarlen_states of a random projection loss.
struct OutputGrads {
  HostTensor dout, dfinal, dvarlen;
  std::vector<double> dout_d, dfinal_d, dvarlen_d;
  OutputGrads(const VarlenProblem& vp, Rng& rng) {
    const ScanCase& c = vp.prob.c;
    dout = HostTensor({c.batch, c.dim, c.seqlen}, c.dtype);
    dout_d = dout.Fill(rng.NormalVec(dout.numel()));
    dfinal = HostTensor({c.batch, c.dim, c.dstate}, DType::kF32);
    dfinal_d = dfinal.Fill(rng.NormalVec(dfinal.numel()));
    if (vp.StateRows()) {
      dvarlen = HostTensor({vp.StateRows(), c.dim, c.dstate}, DType::kF32);
      dvarlen_d = dvarlen.Fill(rng.NormalVec(dvarlen.numel()));
    }
  }
  SelectiveScanOutputGrads Views() {
    return {dout.view(), dfinal.view(), dvarlen.numel() ? dvarlen.view() : Tensor{}};
  }
};

void RunPackedForward(VarlenProblem& vp, ForwardResult& r, const SelectiveScanOptions& options,
                      const Tensor& chunk_states = {}) {
  SelectiveScanOutputs outputs{r.out.view(), r.final_state.view(), chunk_states,
                               vp.StateRows() ? r.varlen.view() : Tensor{}};
  const Status s = SelectiveScanForward(vp.Inputs(), outputs, options);
  ASSERT_TRUE(s.ok()) << s.message();
}

// Every sequence alone, writing its slice of `r` (its final state into varlen's row, or for
// seq_idx into final_state when it is a row's last).
void RunAloneForward(VarlenProblem& vp, ForwardResult& r, const SelectiveScanOptions& options) {
  for (int64_t b = 0; b < vp.vc.batch; ++b) {
    for (int64_t k = 0; k < vp.S; ++k) {
      const int64_t l0 = vp.offsets[k], len = vp.offsets[k + 1] - l0;
      Tensor final_state = vp.StateRows() ? Row(r.varlen.view(), k) : Tensor{};
      if (!vp.StateRows() && k == vp.S - 1) final_state = Row(r.final_state.view(), b);
      const Status s = SelectiveScanForward(vp.AloneInputs(b, k), Slice(r.out.view(), b, l0, len),
                                            final_state, options);
      ASSERT_TRUE(s.ok()) << s.message();
    }
  }
  if (vp.StateRows()) {  // final_state = the last sequence's last state
    const std::vector<double> v = r.varlen.ToDouble();
    const int64_t row = vp.vc.dim * vp.vc.dstate;
    r.final_state.Fill(std::vector<double>(v.end() - row, v.end()));
  }
}

void RunPackedBackward(VarlenProblem& vp, OutputGrads& og, GradTensors& g,
                       const SelectiveScanOptions& options, const Tensor& chunk_states = {}) {
  const Status s = SelectiveScanBackward(vp.Inputs(), og.Views(), chunk_states, g.Views(), options);
  ASSERT_TRUE(s.ok()) << s.message();
}

// Every sequence alone: per-step gradients into their slices, the initial states' into their
// rows, and the sums over time (dA, dD, ddelta_bias, a constant dB or dC) added up here.
std::array<std::vector<double>, kNumGrads> RunAloneBackward(VarlenProblem& vp, OutputGrads& og,
                                                            GradTensors& g,
                                                            const SelectiveScanOptions& options) {
  const ScanCase& c = vp.prob.c;
  const bool summed[kNumGrads] = {
      false, false, true, c.b_form == BCForm::kConstant, c.c_form == BCForm::kConstant, true,
      false, true,  false};
  std::array<std::vector<double>, kNumGrads> sums;
  for (int i = 0; i < kNumGrads; ++i) {
    if (summed[i] && g.t[i].numel()) sums[i].assign(g.t[i].numel(), 0.0);
  }
  // Any uncovered row of dinitial_state (seq_idx: sequences after the first start from zeros
  // and have no such row) must still be written, so it is covered by one alone run each.
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t k = 0; k < vp.S; ++k) {
      const int64_t l0 = vp.offsets[k], len = vp.offsets[k + 1] - l0;
      SelectiveScanInputs in = vp.AloneInputs(b, k);
      std::array<HostTensor, kNumGrads> part;  // the summed gradients of this run
      SelectiveScanGrads grads;
      Tensor* out[kNumGrads] = {&grads.du, &grads.ddelta,      &grads.dA,
                                &grads.dB, &grads.dC,          &grads.dD,
                                &grads.dz, &grads.ddelta_bias, &grads.dinitial_state};
      for (int i = 0; i < kNumGrads; ++i) {
        if (!g.t[i].numel()) continue;
        if (summed[i]) {
          const Tensor full = g.t[i].view();
          part[i] = HostTensor(
              std::vector<int64_t>(full.shape.begin(), full.shape.begin() + full.rank), full.dtype);
          *out[i] = part[i].view();
        } else if (i == 8) {
          if (in.initial_state.defined()) *out[i] = Row(g.t[i].view(), vp.StateRows() ? k : b);
        } else {
          *out[i] = Slice(g.t[i].view(), b, l0, len);
        }
      }
      // The gradient reaching this sequence's last state.
      HostTensor dlast({1, c.dim, c.dstate}, DType::kF32);
      std::vector<double> dlast_v(c.dim * c.dstate, 0.0);
      const int64_t row = c.dim * c.dstate;
      for (int64_t i = 0; i < row; ++i) {
        if (vp.StateRows()) dlast_v[i] += og.dvarlen_d[k * row + i];
        if (k == vp.S - 1) dlast_v[i] += og.dfinal_d[b * row + i];
      }
      dlast.Fill(dlast_v);
      const Status s = SelectiveScanBackward(in, Slice(og.dout.view(), b, l0, len), dlast.view(),
                                             grads, options);
      EXPECT_TRUE(s.ok()) << s.message();
      if (!s.ok()) return {};
      for (int i = 0; i < kNumGrads; ++i) {
        if (sums[i].empty()) continue;
        const std::vector<double> v = part[i].ToDouble();
        for (size_t j = 0; j < v.size(); ++j) sums[i][j] += v[j];
      }
    }
  }
  std::array<std::vector<double>, kNumGrads> want;
  for (int i = 0; i < kNumGrads; ++i) {
    if (g.t[i].numel()) want[i] = sums[i].empty() ? g.t[i].ToDouble() : sums[i];
  }
  return want;
}

std::vector<VarlenCase> PropertyCases() {
  std::vector<VarlenCase> cases;
  VarlenCase base;
  cases.push_back(base);  // variable B and C: the channel-tiled paths
  VarlenCase grouped = base;
  grouped.b_form = BCForm::kGrouped;  // tiles follow the finer grouping
  cases.push_back(grouped);
  VarlenCase constant = base;
  constant.b_form = BCForm::kConstant;  // the per-row paths
  constant.c_form = BCForm::kGrouped;
  cases.push_back(constant);
  VarlenCase no_h0 = base;
  no_h0.with_h0 = false;
  no_h0.lengths = {7, 1, 1, 40};
  cases.push_back(no_h0);
  VarlenCase one_step = base;  // L = 1: the single-step forward
  one_step.lengths = {1};
  cases.push_back(one_step);
  VarlenCase bf16 = base;
  bf16.dtype = DType::kBF16;
  bf16.lengths = {33, 2, 20};
  cases.push_back(bf16);
  VarlenCase seq_idx = base;  // seq_idx: two rows, zero states after each row's first
  seq_idx.cu_seqlens = false;
  seq_idx.batch = 2;
  seq_idx.lengths = {9, 1, 30, 17};
  cases.push_back(seq_idx);
  VarlenCase seq_idx_const = seq_idx;
  seq_idx_const.c_form = BCForm::kConstant;
  cases.push_back(seq_idx_const);
  return cases;
}

class ScanVarlenProperty : public ::testing::TestWithParam<VarlenCase> {};

TEST_P(ScanVarlenProperty, PackedForwardEqualsEachSequenceAlone) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  VarlenProblem vp(GetParam(), rng);
  for (ScanAlgorithm algorithm : kAlgorithms) {
    for (int64_t chunk : {int64_t{0}, int64_t{16}}) {
      SCOPED_TRACE(std::string(ScanAlgorithmName(algorithm)) + " chunk_length " +
                   std::to_string(chunk));
      const SelectiveScanOptions options{algorithm, chunk};
      ForwardResult packed(vp), alone(vp);
      RunPackedForward(vp, packed, options);
      RunAloneForward(vp, alone, options);
      EXPECT_LE(RelativeError(packed.out.ToDouble(), alone.out.ToDouble()), kPackedAloneBound);
      EXPECT_LE(RelativeError(packed.final_state.ToDouble(), alone.final_state.ToDouble()),
                kPackedAloneBound);
      if (vp.StateRows()) {
        EXPECT_LE(RelativeError(packed.varlen.ToDouble(), alone.varlen.ToDouble()),
                  kPackedAloneBound);
      }
    }
  }
}

TEST_P(ScanVarlenProperty, PackedBackwardEqualsEachSequenceAlone) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  VarlenProblem vp(GetParam(), rng);
  OutputGrads og(vp, rng);
  for (int64_t chunk : {int64_t{0}, int64_t{16}, int64_t{5}}) {
    for (bool with_chunk_states : {false, true}) {
      SCOPED_TRACE("chunk_length " + std::to_string(chunk) +
                   (with_chunk_states ? " with the forward's chunk states" : ""));
      const SelectiveScanOptions options{ScanAlgorithm::kSequential, chunk};
      HostTensor chunk_states;
      if (with_chunk_states) {  // the forward's, for the backward to read
        const ScanCase& c = vp.prob.c;
        chunk_states = HostTensor(
            {c.batch, c.dim, SelectiveScanChunkCount(c.seqlen, options), c.dstate}, DType::kF32);
        chunk_states.Poison();
        ForwardResult r(vp);
        RunPackedForward(vp, r, options, chunk_states.view());
      }
      GradTensors packed(vp), alone(vp);
      RunPackedBackward(vp, og, packed, options,
                        with_chunk_states ? chunk_states.view() : Tensor{});
      const auto want = RunAloneBackward(vp, og, alone, options);
      for (int i = 0; i < kNumGrads; ++i) {
        if (want[i].empty()) continue;
        EXPECT_LE(RelativeError(packed.t[i].ToDouble(), want[i]), kPackedAloneBound)
            << ScanGradName(i);
      }
    }
  }
}

// The packed call against the oracle, which packs on its own (src/ref/selective_scan_ref.cpp).
TEST_P(ScanVarlenProperty, PackedMatchesTheOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  VarlenProblem vp(GetParam(), rng);
  const double bound = vp.vc.dtype == DType::kF32 ? kOracleBound : kBf16OracleBound;
  const ScanCase& c = vp.prob.c;
  const int64_t seq = c.batch * c.dim * c.seqlen, state = c.batch * c.dim * c.dstate;
  std::vector<double> out(seq), final_state(state), varlen(vp.StateRows() * c.dim * c.dstate);
  ref::SelectiveScanForward(vp.Shape(), vp.RefInputs(), out.data(), final_state.data(),
                            vp.StateRows() ? varlen.data() : nullptr);
  for (ScanAlgorithm algorithm : kAlgorithms) {
    SCOPED_TRACE(ScanAlgorithmName(algorithm));
    ForwardResult r(vp);
    RunPackedForward(vp, r, {algorithm, 16});
    EXPECT_LE(RelativeError(r.out.ToDouble(), out), bound);
    EXPECT_LE(RelativeError(r.final_state.ToDouble(), final_state), bound);
    if (vp.StateRows()) EXPECT_LE(RelativeError(r.varlen.ToDouble(), varlen), bound);
  }
  OutputGrads og(vp, rng);
  std::array<std::vector<double>, kNumGrads> want;
  GradTensors fast(vp);
  for (int i = 0; i < kNumGrads; ++i) want[i].resize(fast.t[i].numel());
  auto ptr = [](std::vector<double>& v) { return v.empty() ? nullptr : v.data(); };
  ref::SelectiveScanBackward(vp.Shape(), vp.RefInputs(), og.dout_d.data(), og.dfinal_d.data(),
                             {ptr(want[0]), ptr(want[1]), ptr(want[2]), ptr(want[3]), ptr(want[4]),
                              ptr(want[5]), ptr(want[6]), ptr(want[7]), ptr(want[8])},
                             vp.StateRows() ? og.dvarlen_d.data() : nullptr);
  RunPackedBackward(vp, og, fast, {ScanAlgorithm::kSequential, 16});
  for (int i = 0; i < kNumGrads; ++i) {
    if (want[i].empty()) continue;
    EXPECT_LE(RelativeError(fast.t[i].ToDouble(), want[i]), bound) << ScanGradName(i);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, ScanVarlenProperty, ::testing::ValuesIn(PropertyCases()),
                         [](const ::testing::TestParamInfo<VarlenCase>& info) {
                           std::string name = std::to_string(info.index) + "_" + info.param.Name();
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

// The oracle's gradients (and the fast ones) against central finite differences of the
// oracle's loss sum(out w) + sum(final wf) + sum(varlen wv), on a small packed problem.
TEST(ScanVarlenGrad, OracleAndFastAgainstFiniteDifferences) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  VarlenCase vc;
  vc.lengths = {3, 1, 5};
  vc.dim = 2;
  vc.dstate = 3;
  vc.b_form = BCForm::kGrouped;
  VarlenProblem vp(vc, rng);
  OutputGrads og(vp, rng);
  const ScanCase& c = vp.prob.c;
  auto loss = [&] {
    std::vector<double> out(c.batch * c.dim * c.seqlen), fin(c.batch * c.dim * c.dstate),
        var(vp.S * c.dim * c.dstate);
    ref::SelectiveScanForward(vp.Shape(), vp.RefInputs(), out.data(), fin.data(), var.data());
    double sum = 0;
    for (size_t i = 0; i < out.size(); ++i) sum += out[i] * og.dout_d[i];
    for (size_t i = 0; i < fin.size(); ++i) sum += fin[i] * og.dfinal_d[i];
    for (size_t i = 0; i < var.size(); ++i) sum += var[i] * og.dvarlen_d[i];
    return sum;
  };
  std::array<std::vector<double>*, kNumGrads> inputs = {
      &vp.prob.u_d, &vp.prob.delta_d, &vp.prob.A_d,          &vp.prob.B_d, &vp.prob.C_d,
      &vp.prob.D_d, &vp.prob.z_d,     &vp.prob.delta_bias_d, &vp.h0_d};
  std::array<std::vector<double>, kNumGrads> oracle;
  for (int i = 0; i < kNumGrads; ++i) oracle[i].resize(inputs[i]->size());
  ref::SelectiveScanBackward(
      vp.Shape(), vp.RefInputs(), og.dout_d.data(), og.dfinal_d.data(),
      {oracle[0].data(), oracle[1].data(), oracle[2].data(), oracle[3].data(), oracle[4].data(),
       oracle[5].data(), oracle[6].data(), oracle[7].data(), oracle[8].data()},
      og.dvarlen_d.data());
  GradTensors fast(vp);
  RunPackedBackward(vp, og, fast, {ScanAlgorithm::kSequential, 2});
  for (int i = 0; i < kNumGrads; ++i) {
    std::vector<double>& x = *inputs[i];
    std::vector<double> fd(x.size());
    for (size_t j = 0; j < x.size(); ++j) {
      fd[j] =
          (4.0 * CentralDifference(x, j, 1e-4, loss) - CentralDifference(x, j, 2e-4, loss)) / 3.0;
    }
    EXPECT_LE(RelativeError(oracle[i], fd), kOracleFdBound) << ScanGradName(i);
    EXPECT_LE(RelativeError(fast.t[i].ToDouble(), fd), kFastFdBound) << ScanGradName(i);
  }
}

// The same inputs and thread count give the same bits.
TEST(ScanVarlenGrad, PackedBackwardIsDeterministic) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  VarlenCase vc;
  vc.dim = 40;  // several tiles per thread
  VarlenProblem vp(vc, rng);
  OutputGrads og(vp, rng);
  ScopedThreads threads(2);
  GradTensors first(vp), second(vp);
  RunPackedBackward(vp, og, first, {});
  RunPackedBackward(vp, og, second, {});
  for (int i = 0; i < kNumGrads; ++i)
    EXPECT_EQ(first.t[i].bytes(), second.t[i].bytes()) << ScanGradName(i);
}

}  // namespace
}  // namespace ssmkit::testing
