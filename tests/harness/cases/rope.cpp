// Rotary position embeddings (include/ssmkit/rope.hpp) in the op harness: both layouts, full and
// partial rotary dims, odd head dims, thetas from 1e4 to 1e11, the caller's frequencies
// (rope_scaling) and attention_scaling, left-padded and far positions, f32 and bf16, strided
// heads, in place (forward and backward), q and k together or alone, the backward against
// finite differences, and every argument rule of src/ops/rope.cpp. CPU only (CUDA tensors are
// refused with kUnsupported, a bad input below).
#include <cmath>
#include <limits>
#include <tuple>

#include "harness/op_spec.hpp"
#include "ref/rope_ref.hpp"
#include "ssmkit/rope.hpp"

namespace ssmkit::testing::harness {
namespace {

struct Rope {
  std::string label;
  int64_t B = 2, L = 13, H = 8, Hk = 2, E = 64, R = 32;
  RopeLayout layout = RopeLayout::kHalf;
  double theta = 10000.0;
  DType dtype = DType::kF32;
  bool in_place = false;     // q_out = q, k_out = k
  bool scaled_freq = false;  // the caller's inv_freq: the default ones / 4 (linear scaling)
  float attention_scaling = 1.0f;
  bool q = true, k = true;  // which of q and k are given
  // The call is RopeBackward, the rotation by -angle, checked as a forward of its own (its
  // gradient, the harness's backward, is then RopeForward): the in-place backward needs it.
  bool inverse = false;
  int64_t pad = 2;  // strided heads of q, k and their outputs (not in place)

