// Dense causal attention, forward and backward (include/ssmkit/attention.hpp), in the op
// harness: shapes labelled with the model each comes from, GQA ratios 1 to 8, head dims 64 /
// 128 / odd / Ev != E, sliding windows, left padding (kv_start) with rows that see no key (out
// 0, lse -inf), chunks continuing a prefix (L < S), decode-sized queries, f32 and bf16, q, k, v
// as views with outer strides (the fused qkv projection) and outputs inside wider rows, large
// logits, lse absent, gradients against finite differences and each alone, and every argument
// rule of the dense ops in src/ops/attention.cpp. CPU only (no CUDA kernels).
//
// Bounds (relative L2 against the oracle rounded to the output's dtype), as the old tests had
// them: out and the gradients 5e-6 in f32, out 8e-3 and the gradients 1e-2 in bf16, lse 1e-5 on
// its finite rows (the -inf ones exactly), 1e-4 with logits in the hundreds. Finite
// differences: step 1e-5, the oracle within 1e-7, the op within 1e-5.
//
// tests/attention_test.cpp keeps what a table cannot say: bits across thread counts, out's bits
// with and without lse, a gradient alone against all three bit for bit. The paged form stays in
// tests/attention_paged_test.cpp, its bad inputs in tests/attention_errors_test.cpp.
#include <cmath>

#include "harness/op_spec.hpp"
#include "ref/attention_ref.hpp"
#include "ssmkit/attention.hpp"

namespace ssmkit::testing::harness {
namespace {

struct Attn {
  std::string label;  // the model the shape comes from
  int64_t B = 1, L = 1, S = 1, H = 1, Hk = 1, E = 1, Ev = 1;
  int64_t window = 0;
  bool left_pad =
      false;        // kv_start per sequence (up to S / 2; the last row past the chunk's start)
  int64_t pad = 0;  // q, k, v (and their gradients) padded past every dimension but the first
  DType dtype = DType::kF32;
  float scale = 0.0f;   // 0: 1 / sqrt(E)
  double qk_std = 1.0;  // q and k's spread: 1 gives scores of spread ~1 after the scale
  bool lse = true;      // the optional output

