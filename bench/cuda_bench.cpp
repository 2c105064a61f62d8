// ssmkit's CUDA ops timed at the shapes of issue 6, one JSON object per line on stdout:
//   {"case": ..., "variant": the kernel variant, "ms": median milliseconds, "bytes": the fewest
//    bytes the op must move, "gbps": bytes / time}
// Ops with a new kernel beside the verified one (src/cuda/variant.hpp) are timed once per
// variant, picked through their environment variable.
// plus a "copy" line: the device-to-device copy bandwidth (bytes read + written) that
// bench/device/compare.py divides by. bench/device/peers.py times mamba_ssm and causal-conv1d
// at the same cases and byte counts; compare.py prints both side by side.
//
// `--cases REGEX` times only the cases whose name matches (bench/device/profile.sh runs one op
// under the profiler that way).
//
// Timing: CUDA events around each call on the default stream, after 3 warm-up calls; the
// median of at least 10 calls and 200 ms. Inputs are random (never zeros), generated once.
// Dimension legend: B batch, D channels, L length, N state size, H heads, P head dim, G groups.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "cuda/variant.hpp"
#include "ssmkit/conv1d.hpp"
#include "ssmkit/cuda.hpp"
#include "ssmkit/selective_scan.hpp"
#include "ssmkit/ssd.hpp"
#include "ssmkit/state_update.hpp"

namespace ssmkit::bench {
namespace {

#define CHECK_CUDA(expr)                                                                          \
  do {                                                                                            \
    const cudaError_t e_ = (expr);                                                                \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

void Check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.message().c_str());
    std::exit(1);
  }
}

// Device buffers owned for the whole run (freed at exit).
std::vector<void*> g_buffers;

uint64_t g_rng = 0x9E3779B97F4A7C15ull;
float Uniform(float lo, float hi) {  // xorshift: fast enough for ~10^8 values
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return lo + (hi - lo) * static_cast<float>(g_rng >> 40) / static_cast<float>(1ull << 24);
}

// A contiguous device tensor filled with uniform values in [lo, hi).
Tensor Random(std::initializer_list<int64_t> shape, DType dtype, float lo, float hi) {
  Tensor t = Tensor::Contiguous(nullptr, dtype, shape, Device::kCuda);
  const int64_t n = t.numel();
  std::vector<uint8_t> host(static_cast<size_t>(n * DTypeSize(dtype)));
  for (int64_t i = 0; i < n; ++i) StoreFromF32(host.data(), dtype, i, Uniform(lo, hi));
  CHECK_CUDA(cudaMalloc(&t.data, host.size()));
  CHECK_CUDA(cudaMemcpy(t.data, host.data(), host.size(), cudaMemcpyHostToDevice));
  g_buffers.push_back(t.data);
  return t;
}

Tensor Empty(std::initializer_list<int64_t> shape, DType dtype) {
  Tensor t = Tensor::Contiguous(nullptr, dtype, shape, Device::kCuda);
  CHECK_CUDA(cudaMalloc(&t.data, static_cast<size_t>(t.numel() * DTypeSize(dtype))));
  g_buffers.push_back(t.data);
  return t;
}

