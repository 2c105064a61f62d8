// `ssmkit bench norm`: gated RMSNorm (rmsnorm_fn, inside a Mamba-2 block) and residual add +
// RMSNorm (rms_norm_fn, between blocks) at the docs/targets.md workload shapes, forward and
// forward+backward. Both are memory bound, so each case is printed with its bandwidth and,
// as the peer, a memcpy moving the same number of bytes in the same run.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "bench_harness.hpp"
#include "core/dtype.hpp"
#include "core/parallel.hpp"
#include "ssmkit/norm.hpp"

namespace ssmkit::bench {
namespace {

enum class Kind { kGated, kAdd };

struct NormCase {
  const char* shape;  // docs/targets.md workload name
  Kind kind;
  int64_t rows, features, group_size;  // M = B * L, E; S (gated only; 0 = E)
  bool has_z, norm_before_gate, has_residual;
  DType dtype;
  const char* variant;
};

// mamba2-130m: d_ssm = 1536 gated by z, one group, norm_before_gate = False (its
// RMSNormGated); both 130m models: d_model = 768 residual stream with a norm per layer.
// L = 2048, B = 1; decode is one token. policy: d_model 256, 60 frames (batch 256 to train).
constexpr NormCase kCases[] = {
    {"m2-130m", Kind::kGated, 2048, 1536, 1536, true, false, false, DType::kF32,
     "f32 z gate-first"},
    {"m2-130m", Kind::kGated, 2048, 1536, 1536, true, true, false, DType::kF32, "f32 z gate-last"},
    {"m2-130m", Kind::kGated, 2048, 1536, 1536, true, false, false, DType::kBF16,
     "bf16 z gate-first"},
    {"m2-130m", Kind::kGated, 2048, 1536, 0, false, true, false, DType::kF32, "f32 no z"},
    {"m2-130m", Kind::kGated, 2048, 1536, 256, true, false, false, DType::kF32, "f32 z S=256"},
    {"m1-130m", Kind::kAdd, 2048, 768, 0, false, true, true, DType::kF32, "f32 +residual"},
    {"m1-130m", Kind::kAdd, 2048, 768, 0, false, true, true, DType::kBF16, "bf16 +residual"},
    {"m1-130m", Kind::kAdd, 2048, 1536, 0, false, true, true, DType::kF32, "f32 E=1536"},
    {"policy", Kind::kAdd, 60, 256, 0, false, true, true, DType::kF32, "f32 +residual"},
    {"policy-train", Kind::kAdd, 15360, 256, 0, false, true, true, DType::kF32, "f32 +residual"},
    {"decode", Kind::kGated, 1, 1536, 1536, true, false, false, DType::kF32, "f32 z gate-first"},
    {"decode", Kind::kAdd, 1, 768, 0, false, true, true, DType::kF32, "f32 +residual"},
};

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

struct NormData {
  std::mt19937 rng{1234};
  const NormCase& c;
  const int64_t M, E;
  Buffer x, z, residual, weight, bias, out, residual_out, dout, dresidual_out;
  Buffer dx, dz, dresidual, dweight, dbias;

  explicit NormData(const NormCase& nc)
      : c(nc),
        M(nc.rows),
        E(nc.features),
        x({M, E}, c.dtype, rng),
        z({M, E}, c.dtype, rng),
        residual({M, E}, DType::kF32, rng),
        weight({E}, DType::kF32, rng),
        bias({E}, DType::kF32, rng),
        out({M, E}, c.dtype, rng),
        residual_out({M, E}, DType::kF32, rng),
        dout({M, E}, c.dtype, rng),
        dresidual_out({M, E}, DType::kF32, rng),
        dx({M, E}, c.dtype, rng),
        dz({M, E}, c.dtype, rng),
        dresidual({M, E}, DType::kF32, rng),
        dweight({E}, DType::kF32, rng),
        dbias({E}, DType::kF32, rng) {}

