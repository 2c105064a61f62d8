// `ssmkit bench conv1d`: the causal conv1d (causal_conv1d_fn) forward and forward+backward at
// the docs/targets.md shapes, and its decode update (causal_conv1d_update). Dimension legend:
// B batch, D channels, L length, K conv width. All are memory bound, so each case prints its
// bandwidth; the peer is ggml's ssm_conv: the docs/targets.md figure (ggml-ssm-conv: no bias, no
// activation, so that case runs without them too), or with --ggml ggml measured in this run
// on every f32 case (peer_ggml.hpp).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "core/dtype.hpp"
#include "peer_ggml.hpp"
#include "ssmkit/conv1d.hpp"

namespace ssmkit::bench {
namespace {

struct ConvCase {
  const char* shape;   // docs/targets.md workload name
  int64_t B, D, L, K;  // L: steps per update call for the update
  bool update;         // causal_conv1d_update rather than the sequence op
  bool bias_silu;      // a Mamba block's conv: bias and silu
  DType dtype;
  const char* variant;
  double peer_ms;  // ggml, docs/targets.md; 0 = none
};

// m1-130m: d_inner 1536, conv 4; m2-130m's conv runs over d_inner + 2 G N = 1792 channels;
// ggml's ssm_conv case of docs/targets.md: D = 3328, L = 512 (no bias, no activation).
constexpr ConvCase kCases[] = {
    {"ggml-ssm-conv", 1, 3328, 512, 4, false, false, DType::kF32, "f32 plain", 3.20},
    {"m1-130m", 1, 1536, 2048, 4, false, true, DType::kF32, "f32 bias silu", 0.0},
    {"m1-130m", 1, 1536, 2048, 4, false, true, DType::kBF16, "bf16 bias silu", 0.0},
    {"m2-130m", 1, 1792, 2048, 4, false, true, DType::kF32, "f32 bias silu", 0.0},
    {"policy", 1, 512, 60, 4, false, true, DType::kF32, "f32 bias silu", 0.0},
    {"policy-train", 256, 512, 60, 4, false, true, DType::kF32, "f32 bias silu", 0.0},
    {"decode", 1, 1536, 1, 4, true, true, DType::kF32, "m1-130m f32", 0.0},
    {"decode", 1, 1792, 1, 4, true, true, DType::kF32, "m2-130m f32", 0.0},
    {"decode", 1, 5120, 1, 4, true, true, DType::kF32, "m1-2.8b f32", 0.0},
    {"decode", 8, 1536, 1, 4, true, true, DType::kBF16, "m1-130m bf16 B=8", 0.0},
};

constexpr const char* kPeer = "ggml ssm_conv (docs/targets.md, not this run)";

// Row-major storage of either dtype, filled with N(0, 1) values.
struct Buffer {
  std::vector<uint8_t> bytes;
  Tensor view;
  Buffer(std::initializer_list<int64_t> shape, DType dtype, std::mt19937& rng) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    bytes.resize(static_cast<size_t>(n * DTypeSize(dtype)));
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < n; ++i) StoreFromF32(bytes.data(), dtype, i, normal(rng));
    view = Tensor::Contiguous(bytes.data(), dtype, shape);
  }
};

// Calls per timed run for ops of a few microseconds, so that the clock's resolution and the
// call overhead of the timer do not dominate; the time reported is per call.
int RepsFor(double probe_ms) { return probe_ms < 0.05 ? 100 : 1; }

double PerCallMs(const Options& options, const std::function<void()>& fn) {
  Options probe = options;
  probe.runs = 5;
  const int reps = RepsFor(MedianMs(probe, fn));
  return MedianMs(options,
                  [&] {
                    for (int i = 0; i < reps; ++i) fn();
                  }) /
         reps;
}

// ggml's SSM_CONV, f32 only. For the update it is one token's output from a (K, D) window;
// ggml does not shift the state in that op. Where our case adds a bias and applies silu the
// peer is ggml's conv alone (peer_ggml.hpp says why), a lower bound on its three ops.
std::string GgmlCase(const ConvCase& c) {
  if (c.dtype != DType::kF32) return "";
  return GgmlSsmConvCase(c.D, c.L, c.B, c.K);
}

void ApplyPeer(const ConvCase& c, GgmlPeer& peer, double targets_ms, Result* r) {
  peer.Apply(GgmlCase(c), targets_ms, kPeer, r);
  if (c.bias_silu && r->peer_ms > 0) r->peer += ", its conv alone";
}