// Median milliseconds of fn over >= 10 calls and >= 200 ms, after 3 warm-up calls.
double TimeMs(const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  CHECK_CUDA(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<float> times;
  float total = 0.0f;
  while (times.size() < 10 || (total < 200.0f && times.size() < 10000)) {
    CHECK_CUDA(cudaEventRecord(start));
    fn();
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
    total += ms;
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The cases to time (--cases).
std::regex g_cases(".*");
bool Wanted(const std::string& name) { return std::regex_search(name, g_cases); }

// The variant being timed (the "variant" field of each line).
std::string g_variant = "default";

void Report(const std::string& name, double ms, double bytes) {
  std::printf(
      "{\"case\": \"%s\", \"variant\": \"%s\", \"ms\": %.5f, \"bytes\": %.0f, \"gbps\": %.1f}\n",
      name.c_str(), g_variant.c_str(), ms, bytes, bytes / (ms * 1e-3) / 1e9);
  std::fflush(stdout);
}

// Runs fn once per combination of the ops' variants, their environment variables set; the
// "variant" field names the combination ("parallel+original").
void ForEachVariant(std::initializer_list<const cuda::OpVariants*> ops,
                    const std::function<void()>& fn) {
  std::vector<const cuda::OpVariants*> list(ops);
  std::vector<int> pick(list.size(), 0);
  while (true) {
    g_variant.clear();
    for (size_t i = 0; i < list.size(); ++i) {
      setenv(list[i]->env, list[i]->names[pick[i]], 1);
      g_variant += (i ? "+" : "") + std::string(list[i]->names[pick[i]]);
    }
    fn();
    size_t i = 0;
    while (i < list.size() && ++pick[i] == list[i]->count) pick[i++] = 0;
    if (i == list.size()) break;
  }
  for (const cuda::OpVariants* op : list) unsetenv(op->env);
  g_variant = "default";
}

void CopyBandwidth() {
  const size_t bytes = size_t{1} << 30;
  void *a, *b;
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  CHECK_CUDA(cudaMemset(a, 1, bytes));
  const double ms =
      TimeMs([&] { CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice)); });
  Report("copy", ms, 2.0 * bytes);
  CHECK_CUDA(cudaFree(a));
  CHECK_CUDA(cudaFree(b));
}

// Mamba-1 selective scan, B/C variable (B, N, L), D, z, delta_bias, softplus: mamba_ssm's
// selective_scan_fn as Mamba calls it. es: bytes per element of u, delta, z, B, C.
void Scan(const std::string& name, int64_t B, int64_t D, int64_t N, int64_t L, DType dtype) {
  if (!Wanted(name)) return;
  SelectiveScanInputs in;
  in.u = Random({B, D, L}, dtype, -1.0f, 1.0f);
  in.delta = Random({B, D, L}, dtype, -4.0f, -1.0f);  // dt = softplus(delta + bias) ~ 0.02..0.4
  in.A = Random({D, N}, DType::kF32, -4.0f, -0.5f);
  in.B = Random({B, N, L}, dtype, -1.0f, 1.0f);
  in.C = Random({B, N, L}, dtype, -1.0f, 1.0f);
  in.D = Random({D}, DType::kF32, -1.0f, 1.0f);
  in.z = Random({B, D, L}, dtype, -1.0f, 1.0f);
  in.delta_bias = Random({D}, DType::kF32, -0.5f, 0.5f);
  in.delta_softplus = true;
  const Tensor out = Empty({B, D, L}, dtype);
  const double es = static_cast<double>(DTypeSize(dtype)), bdl = B * D * L * es,
               bnl = B * N * L * es;
  const double fwd_bytes = 4 * bdl + 2 * bnl;
  Report(name + " fwd", TimeMs([&] { Check(SelectiveScanForward(in, out, Tensor{}), "scan fwd"); }),
         fwd_bytes);
  const Tensor dout = Random({B, D, L}, dtype, -1.0f, 1.0f);
  SelectiveScanGrads g;
  g.du = Empty({B, D, L}, dtype);
  g.ddelta = Empty({B, D, L}, dtype);
  g.dA = Empty({D, N}, DType::kF32);
  g.dB = Empty({B, N, L}, dtype);
  g.dC = Empty({B, N, L}, dtype);
  g.dD = Empty({D}, DType::kF32);
  g.dz = Empty({B, D, L}, dtype);
  g.ddelta_bias = Empty({D}, DType::kF32);
  const double ms = TimeMs([&] {
    Check(SelectiveScanForward(in, out, Tensor{}), "scan fwd");
    Check(SelectiveScanBackward(in, dout, Tensor{}, g), "scan bwd");
  });
  Report(name + " fwd+bwd", ms, fwd_bytes + 7 * bdl + 4 * bnl);
}

// Mamba-2 SSD (mamba_chunk_scan_combined with D (H), z, dt_bias, softplus), G = 1.
void Ssd(const std::string& name, int64_t B, int64_t L, int64_t H, int64_t P, int64_t N,
         DType dtype) {
  if (!Wanted(name)) return;
  const int64_t G = 1;
  SsdInputs in;
  in.x = Random({B, L, H, P}, dtype, -1.0f, 1.0f);
  in.dt = Random({B, L, H}, dtype, -4.0f, -1.0f);
  in.A = Random({H}, DType::kF32, -8.0f, -1.0f);
  in.B = Random({B, L, G, N}, dtype, -1.0f, 1.0f);
  in.C = Random({B, L, G, N}, dtype, -1.0f, 1.0f);
  in.D = Random({H}, DType::kF32, -1.0f, 1.0f);
  in.z = Random({B, L, H, P}, dtype, -1.0f, 1.0f);
  in.dt_bias = Random({H}, DType::kF32, -0.5f, 0.5f);
  in.dt_softplus = true;
  const Tensor out = Empty({B, L, H, P}, dtype);
  const double es = static_cast<double>(DTypeSize(dtype)), x = B * L * H * P * es,
               dt = B * L * H * es;
  const double bc = B * L * G * N * es;
  const double fwd_bytes = 3 * x + dt + 2 * bc;
  Report(name + " fwd", TimeMs([&] { Check(SsdForward(in, out, Tensor{}), "ssd fwd"); }),
         fwd_bytes);
  const Tensor dout = Random({B, L, H, P}, dtype, -1.0f, 1.0f);
  SsdGrads g;
  g.dx = Empty({B, L, H, P}, dtype);
  g.ddt = Empty({B, L, H}, dtype);
  g.dA = Empty({H}, DType::kF32);
  g.dB = Empty({B, L, G, N}, dtype);
  g.dC = Empty({B, L, G, N}, dtype);
  g.dD = Empty({H}, DType::kF32);
  g.dz = Empty({B, L, H, P}, dtype);
  g.ddt_bias = Empty({H}, DType::kF32);
  const double ms = TimeMs([&] {
    Check(SsdForward(in, out, Tensor{}), "ssd fwd");
    Check(SsdBackward(in, dout, Tensor{}, g), "ssd bwd");
  });
  Report(name + " fwd+bwd", ms, fwd_bytes + 5 * x + 2 * dt + 4 * bc);
}

// One decode step of selective_state_update: Mamba-1 (P = 0 means the (B, D, N) form, H = D)
// or Mamba-2; bf16 x/dt/B/C/z, f32 state, D, z, dt_bias, softplus.
void Step(const std::string& name, int64_t B, int64_t H, int64_t P, int64_t N) {
  if (!Wanted(name)) return;
  const bool m2 = P > 0;
  const DType dt16 = DType::kBF16;
  StateUpdateInputs in;
  in.x = m2 ? Random({B, H, P}, dt16, -1, 1) : Random({B, H}, dt16, -1, 1);
  in.dt = Random({B, H}, dt16, -4, -1);
  in.A = m2 ? Random({H}, DType::kF32, -8, -1) : Random({H, N}, DType::kF32, -4, -0.5f);
  in.B = Random({B, 1, N}, dt16, -1, 1);
  in.C = Random({B, 1, N}, dt16, -1, 1);
  in.D = Random({H}, DType::kF32, -1, 1);
  in.z = m2 ? Random({B, H, P}, dt16, -1, 1) : Random({B, H}, dt16, -1, 1);
  in.dt_bias = Random({H}, DType::kF32, -0.5f, 0.5f);
  in.dt_softplus = true;
  const Tensor state =
      m2 ? Random({B, H, P, N}, DType::kF32, -1, 1) : Random({B, H, N}, DType::kF32, -1, 1);
  const Tensor out = m2 ? Empty({B, H, P}, dt16) : Empty({B, H}, dt16);
  const double rows = static_cast<double>(B * H * (m2 ? P : 1));
  Report(name, TimeMs([&] { Check(SelectiveStateUpdate(in, state, out), "step"); }),
         rows * N * 8 + rows * 6);
}

void Conv(const std::string& name, int64_t B, int64_t D, int64_t L, int64_t K) {
  if (!Wanted(name)) return;
  CausalConv1dInputs in;
  in.x = Random({B, D, L}, DType::kBF16, -1, 1);
  in.weight = Random({D, K}, DType::kF32, -0.5f, 0.5f);
  in.bias = Random({D}, DType::kF32, -0.5f, 0.5f);
  in.activation = Conv1dActivation::kSilu;
  const Tensor out = Empty({B, D, L}, DType::kBF16);
  const double bdl = 2.0 * B * D * L;  // bytes of one (B, D, L) bf16 tensor
  Report(name + " fwd", TimeMs([&] { Check(CausalConv1dForward(in, out, Tensor{}), "conv fwd"); }),
         2 * bdl);
  const Tensor dout = Random({B, D, L}, DType::kBF16, -1, 1);
  CausalConv1dGrads g;
  g.dx = Empty({B, D, L}, DType::kBF16);
  g.dweight = Empty({D, K}, DType::kF32);
  g.dbias = Empty({D}, DType::kF32);
  const double ms = TimeMs([&] {
    Check(CausalConv1dForward(in, out, Tensor{}), "conv fwd");
    Check(CausalConv1dBackward(in, dout, Tensor{}, g), "conv bwd");
  });
  Report(name + " fwd+bwd", ms, 2 * bdl + 3 * bdl);  // + x and dout read, dx written
}

void ConvUpdate(const std::string& name, int64_t B, int64_t D, int64_t K) {
  if (!Wanted(name)) return;
  CausalConv1dUpdateInputs in;
  in.x = Random({B, D}, DType::kBF16, -1, 1);
  in.weight = Random({D, K}, DType::kF32, -0.5f, 0.5f);
  in.bias = Random({D}, DType::kF32, -0.5f, 0.5f);
  in.activation = Conv1dActivation::kSilu;
  const Tensor state = Random({B, D, K}, DType::kF32, -1, 1);
  const Tensor out = Empty({B, D}, DType::kBF16);
  Report(name, TimeMs([&] { Check(CausalConv1dUpdate(in, state, out), "conv update"); }),
         B * D * (8.0 * K + 4));
}

}  // namespace
}  // namespace ssmkit::bench