  std::string Name() const {
    return label + ": B=" + std::to_string(B) + " L=" + std::to_string(L) +
           " S=" + std::to_string(S) + " H=" + std::to_string(H) + " Hk=" + std::to_string(Hk) +
           " E=" + std::to_string(E) + " Ev=" + std::to_string(Ev) +
           " window=" + std::to_string(window) + (left_pad ? " left_pad" : "") +
           " pad=" + std::to_string(pad) + " " + DTypeName(dtype) + (lse ? " lse" : "");
  }
  double Scale() const { return scale > 0.0f ? scale : 1.0 / std::sqrt(static_cast<double>(E)); }
};

// Left padding: kv_start[b] uniform in [0, S / 2), the last sequence's past the chunk's start
// (S - L / 2) so that some of its query rows see no key.
std::vector<double> KvStart(const Attn& p, Rng& rng) {
  std::vector<double> start;
  for (int64_t b = 0; b < p.B; ++b)
    start.push_back(std::floor(rng.Uniform(0.0, static_cast<double>(p.S) / 2)));
  if (p.B > 1) start.back() = static_cast<double>(p.S - p.L / 2);
  return start;
}

void Make(const Attn& p, Problem& prob) {
  const bool f32 = p.dtype == DType::kF32;
  prob.PadOuterDims(true);
  prob.DefaultTol(f32 ? 5e-6 : 1e-2);  // the gradients
  prob.Input("q", {p.B, p.L, p.H, p.E}, p.dtype, p.pad).Normal(p.qk_std);
  prob.Input("k", {p.B, p.S, p.Hk, p.E}, p.dtype, p.pad).Normal(p.qk_std);
  prob.Input("v", {p.B, p.S, p.Hk, p.Ev}, p.dtype, p.pad).Normal();
  if (p.left_pad) {
    prob.Input("kv_start", {p.B}, DType::kI32).Given(KvStart(p, prob.rng())).NoGrad();
  }
  prob.DefaultTol(p.qk_std > 1.0 ? 1e-4 : f32 ? 5e-6 : 8e-3);
  // Inside wider rows (2 spare elements past every dimension but the first).
  prob.Output("out", {p.B, p.L, p.H, p.Ev}, p.dtype, 2).Saved();
  if (p.lse)
    prob.Output("lse", {p.B, p.H, p.L}, DType::kF32).Tol(1e-5).NoUpstream().Saved().AllowInf();
}

ref::AttentionShape RefShape(const Attn& p) {
  return {p.B, p.L, p.S, p.H, p.Hk, p.E, p.Ev, p.Scale(), p.window};
}

// kv_start as int32 in `start`, which must outlive the call; nullptr without left padding.
const int32_t* KvStartOf(const Attn& p, Values& v, std::vector<int32_t>& start) {
  if (!p.left_pad) return nullptr;
  start.assign(v["kv_start"], v["kv_start"] + p.B);
  return start.data();
}

void OracleForward(const Attn& p, Values& v) {
  std::vector<int32_t> start;
  ref::AttentionForward(RefShape(p), v["q"], v["k"], v["v"], KvStartOf(p, v, start), v["out"],
                        v["lse"]);
}

void OracleBackward(const Attn& p, Values& v) {
  std::vector<int32_t> start;
  ref::AttentionBackward(RefShape(p), v["q"], v["k"], v["v"], KvStartOf(p, v, start), v["dout"],
                         v["dq"], v["dk"], v["dv"]);
}

AttentionInputs Inputs(Bound& b) { return {b["q"], b["k"], b["v"], b["kv_start"]}; }

Status Forward(const Attn& p, Bound& b) {
  return AttentionForward(Inputs(b), b["out"], b["lse"], {p.scale, p.window});
}

// out and lse: the forward's (saved).
Status Backward(const Attn& p, Bound& b) {
  return AttentionBackward(Inputs(b), b["out"], b["lse"], b["dout"], {b["dq"], b["dk"], b["dv"]},
                           {p.scale, p.window});
}

// label, B, L, S, H, Hk, E, Ev, window, left_pad, pad (3: the fused qkv's views), dtype, scale
std::vector<Case<Attn>> Cases() {
  constexpr DType kBF16 = DType::kBF16;
  const std::vector<Attn> forward = {
      {"granite-4.0-h-350m prefill", 1, 200, 200, 12, 4, 64, 64},
      {"granite-4.0-h-350m prefill bf16", 1, 130, 130, 12, 4, 64, 64, 0, false, 0, kBF16},
      {"granite-4.0-h-350m fused qkv", 2, 75, 75, 12, 4, 64, 64, 0, false, 3},
      {"MHA (GQA 1), E=128", 2, 150, 150, 4, 4, 128, 128},
      {"GQA 8 (nemotron-h-like)", 1, 97, 97, 16, 2, 64, 64},
      {"odd head dim 40", 2, 81, 81, 6, 2, 40, 40},
      {"odd head dim 3, bf16", 1, 33, 33, 2, 1, 3, 3, 0, false, 0, kBF16},
      {"Ev != E (48 / 80)", 1, 70, 70, 4, 2, 48, 80},
      {"sliding window 33", 1, 180, 180, 8, 2, 64, 64, 33},
      {"window 1 (itself only)", 1, 40, 40, 2, 1, 16, 16, 1},
      {"left-padded batch", 3, 90, 90, 6, 3, 32, 32, 0, true},
      {"left-padded batch + window, bf16", 3, 64, 64, 4, 2, 64, 64, 20, true, 0, kBF16},
      {"chunk continuing a prefix (L < S)", 2, 37, 250, 6, 2, 64, 64},
      {"chunk continuing a prefix, fused + window", 2, 19, 140, 4, 1, 32, 24, 50, false, 3},
      {"decode-sized query (L = 1)", 3, 1, 300, 12, 4, 64, 64},
      {"granite attention_multiplier 0.015625", 1, 64, 64, 4, 1, 64, 64, 0, false, 0, DType::kF32,
       0.015625f},
  };
  // q and k of norm ~30: logits in the hundreds keep the online softmax finite and accurate.
  Attn large{"large logits", 1, 100, 100, 4, 2, 64, 64};
  large.qk_std = 4.0;
  large.lse = false;
  Attn no_lse = forward[4];
  no_lse.lse = false;
  const std::vector<Attn> backward = {
      {"granite-4.0-h-350m train", 1, 150, 150, 12, 4, 64, 64},
      {"granite-4.0-h-350m train bf16", 1, 90, 90, 12, 4, 64, 64, 0, false, 0, kBF16},
      {"MHA E=128, fused qkv", 2, 80, 80, 4, 4, 128, 128, 0, false, 3},
      {"GQA 8", 1, 77, 77, 8, 1, 64, 64},
      {"odd head dims 40 / 24", 2, 61, 61, 6, 2, 40, 24},
      {"sliding window 17", 1, 130, 130, 4, 2, 32, 32, 17},
      {"left-padded batch", 3, 70, 70, 4, 2, 32, 32, 0, true},
      {"chunk after a prefix (L < S) + window", 2, 30, 160, 6, 3, 64, 64, 45},
  };
  // Every coordinate of q, k and v perturbed.
  const std::vector<Attn> small = {
      {"tiny GQA 2", 2, 5, 5, 4, 2, 6, 5},
      {"tiny L < S, window 3", 1, 4, 9, 2, 1, 5, 7, 3},
      {"tiny left pad", 2, 6, 6, 3, 1, 4, 4, 0, true},
  };
  constexpr Checks kForward = {.backward = false};
  return {
      {"forward", forward, kForward},
      {"large_logits", {large}, kForward},
      {"lse_absent", {no_lse}, kForward},
      {"grad_shapes", backward},
      {"grad_small", small, {.finite_differences = true, .grads_alone = true}},
  };
}

using Bad = BadInput<Attn>;
constexpr Call kFwd = Call::kForward, kBwd = Call::kBackward;
constexpr int64_t kB = 2, kL = 3, kS = 5, kH = 4, kHk = 2, kE = 8, kEv = 6;

// B = 2, L = 3, S = 5, H = 4, Hk = 2, E = 8, Ev = 6, kv_start and lse present.
Attn Valid() { return {"valid", kB, kL, kS, kH, kHk, kE, kEv, 0, true}; }

// kv_start = {0, second}, in a spare tensor bound in its place.
void SetKvStart(Bound& b, int32_t second) {
  Tensor t = b.Spare({kB}, DType::kI32);
  static_cast<int32_t*>(t.data)[0] = 0;
  static_cast<int32_t*>(t.data)[1] = second;
  b["kv_start"] = t;
}

std::vector<Bad> ForwardRules() {
  std::vector<Bad> rules;
  for (float scale : {-1.0f, NAN, INFINITY}) {
    rules.push_back({"Scale" + std::string(std::isnan(scale) ? "Nan"
                                           : scale < 0       ? "Negative"
                                                             : "Inf"),
                     kFwd,
                     [scale](Attn& p, Bound&) { p.scale = scale; },
                     {"attention: options.scale: expected a finite value >= 0"}});
  }
  const std::vector<Bad> more = {
      {"WindowNegative",
       kFwd,
       [](Attn& p, Bound&) { p.window = -3; },
       {"attention: options.window: expected a window >= 0 (0: none), given -3"}},
      {"QNull",
       kFwd,
       [](Attn&, Bound& b) { b["q"] = Tensor{}; },
       {"attention: q: expected a tensor (B, L, H, E), given null"}},
      {"QRank", kFwd, [](Attn&, Bound& b) { b["q"].rank = 3; }, {"attention: q: expected rank 4"}},
      {"QZeroLength",
       kFwd,
       [](Attn&, Bound& b) { b["q"].shape[1] = 0; },
       {"attention: q: expected every dimension of (B, L, H, E) >= 1"}},
      {"QLastStride",
       kFwd,
       [](Attn&, Bound& b) { b["q"].strides[3] = 2; },
       {"attention: q: expected stride 1 on the last dimension, given stride 2"}},
      {"QDtype",
       kFwd,
       [](Attn&, Bound& b) { b["q"].dtype = DType::kF16; },
       {"attention: q: expected dtype f32 or bf16, given f16"}},
      {"QueryLongerThanKeys",
       kFwd,
       [](Attn&, Bound& b) { b["q"].shape[1] = kS + 1; },
       {"attention: k: expected key length S in [L, 2^31 - 1]"}},
      {"KvHeadsNotDividingHeads",
       kFwd,
       [](Attn&, Bound& b) { b["q"].shape[2] = 3; },
       {"attention: k: expected kv heads Hk dividing H = 3, given Hk = 2"}},
      {"KShape",
       kFwd,
       [](Attn&, Bound& b) { b["k"].shape[3] = kE + 1; },
       {"attention: k: expected shape (B, S, Hk, E) = (2, 5, 2, 8), given (2, 5, 2, 9)"}},
      {"VShape",
       kFwd,
       [](Attn&, Bound& b) { b["v"].shape[1] = kS - 1; },
       {"attention: v: expected shape (B, S, Hk, Ev) = (2, 5, 2, 6), given (2, 4, 2, 6)"}},
      {"VNegativeStride",
       kFwd,
       [](Attn&, Bound& b) { b["v"].strides[0] = -1; },
       {"attention: v: expected non-negative strides"}},
      {"KvStartDtype",
       kFwd,
       [](Attn&, Bound& b) { b["kv_start"].dtype = DType::kF32; },
       {"attention: kv_start: expected dtype i32, given f32"}},
      {"KvStartShape",
       kFwd,
       [](Attn&, Bound& b) { b["kv_start"].shape[0] = 3; },
       {"attention: kv_start: expected shape (B) = (2,), given (3,)"}},
      {"KvStartNegative",
       kFwd,
       [](Attn&, Bound& b) { SetKvStart(b, -1); },
       {"attention: kv_start: expected values in [0, S] = [0, 5], given -1 at b = 1"}},
      {"KvStartPastS",
       kFwd,
       [](Attn&, Bound& b) { SetKvStart(b, 6); },
       {"attention: kv_start: expected values in [0, S] = [0, 5], given 6 at b = 1"}},
      {"OutShape",
       kFwd,
       [](Attn&, Bound& b) { b["out"].shape[3] = kE; },
       {"attention: out: expected shape (B, L, H, Ev) = (2, 3, 4, 6), given (2, 3, 4, 8)"}},
      {"OutStridesOverlap",
       kFwd,
       [](Attn&, Bound& b) { b["out"].strides[1] = 0; },
       {"attention: out: expected strides that give every element its own address"}},
      {"LseDtype",
       kFwd,
       [](Attn&, Bound& b) { b["lse"].dtype = DType::kBF16; },
       {"attention: lse: expected dtype f32, given bf16"}},
      {"LseShape",
       kFwd,
       [](Attn&, Bound& b) { b["lse"].shape[2] = kL + 1; },
       {"attention: lse: expected shape (B, H, L) = (2, 4, 3)"}},
      {"OutOverQ",
       kFwd,
       [](Attn&, Bound& b) {
         b["out"] = b["q"];
         b["out"].shape[3] = kEv;
       },
       {"attention: out: expected memory not overlapping q"}},
      {"LseOverOut",
       kFwd,
       [](Attn&, Bound& b) {
         b["lse"] = Tensor::Contiguous(b["out"].data, DType::kF32, {kB, kH, kL});
       },
       {"attention: lse: expected memory not overlapping out"}},
      {"QOnCuda",
       kFwd,
       [](Attn&, Bound& b) { b["q"].device = Device::kCuda; },
       {"attention: q: expected a CPU tensor, given a CUDA tensor"}},
      {"AllOnCuda",
       kFwd,
       [](Attn&, Bound& b) {
         for (const char* name : {"q", "k", "v", "kv_start", "out", "lse"})
           b[name].device = Device::kCuda;
       },
       {"attention: CUDA tensors are not supported yet"},
       StatusCode::kUnsupported},
  };
  rules.insert(rules.end(), more.begin(), more.end());
  return rules;
}

std::vector<Bad> BackwardRules() {
  return {
      {"BackwardLseNull",
       kBwd,
       [](Attn&, Bound& b) { b["lse"] = Tensor{}; },
       {"attention_backward: lse: expected a tensor of shape (B, H, L) = (2, 4, 3), given null"}},
      {"DoutShape",
       kBwd,
       [](Attn&, Bound& b) { b["dout"].shape[2] = 2; },
       {"attention_backward: dout: expected shape"}},
      {"DqDtype",
       kBwd,
       [](Attn&, Bound& b) { b["dq"].dtype = DType::kBF16; },
       {"attention_backward: dq: expected dtype f32, given bf16"}},
      {"DkWhereDqIs",
       kBwd,
       [](Attn&, Bound& b) { b["dk"] = b["dq"]; },  // the wrong shape is found first
       {"attention_backward: dk: expected shape"}},
      {"DvOverV",
       kBwd,
       [](Attn&, Bound& b) { b["dv"] = b["v"]; },
       {"attention_backward: dv: expected memory not overlapping v"}},
      {"DqInsideDk",
       kBwd,
       [](Attn&, Bound& b) {
         const Tensor memory = b.Spare({kB, kL, kH, kE}, DType::kF32);  // the larger of the two
         b["dk"] = Tensor::Contiguous(memory.data, DType::kF32, {kB, kS, kHk, kE});
         b["dq"] = memory;
       },
       {"attention_backward: dk: expected memory not overlapping dq"}},
  };
}

OpSpec<Attn> AttentionSpec() {
  return {.name = "attention",
          .make = Make,
          .oracle_forward = OracleForward,
          .oracle_backward = OracleBackward,
          .forward = Forward,
          .backward = Backward,
          .cases = Cases(),
          .valid = Valid(),
          .bad_inputs = Concat<Attn>({ForwardRules(), BackwardRules()}),
          .cuda = false,
          .fd = {.step = 1e-5, .oracle = 1e-7, .op = 1e-5}};
}

}  // namespace

SSMKIT_HARNESS_OP(AttentionSpec);

}  // namespace ssmkit::testing::harness