int RunSequence(const Options& options, const ConvCase& c, GgmlPeer& peer,
                std::vector<Result>* results) {
  std::mt19937 rng(1234);
  const int64_t B = c.B, D = c.D, L = c.L, K = c.K;
  Buffer x({B, D, L}, c.dtype, rng), out({B, D, L}, c.dtype, rng), dout({B, D, L}, c.dtype, rng);
  Buffer dx({B, D, L}, c.dtype, rng), weight({D, K}, DType::kF32, rng), bias({D}, DType::kF32, rng);
  Buffer dweight({D, K}, DType::kF32, rng), dbias({D}, DType::kF32, rng);
  CausalConv1dInputs in{x.view, weight.view, c.bias_silu ? bias.view : Tensor{}, Tensor{},
                        c.bias_silu ? Conv1dActivation::kSilu : Conv1dActivation::kNone};
  CausalConv1dGrads grads{dx.view, dweight.view, c.bias_silu ? dbias.view : Tensor{}, Tensor{}};
  Status status = Status::Ok();
  const double fwd_ms =
      PerCallMs(options, [&] { status = CausalConv1dForward(in, out.view, Tensor{}); });
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.message().c_str());
    return 1;
  }
  const double n = static_cast<double>(B * D * L), s = static_cast<double>(DTypeSize(c.dtype));
  Result fwd{"causal_conv1d", c.shape, c.variant, "fwd", fwd_ms, 2 * n * s, n, "elem"};
  ApplyPeer(c, peer, c.peer_ms, &fwd);
  results->push_back(fwd);
  const double both_ms = PerCallMs(options, [&] {
    status = CausalConv1dForward(in, out.view, Tensor{});
    if (status.ok()) status = CausalConv1dBackward(in, dout.view, Tensor{}, grads);
  });
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.message().c_str());
    return 1;
  }
  // Forward: x -> out. Backward: x, dout -> dx.
  results->push_back(
      {"causal_conv1d", c.shape, c.variant, "fwd+bwd", both_ms, 5 * n * s, n, "elem"});
  return 0;
}

int RunUpdate(const Options& options, const ConvCase& c, GgmlPeer& peer,
              std::vector<Result>* results) {
  std::mt19937 rng(1234);
  const int64_t B = c.B, D = c.D, K = c.K;
  Buffer x({B, D}, c.dtype, rng), out({B, D}, c.dtype, rng), weight({D, K}, DType::kF32, rng);
  Buffer bias({D}, DType::kF32, rng), state({B, D, K - 1}, DType::kF32, rng);
  CausalConv1dUpdateInputs in{x.view, weight.view, bias.view, Conv1dActivation::kSilu};
  Status status = Status::Ok();
  const double ms =
      PerCallMs(options, [&] { status = CausalConv1dUpdate(in, state.view, out.view); });
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", status.message().c_str());
    return 1;
  }
  // x -> out, the state read and written, the weights read.
  const double n = static_cast<double>(B * D), s = static_cast<double>(DTypeSize(c.dtype));
  const double bytes = 2 * n * s + 2 * 4.0 * n * (K - 1) + 4.0 * D * (K + 1);
  Result r{"conv1d_update", c.shape, c.variant, "fwd", ms, bytes, n, "channel"};
  ApplyPeer(c, peer, 0.0, &r);
  results->push_back(r);
  return 0;
}

bool Selected(const Options& options, const ConvCase& c) {
  return (options.shape.empty() || options.shape == c.shape) &&
         (options.algo.empty() || options.algo == c.variant);
}

int RunConvBench(const Options& options) {
  std::vector<Result> results;
  GgmlPeer peer;
  std::vector<std::string> peer_cases;
  for (const ConvCase& c : kCases) {
    if (Selected(options, c)) peer_cases.push_back(GgmlCase(c));
  }
  if (!peer.Measure(options, "conv1d", peer_cases)) return 2;
  bool any = false;
  for (const ConvCase& c : kCases) {
    if (!Selected(options, c)) continue;
    any = true;
    const int rc =
        c.update ? RunUpdate(options, c, peer, &results) : RunSequence(options, c, peer, &results);
    if (rc != 0) return rc;
  }
  if (!any) {
    std::fprintf(stderr, "bench conv1d: no case matches --shape/--algo\n");
    return 1;
  }
  Print(options, results);
  PrintNotes(options, peer.Notes());
  return 0;
}

const SuiteRegistration kRegistration{
    {"conv1d",
     "causal conv1d fwd and fwd+bwd (ggml-ssm-conv, m1-130m, m2-130m, policy, policy-train) and "
     "its decode update (decode)",
     RunConvBench}};

}  // namespace
}  // namespace ssmkit::bench