int main(int argc, char** argv) {
  using namespace ssmkit::bench;
  using ssmkit::DType;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--cases" && i + 1 < argc) {
      try {
        g_cases = std::regex(argv[++i]);
      } catch (const std::regex_error& e) {
        std::fprintf(stderr, "ssmkit_cuda_bench: --cases '%s' is not a regex: %s\n", argv[i],
                     e.what());
        return 2;
      }
    } else {
      std::fprintf(stderr, "ssmkit_cuda_bench: unknown argument '%s' (usage: [--cases REGEX])\n",
                   arg.c_str());
      return 2;
    }
  }
  if (ssmkit::CudaDeviceCount() == 0) {
    std::fprintf(stderr, "ssmkit_cuda_bench: no CUDA device\n");
    return 1;
  }
  CopyBandwidth();
  ForEachVariant({&ssmkit::cuda::kScanVariants, &ssmkit::cuda::kScanBackwardVariants}, [] {
    Scan("scan m1-2.8b B=8 D=5120 N=16 L=2048 bf16", 8, 5120, 16, 2048, DType::kBF16);
    Scan("scan policy B=1 D=512 N=16 L=60 f32", 1, 512, 16, 60, DType::kF32);
  });
  ForEachVariant({&ssmkit::cuda::kSsdVariants}, [] {
    Ssd("ssd m2-130m B=8 L=2048 H=24 P=64 N=128 bf16", 8, 2048, 24, 64, 128, DType::kBF16);
    Ssd("ssd m2-2.7b B=8 L=2048 H=80 P=64 N=128 bf16", 8, 2048, 80, 64, 128, DType::kBF16);
  });
  for (int64_t b : {1, 16}) {
    Step("step m1-130m B=" + std::to_string(b) + " D=1536 N=16", b, 1536, 0, 16);
    Step("step m2-130m B=" + std::to_string(b) + " H=24 P=64 N=128", b, 24, 64, 128);
    ConvUpdate("conv-update m1-130m B=" + std::to_string(b) + " D=1536 K=4", b, 1536, 4);
  }
  ForEachVariant({&ssmkit::cuda::kConv1dVariants, &ssmkit::cuda::kConv1dBackwardVariants},
                 [] { Conv("conv m1-2.8b B=8 D=5120 L=2048 K=4 bf16", 8, 5120, 2048, 4); });
  for (void* p : g_buffers) cudaFree(p);
  return 0;
}
