// `ssmkit bench step`: one decode step of the selective state space recurrence
// (selective_state_update) at the decode shapes of the docs/targets.md models, both forms.
// Dimension legend: B batch, D channels, H heads, P head dim, N state size, G groups.
// A step reads and writes the whole state, so the bandwidth column is the figure of merit;
// the peer is ggml's ssm_scan with one token, as measured for docs/targets.md, or in this run with
// --ggml (peer_ggml.hpp; it does not apply D or the z gate, which these cases do, as the models
// need).
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "core/dtype.hpp"
#include "peer_ggml.hpp"
#include "ssmkit/state_update.hpp"

namespace ssmkit::bench {
namespace {

struct StepCase {
  const char* shape;  // docs/targets.md workload name
  bool mamba2;
  int64_t B, H, P, N, G;  // Mamba-1: H = D, P = 1
  DType dtype;            // x, dt, B, C, z, out
  const char* variant;
  double peer_ms;  // ggml, docs/targets.md; 0 = none
};

constexpr StepCase kCases[] = {
    {"decode", false, 1, 1536, 1, 16, 1, DType::kF32, "m1-130m f32", 0.0757},
    {"decode", false, 1, 1536, 1, 16, 1, DType::kBF16, "m1-130m bf16", 0.0},
    {"decode", true, 1, 24, 64, 128, 1, DType::kF32, "m2-130m f32", kGgmlM2StepMs},
    {"decode", true, 1, 24, 64, 128, 1, DType::kBF16, "m2-130m bf16", 0.0},
    {"decode", false, 1, 5120, 1, 16, 1, DType::kF32, "m1-2.8b f32", 0.0},
    {"decode", true, 1, 80, 64, 128, 1, DType::kF32, "m2-2.7b f32", 0.0},
    {"decode", false, 8, 1536, 1, 16, 1, DType::kF32, "m1-130m f32 B=8", 0.0},
    {"decode", true, 8, 24, 64, 128, 1, DType::kF32, "m2-130m f32 B=8", 0.0},
    {"policy", false, 1, 512, 1, 16, 1, DType::kF32, "f32", 0.0},
};

// Row-major storage of either dtype, filled from `dist`.
struct Buffer {
  std::vector<uint8_t> bytes;
  Tensor view;
  template <class Dist>
  Buffer(std::vector<int64_t> shape, DType dtype, std::mt19937& rng, Dist dist) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    bytes.resize(static_cast<size_t>(n * DTypeSize(dtype)));
    for (int64_t i = 0; i < n; ++i) StoreFromF32(bytes.data(), dtype, i, dist(rng));
    view.data = bytes.data();
    view.dtype = dtype;
    view.rank = static_cast<int>(shape.size());
    int64_t stride = 1;
    for (int d = view.rank - 1; d >= 0; --d) {
      view.shape[d] = shape[d];
      view.strides[d] = stride;
      stride *= shape[d];
    }
  }
};

// Calls per timed run: a step takes microseconds, so each timed run is kReps calls and the time
// reported is per call (the state keeps evolving; A < 0 keeps it bounded).
constexpr int kReps = 100;

bool Selected(const Options& options, const StepCase& c) {
  return (options.shape.empty() || options.shape == c.shape) &&
         (options.algo.empty() || options.algo == c.variant);
}

// ggml's SSM_SCAN over one token (f32 only: no peer for the bf16 cases).
std::string GgmlCase(const StepCase& c) {
  if (c.dtype != DType::kF32) return "";
  return GgmlSsmScanCase(c.N, c.P, c.H, c.G, 1, c.B);
}

int RunStepBench(const Options& options) {
  std::vector<Result> results;
  GgmlPeer peer;
  std::vector<std::string> peer_cases;
  for (const StepCase& c : kCases) {
    if (Selected(options, c)) peer_cases.push_back(GgmlCase(c));
  }
  if (!peer.Measure(options, "step", peer_cases)) return 2;
  for (const StepCase& c : kCases) {
    if (!Selected(options, c)) continue;
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal;
    std::uniform_real_distribution<float> decay(-3.0f, -0.5f), step(-4.0f, -1.0f);
    const int64_t B = c.B, H = c.H, P = c.P, N = c.N, G = c.G;
    const std::vector<int64_t> x_shape =
        c.mamba2 ? std::vector<int64_t>{B, H, P} : std::vector<int64_t>{B, H};
    const std::vector<int64_t> state_shape =
        c.mamba2 ? std::vector<int64_t>{B, H, P, N} : std::vector<int64_t>{B, H, N};
    const std::vector<int64_t> A_shape =
        c.mamba2 ? std::vector<int64_t>{H} : std::vector<int64_t>{H, N};
    Buffer x(x_shape, c.dtype, rng, normal), z(x_shape, c.dtype, rng, normal),
        out(x_shape, c.dtype, rng, normal);
    Buffer dt({B, H}, c.dtype, rng, step), A(A_shape, DType::kF32, rng, decay);
    Buffer Bm({B, G, N}, c.dtype, rng, normal), Cm({B, G, N}, c.dtype, rng, normal);
    Buffer D({H}, DType::kF32, rng, normal), dt_bias({H}, DType::kF32, rng, normal);
    Buffer state(state_shape, DType::kF32, rng, normal);
    StateUpdateInputs in{x.view, dt.view, A.view,       Bm.view,  Cm.view,
                         D.view, z.view,  dt_bias.view, Tensor{}, true};
    Status status = Status::Ok();
    const double ms = MedianMs(options,
                               [&] {
                                 for (int i = 0; i < kReps; ++i)
                                   status = SelectiveStateUpdate(in, state.view, out.view);
                               }) /
                      kReps;
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.message().c_str());
      return 1;
    }
    // The state read and written, A read (Mamba-1: one per state element of a batch row),
    // the per-row inputs and out.
    const double states = static_cast<double>(B * H * P * N);
    const double io = static_cast<double>(DTypeSize(c.dtype));
    const double bytes =
        8.0 * states + 4.0 * A.view.numel() + io * (4.0 * B * H * P + 2.0 * B * G * N);
    Result r{"state_update", c.shape, c.variant, "fwd", ms, bytes, states, "state"};
    peer.Apply(GgmlCase(c), c.peer_ms, kGgmlStepPeer, &r);
    results.push_back(r);
  }
  if (results.empty()) {
    std::fprintf(stderr, "bench step: no case matches --shape/--algo\n");
    return 1;
  }
  Print(options, results);
  PrintNotes(options, peer.Notes());
  return 0;
}

const SuiteRegistration kRegistration{
    {"step",
     "one decode step, selective_state_update: Mamba-1 and Mamba-2 at the 130m and 2.7b decode "
     "shapes, B = 1 and 8 (shape decode), and the policy network's (shape policy)",
     RunStepBench}};

}  // namespace
}  // namespace ssmkit::bench