  Status Forward() {
    if (c.kind == Kind::kGated) {
      RmsNormInputs in{x.view, weight.view, Tensor{}, c.has_z ? z.view : Tensor{}};
      return RmsNormForward(in, out.view, GatedOptions());
    }
    AddRmsNormInputs in{x.view, residual.view, weight.view, Tensor{}};
    return AddRmsNormForward(in, out.view, residual_out.view, {1e-5f});
  }
  Status Backward() {
    if (c.kind == Kind::kGated) {
      RmsNormInputs in{x.view, weight.view, Tensor{}, c.has_z ? z.view : Tensor{}};
      RmsNormGrads g{dx.view, dweight.view, Tensor{}, c.has_z ? dz.view : Tensor{}};
      return RmsNormBackward(in, dout.view, g, GatedOptions());
    }
    AddRmsNormInputs in{x.view, residual.view, weight.view, Tensor{}};
    AddRmsNormGrads g{dx.view, dresidual.view, dweight.view, Tensor{}};
    return AddRmsNormBackward(in, dout.view, dresidual_out.view, g, {1e-5f});
  }
  RmsNormOptions GatedOptions() const { return {1e-5f, c.group_size, c.norm_before_gate}; }

  // Minimum traffic: each (M, E) operand read or written once.
  double ForwardBytes() const {
    const double n = static_cast<double>(M * E), s = static_cast<double>(DTypeSize(c.dtype));
    if (c.kind == Kind::kGated) return n * s * (c.has_z ? 3 : 2);  // x, z -> out
    return n * (2 * s + 8);  // x, residual -> out, residual_out
  }
  double BackwardBytes() const {
    const double n = static_cast<double>(M * E), s = static_cast<double>(DTypeSize(c.dtype));
    if (c.kind == Kind::kGated) return n * s * (c.has_z ? 5 : 3);  // x, z, dout -> dx, dz
    return n * (3 * s + 12);  // x, residual, dout, dresidual_out -> dx, dresidual
  }
};

// The peer: memcpy moving `bytes` in total (half read, half written), split over the same
// threads as the op (ParallelFor) in pieces of at least 256 KiB, so that the ratio reads as
// a share of copy bandwidth (and a tiny copy stays on one thread, as the op does).
double CopyMs(const Options& options, double bytes) {
  const int64_t half = static_cast<int64_t>(bytes / 2), piece = 256 * 1024;
  const int64_t pieces = std::max<int64_t>(1, half / piece);
  std::vector<uint8_t> src(static_cast<size_t>(half), 1), dst(static_cast<size_t>(half), 0);
  return MedianMs(options, [&] {
    ParallelFor(pieces, [&](int64_t begin, int64_t end, int) {
      const int64_t from = half * begin / pieces, to = half * end / pieces;
      std::memcpy(dst.data() + from, src.data() + from, static_cast<size_t>(to - from));
    });
  });
}

int RunNormBench(const Options& options) {
  if (!options.ggml.empty()) {
    std::fprintf(stderr,
                 "bench norm: --ggml: no ggml case here (the peer is a memcpy in this run)\n");
    return 2;
  }
  std::vector<Result> results;
  for (const NormCase& c : kCases) {
    if (!options.shape.empty() && options.shape != c.shape) continue;
    if (!options.algo.empty() && options.algo != c.variant) continue;
    NormData data(c);
    const char* op = c.kind == Kind::kGated ? "rmsnorm" : "add_rmsnorm";
    Status status = Status::Ok();
    const double fwd_ms = MedianMs(options, [&] { status = data.Forward(); });
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.message().c_str());
      return 1;
    }
    const double elements = static_cast<double>(c.rows * c.features);
    Result fwd{op, c.shape, c.variant, "fwd", fwd_ms, data.ForwardBytes(), elements, "elem"};
    fwd.peer_ms = CopyMs(options, fwd.bytes);
    fwd.peer = "memcpy of the same bytes";
    results.push_back(fwd);
    const double both_ms = MedianMs(options, [&] {
      status = data.Forward();
      if (status.ok()) status = data.Backward();
    });
    if (!status.ok()) {
      std::fprintf(stderr, "%s\n", status.message().c_str());
      return 1;
    }
    Result both{op,        c.shape, c.variant,
                "fwd+bwd", both_ms, data.ForwardBytes() + data.BackwardBytes(),
                elements,  "elem"};
    both.peer_ms = CopyMs(options, both.bytes);
    both.peer = "memcpy of the same bytes";
    results.push_back(both);
  }
  Print(options, results);
  return 0;
}

const SuiteRegistration kRegistration{
    {"norm",
     "gated RMSNorm and residual add + RMSNorm: m2-130m, m1-130m, policy, policy-train, decode",
     RunNormBench}};

}  // namespace
}  // namespace ssmkit::bench