  std::string Name() const {
    return label + ": B=" + std::to_string(B) + " L=" + std::to_string(L) +
           " H=" + std::to_string(H) + " Hk=" + std::to_string(Hk) + " E=" + std::to_string(E) +
           " R=" + std::to_string(R) +
           (layout == RopeLayout::kHalf ? " rotate_half" : " interleaved") +
           " theta=" + std::to_string(theta) + (in_place ? " in place" : "") +
           (inverse ? " inverse" : "") + (q ? " q" : "") + (k ? " k" : "") + " " + DTypeName(dtype);
  }
};

// Positions of a left-padded batch: sequence b starts at 3b pad tokens with position id 1
// (transformers' masked_fill value), then 0, 1, ...; the last token sits far out (> 30000),
// where the f32 angle decides agreement.
std::vector<double> Positions(const Rope& p) {
  std::vector<double> pos(static_cast<size_t>(p.B * p.L));
  for (int64_t b = 0; b < p.B; ++b) {
    for (int64_t l = 0; l < p.L; ++l)
      pos[b * p.L + l] = l < 3 * b ? 1.0 : static_cast<double>(l - 3 * b);
    pos[b * p.L + p.L - 1] = 30011.0 + 7.0 * static_cast<double>(b);
  }
  return pos;
}

std::string QOut(const Rope& p) { return p.in_place ? "q" : "q_out"; }
std::string KOut(const Rope& p) { return p.in_place ? "k" : "k_out"; }

void Make(const Rope& p, Problem& prob) {
  prob.DefaultTol(p.dtype == DType::kF32 ? 2e-7 : 8e-3);
  const int64_t pad = p.in_place ? 0 : p.pad;
  for (auto [name, heads, given] : {std::tuple{"q", p.H, p.q}, std::tuple{"k", p.Hk, p.k}}) {
    if (!given) continue;
    const std::vector<int64_t> shape = {p.B, p.L, heads, p.E};
    (p.in_place ? prob.InOut(name, shape, p.dtype) : prob.Input(name, shape, p.dtype, pad))
        .Normal();
    if (!p.in_place) prob.Output(std::string(name) + "_out", shape, p.dtype, pad);
  }
  prob.Input("positions", {p.B, p.L}, DType::kI32).Given(Positions(p)).NoGrad();
  if (p.scaled_freq) {
    std::vector<double> freq;
    for (float f : ref::RopeInvFreq(p.theta, p.R)) freq.push_back(f / 4.0f);
    prob.Input("inv_freq", {p.R / 2}, DType::kF32).Given(freq).NoGrad();
  }
}

RopeOptions Options(const Rope& p) {
  return {p.theta, p.R == p.E ? 0 : p.R, p.layout, p.attention_scaling};
}

// The oracle's rotation of each given tensor into `q_to` and `k_to`, by -angle when `backward`.
void Oracle(const Rope& p, Values& v, const std::string& q_from, const std::string& k_from,
            const std::string& q_to, const std::string& k_to, bool backward) {
  const std::vector<int32_t> pos(v["positions"], v["positions"] + p.B * p.L);
  std::vector<float> freq;
  if (p.scaled_freq) freq.assign(v["inv_freq"], v["inv_freq"] + p.R / 2);
  for (auto [from, to, heads] : {std::tuple{q_from, q_to, p.H}, std::tuple{k_from, k_to, p.Hk}}) {
    if (v[from] == nullptr) continue;
    const ref::RopeShape s{p.B,     p.L,
                           heads,   p.E,
                           p.R,     p.layout == RopeLayout::kInterleaved,
                           p.theta, p.attention_scaling};
    // From a copy: in place, the result overwrites its input.
    const std::vector<double> x = v.at(from);
    ref::Rope(s, x.data(), pos.data(), p.scaled_freq ? freq.data() : nullptr, backward, v[to]);
  }
}

void OracleForward(const Rope& p, Values& v) {
  Oracle(p, v, "q", "k", QOut(p), KOut(p), p.inverse);
}

void OracleBackward(const Rope& p, Values& v) {
  Oracle(p, v, "dq_out", "dk_out", "dq", "dk", !p.inverse);
}

// RopeForward, or RopeBackward when `backward`: the same arguments either way.
Status Rotate(bool backward, const RopeInputs& in, const Tensor& q_out, const Tensor& k_out,
              const RopeOptions& options) {
  return backward ? RopeBackward(in, q_out, k_out, options)
                  : RopeForward(in, q_out, k_out, options);
}

Status Forward(const Rope& p, Bound& b) {
  return Rotate(p.inverse, {b["q"], b["k"], b["positions"], b["inv_freq"]}, b[QOut(p)], b[KOut(p)],
                Options(p));
}

Status Backward(const Rope& p, Bound& b) {
  return Rotate(!p.inverse, {b["dq_out"], b["dk_out"], b["positions"], b["inv_freq"]}, b["dq"],
                b["dk"], Options(p));
}

std::vector<Case<Rope>> Cases() {
  const Rope bamba{"bamba: partial_rotary_factor 0.5"};
  std::vector<Rope> configs = {
      {"llama-style full rotary", 2, 17, 12, 4, 64, 64},
      bamba,
      {"theta 1e11 (long context)", 1, 11, 4, 1, 64, 64, RopeLayout::kHalf, 1e11},
      {"GPT-J interleaved, partial", 2, 7, 4, 2, 64, 48, RopeLayout::kInterleaved},
      {"odd head dim 40, rotary 20", 1, 10, 6, 2, 40, 20},
      {"bf16 partial, interleaved", 3, 6, 4, 2, 64, 32, RopeLayout::kInterleaved, 10000.0,
       DType::kBF16},
      {"linear rope_scaling (inv_freq / 4), attention_scaling 1.2", 1, 8, 4, 2, 64, 64,
       RopeLayout::kHalf, 500000.0, DType::kF32, false, true, 1.2f},
  };
  std::vector<Rope> in_place;
  for (bool inverse : {false, true}) {
    Rope zamba2{"zamba2-style E=128", 1, 9, 4, 4, 128, 128};
    Rope bf16{"bf16", 2, 15, 12, 4, 64, 64, RopeLayout::kHalf, 10000.0, DType::kBF16};
    for (Rope* p : {&zamba2, &bf16}) {
      p->in_place = true;
      p->inverse = inverse;
      in_place.push_back(*p);
    }
  }
  Rope q_alone = bamba, k_alone = bamba;
  q_alone.k = false;
  k_alone.q = false;
  Rope small{"small", 2, 4, 2, 1, 10, 8};
  small.k = false;
  return {
      {"hf_configs", configs},
      {"in_place", in_place, {.backward = false}},
      {"q_or_k_alone", {q_alone, k_alone}},
      {"small", {small}, {.finite_differences = true}},
  };
}

using Bad = BadInput<Rope>;
constexpr Call kFwd = Call::kForward;

std::vector<Bad> BadInputs() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<Bad> bad;
  for (int64_t r : {-2, 3, 66, 1}) {
    bad.push_back({"RotaryDim" + std::string(r < 0 ? "Minus" : "") + std::to_string(std::abs(r)),
                   kFwd,
                   [r](Rope& p, Bound&) { p.R = r; },
                   {"rope: options.rotary_dim: expected"}});
  }
  const std::vector<std::pair<std::string, double>> thetas = {
      {"Zero", 0.0}, {"Negative", -1.0}, {"NaN", nan}, {"1e300", 1e300}};
  for (const auto& [name, theta] : thetas) {
    bad.push_back({"Theta" + name,
                   kFwd,
                   [theta = theta](Rope& p, Bound&) { p.theta = theta; },
                   {"rope: options.theta"}});
  }
  const std::vector<Bad> rest = {
      {"AttentionScalingInfinite",
       kFwd,
       [](Rope& p, Bound&) { p.attention_scaling = std::numeric_limits<float>::infinity(); },
       {"rope: options.attention_scaling"}},
      {"LayoutOutOfRange",
       kFwd,
       [](Rope& p, Bound&) { p.layout = static_cast<RopeLayout>(7); },
       {"rope: options.layout"}},
      {"KLengthNotQs",
       kFwd,
       [](Rope&, Bound& b) { b["k"].shape[1] = 12; },
       {"rope: k: expected shape (B, L, Hk, E) = (2, 13, 2, 64), given (2, 12, 2, 64)"}},
      {"PositionsDtype",
       kFwd,
       [](Rope&, Bound& b) { b["positions"].dtype = DType::kI64; },
       {"rope: positions: expected dtype i32, given i64"}},
      {"InvFreqShape",
       kFwd,
       [](Rope&, Bound& b) { b["inv_freq"] = b.Spare({15}, DType::kF32); },
       {"rope: inv_freq: expected shape (R/2) = (16,), given (15,)"}},
      {"QOutShape",
       kFwd,
       [](Rope&, Bound& b) { b["q_out"].shape[2] = 7; },
       {"rope: q_out: expected shape"}},
      {"NeitherQNorK",
       kFwd,
       [](Rope&, Bound& b) {
         for (const char* name : {"q", "k", "q_out", "k_out"}) b[name] = Tensor{};
       },
       {"rope: q, k: expected at least one of q and k"}},
      {"KOutWithoutK",
       kFwd,
       [](Rope&, Bound& b) { b["k"] = Tensor{}; },
       {"rope: k_out: expected no tensor, since k is absent"}},
      {"QOutMissing",
       kFwd,
       [](Rope&, Bound& b) { b["q_out"] = Tensor{}; },
       {"rope: q_out: expected a tensor"}},
      // q_out one element into q: a partial overlap (batch 1, so that it stays inside q).
      {"QOutOverlapsQ",
       kFwd,
       [](Rope&, Bound& b) {
         Tensor shifted = b["q"];
         shifted.data = static_cast<float*>(shifted.data) + 1;
         b["q_out"] = shifted;
         for (const char* name : {"q", "k", "positions", "q_out", "k_out"}) b[name].shape[0] = 1;
       },
       {"rope: q_out: expected memory not overlapping q"}},
      {"QOutHeadsAtOneAddress",
       kFwd,
       [](Rope&, Bound& b) { b["q_out"].strides[2] = 0; },
       {"rope: q_out: expected strides that give"}},
      {"CudaIsUnsupported",
       kFwd,
       [](Rope&, Bound& b) {
         for (const char* name : {"q", "k", "positions", "q_out", "k_out"})
           b[name].device = Device::kCuda;
       },
       {"rope:"},
       StatusCode::kUnsupported},
  };
  bad.insert(bad.end(), rest.begin(), rest.end());
  return bad;
}

OpSpec<Rope> RopeSpec() {
  Rope valid{"valid"};
  valid.pad = 0;
  return {.name = "rope",
          .make = Make,
          .oracle_forward = OracleForward,
          .oracle_backward = OracleBackward,
          .forward = Forward,
          .backward = Backward,
          .cases = Cases(),
          .valid = valid,
          .bad_inputs = BadInputs(),
          .cuda = false,
          // Linear in q and k: a larger step loses nothing to truncation, less to rounding.
          .fd = {.step = 1e-5, .oracle = 1e-9, .op = 1e-6}};
}

}  // namespace

SSMKIT_HARNESS_OP(RopeSpec);

}  // namespace ssmkit::testing::harness
