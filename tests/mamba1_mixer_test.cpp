// Mamba1MixerForward against its fp64 oracle (src/ref/mamba1_mixer_ref.hpp) with every weight
// dtype and the bf16 products on and off, against the six ops run one by one, the same bits at
// 1, 2 and 3 threads, out aliasing x, and its argument checks.
#include "ssmkit/mamba1_mixer.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "ref/mamba1_mixer_ref.hpp"
#include "ssmkit/conv1d.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/selective_scan.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

struct MixerCase {
  const char* label;
  int64_t B, L, d, D, N, R, K;

  std::string Describe() const {
    return std::string(label) + ": B=" + std::to_string(B) + " L=" + std::to_string(L) +
           " d=" + std::to_string(d) + " D=" + std::to_string(D) + " N=" + std::to_string(N) +
           " R=" + std::to_string(R) + " K=" + std::to_string(K);
  }
};

const MixerCase kCases[] = {
    {"policy window (two channel groups), d narrowed", 1, 60, 64, 512, 16, 16, 4},
    {"a short last group, odd sizes", 2, 37, 48, 300, 8, 5, 3},
    {"one group, one step", 3, 1, 16, 40, 4, 2, 2},
    {"three groups, 140 rows (the tiles' chunks of 64)", 2, 70, 32, 520, 4, 3, 4},
    {"three groups, out_proj whole (G d > D), x_proj per group", 1, 33, 200, 520, 4, 3, 4},
};

// One problem: the op's tensors and the oracle's values (as stored, after rounding).
struct MixerProblem {
  MixerCase c;
  HostTensor x, in_proj, conv_weight, conv_bias, x_proj, dt_proj, dt_bias, A, D, out_proj;
  std::vector<double> x_d, in_proj_d, conv_weight_d, conv_bias_d, x_proj_d, dt_proj_d, dt_bias_d,
      A_d, D_d, out_proj_d;

  // Every parameter at the scale of mamba_ssm's initialisation: projections uniform in
  // +-1/sqrt(fan_in), dt_bias the inverse softplus of steps log-uniform in [1e-3, 0.1], A from
  // -1 to -16 with noise, D near 1.
  MixerProblem(const MixerCase& mc, DType wdtype, Rng& rng) : c(mc) {
    const int64_t E = c.R + 2 * c.N;
    auto weight = [&](HostTensor& t, std::vector<double>& v, int64_t rows, int64_t cols) {
      t = HostTensor({rows, cols}, wdtype);
      const double bound = 1.0 / std::sqrt(static_cast<double>(cols));
      v = t.Fill(rng.UniformVec(rows * cols, -bound, bound));
    };
    x = HostTensor({c.B, c.L, c.d}, DType::kF32);
    x_d = x.Fill(rng.NormalVec(c.B * c.L * c.d));
    weight(in_proj, in_proj_d, 2 * c.D, c.d);
    weight(x_proj, x_proj_d, E, c.D);
    weight(dt_proj, dt_proj_d, c.D, c.R);
    weight(out_proj, out_proj_d, c.d, c.D);
    conv_weight = HostTensor({c.D, c.K}, DType::kF32);
    const double conv_bound = 1.0 / std::sqrt(static_cast<double>(c.K));
    conv_weight_d = conv_weight.Fill(rng.UniformVec(c.D * c.K, -conv_bound, conv_bound));
    conv_bias = HostTensor({c.D}, DType::kF32);
    conv_bias_d = conv_bias.Fill(rng.UniformVec(c.D, -conv_bound, conv_bound));
    std::vector<double> dt(static_cast<size_t>(c.D));
    for (auto& v : dt) {
      const double step = std::exp(rng.Uniform(std::log(1e-3), std::log(0.1)));
      v = step + std::log(-std::expm1(-step));  // softplus^-1
    }
    dt_bias = HostTensor({c.D}, DType::kF32);
    dt_bias_d = dt_bias.Fill(dt);
    std::vector<double> a(static_cast<size_t>(c.D * c.N));
    for (int64_t i = 0; i < c.D * c.N; ++i) a[i] = -(1 + i % c.N) * rng.Uniform(0.8, 1.25);
    A = HostTensor({c.D, c.N}, DType::kF32);
    A_d = A.Fill(a);
    D = HostTensor({c.D}, DType::kF32);
    D_d = D.Fill(rng.UniformVec(c.D, 0.5, 1.5));
  }

  Mamba1MixerInputs Inputs() {
    Mamba1MixerInputs in;
    in.x = x.view();
    in.in_proj = in_proj.view();
    in.conv_weight = conv_weight.view();
    in.conv_bias = conv_bias.view();
    in.x_proj = x_proj.view();
    in.dt_proj = dt_proj.view();
    in.dt_bias = dt_bias.view();
    in.A = A.view();
    in.D = D.view();
    in.out_proj = out_proj.view();
    return in;
  }

  std::vector<double> Oracle() const {
    ref::Mamba1MixerShape s{c.B, c.L, c.d, c.D, c.N, c.R, c.K};
    ref::Mamba1MixerWeights w{in_proj_d.data(), conv_weight_d.data(), conv_bias_d.data(),
                              x_proj_d.data(),  dt_proj_d.data(),     dt_bias_d.data(),
                              A_d.data(),       D_d.data(),           out_proj_d.data()};
    std::vector<double> out(static_cast<size_t>(c.B * c.L * c.d));
    ref::Mamba1MixerForward(s, w, x_d.data(), out.data());
    return out;
  }

  // The op's output, poisoned before the call.
  std::vector<double> Run() {
    HostTensor out({c.B, c.L, c.d}, DType::kF32);
    out.Poison();
    const Status s = Mamba1MixerForward(Inputs(), out.view());
    EXPECT_TRUE(s.ok()) << s.message();
    return out.ToDouble();
  }
};

// Measured: 1-4e-7 in f32, 2-3e-3 with the bf16 products, which round x to bf16 before each of
// the four products (~2^-9 relative each).
double Tolerance(DType wdtype, bool products) {
  return wdtype == DType::kBF16 && products ? 1e-2 : 5e-6;
}

class ScopedBf16Products {
 public:
  explicit ScopedBf16Products(bool enable) : was_(Bf16Products()), on_(SetBf16Products(enable)) {}
  ~ScopedBf16Products() { SetBf16Products(was_); }
  bool on() const { return on_; }

 private:
  bool was_, on_;
};

// fn(case, products, rng) for every case with the bf16 products off and (where the CPU has
// AVX-512 BF16; elsewhere on is the same path as off) on, from a fresh seed.
template <class Fn>
void ForEachCase(Fn&& fn) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  for (const MixerCase& c : kCases) {
    for (bool products : {false, true}) {
      const ScopedBf16Products scoped(products);
      if (products && !scoped.on()) continue;
      SCOPED_TRACE(c.Describe() + (products ? " bf16 products" : ""));
      fn(c, products, rng);
    }
  }
}

TEST(Mamba1Mixer, MatchesTheOracle) {
  ScopedThreads threads(2);
  ForEachCase([](const MixerCase& c, bool products, Rng& rng) {
    for (DType wdtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(std::string("w=") + DTypeName(wdtype));
      MixerProblem p(c, wdtype, rng);
      EXPECT_LE(RelativeError(p.Run(), p.Oracle()), Tolerance(wdtype, products));
    }
  });
}

// The same channels through the six ops (what a caller ran before this op existed).
std::vector<double> OneOpAtATime(MixerProblem& p) {
  const MixerCase& c = p.c;
  const int64_t T = c.B * c.L, E = c.R + 2 * c.N;
  std::vector<float> xz(static_cast<size_t>(2 * c.D * T)), xc(c.D * T), xdbl(E * T), dt(c.D * T),
      y(c.D * T);
  HostTensor out({c.B, c.L, c.d}, DType::kF32);
  auto features = [&](float* data, int64_t n) {  // (T, n) over a channel-major (n, T) buffer
    Tensor t = Tensor::Contiguous(data, DType::kF32, {T, n});
    t.strides = {1, T};
    return t;
  };
  auto channels = [&](float* data, int64_t n) {  // (B, n, L) over the same
    Tensor t = Tensor::Contiguous(data, DType::kF32, {c.B, n, c.L});
    t.strides = {c.L, T, 1};
    return t;
  };
  const Tensor x_rows = Tensor::Contiguous(p.x.data(), DType::kF32, {T, c.d});
  EXPECT_TRUE(LinearForward({x_rows, p.in_proj.view(), {}}, features(xz.data(), 2 * c.D)).ok());
  EXPECT_TRUE(CausalConv1dForward({channels(xz.data(), c.D),
                                   p.conv_weight.view(),
                                   p.conv_bias.view(),
                                   {},
                                   Conv1dActivation::kSilu},
                                  channels(xc.data(), c.D), {})
                  .ok());
  EXPECT_TRUE(
      LinearForward({features(xc.data(), c.D), p.x_proj.view(), {}}, features(xdbl.data(), E))
          .ok());
  EXPECT_TRUE(
      LinearForward({features(xdbl.data(), c.R), p.dt_proj.view(), {}}, features(dt.data(), c.D))
          .ok());
  SelectiveScanInputs scan;
  scan.u = channels(xc.data(), c.D);
  scan.delta = channels(dt.data(), c.D);
  scan.A = p.A.view();
  scan.B = channels(xdbl.data() + c.R * T, c.N);
  scan.C = channels(xdbl.data() + (c.R + c.N) * T, c.N);
  scan.D = p.D.view();
  scan.z = channels(xz.data() + c.D * T, c.D);
  scan.delta_bias = p.dt_bias.view();
  scan.delta_softplus = true;
  EXPECT_TRUE(SelectiveScanForward(scan, channels(y.data(), c.D), {}).ok());
  const Tensor out_rows = Tensor::Contiguous(out.data(), DType::kF32, {T, c.d});
  EXPECT_TRUE(LinearForward({features(y.data(), c.D), p.out_proj.view(), {}}, out_rows).ok());
  return out.ToDouble();
}

TEST(Mamba1Mixer, MatchesTheOpsOneByOne) {
  ScopedThreads threads(2);
  ForEachCase([](const MixerCase& c, bool products, Rng& rng) {
    MixerProblem p(c, DType::kBF16, rng);
    // Summed per group of channels on AMX's tiles, whole otherwise: f32 rounding apart, which
    // with the bf16 products can flip the rounding of a product's x to bf16 (measured up to
    // 1e-5 in 2,000 cases).
    EXPECT_LE(RelativeError(p.Run(), OneOpAtATime(p)), products ? 1e-4 : 1e-6);
  });
}

// Repeated calls give the same bits, and so do 1, 2 and 3 threads wherever the products' own
// bits do not depend on the thread count: AMX's tiles and the bf16 products, and the few-rows
// kernels (T <= kLinearGemvMaxRows); sgemm's, splitting the rows of W over threads, may.
TEST(Mamba1Mixer, SameBitsAtAnyThreadCount) {
  ForEachCase([](const MixerCase& c, bool products, Rng& rng) {
    MixerProblem p(c, products ? DType::kBF16 : DType::kF32, rng);
    std::vector<double> one;
    {
      ScopedThreads threads(1);
      one = p.Run();
      EXPECT_EQ(p.Run(), one) << "a second call";
    }
    for (int n : {2, 3}) {
      ScopedThreads threads(n);
      const std::vector<double> again = p.Run();
      EXPECT_EQ(p.Run(), again) << n << " threads, a second call";
      if (products || c.B * c.L <= kLinearGemvMaxRows) EXPECT_EQ(again, one) << n << " threads";
    }
  });
}

// Callers on several threads at once (one holds the pool, the others run their groups on their
// own threads; each has its own workspace) get the bits of a lone call. Run under ThreadSanitizer
// by the tsan preset (its filter takes *ConcurrentCallers*).
TEST(Mamba1Mixer, ConcurrentCallersGetTheBitsOfALoneCall) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  ScopedThreads threads(2);
  const ScopedBf16Products scoped(true);  // the tiles' per-group sums where the CPU has them
  MixerProblem p(kCases[0], scoped.on() ? DType::kBF16 : DType::kF32, rng);
  const std::vector<double> lone = p.Run();
  const Mamba1MixerInputs inputs = p.Inputs();
  std::atomic<int> differing{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      HostTensor out({p.c.B, p.c.L, p.c.d}, DType::kF32);
      for (int i = 0; i < 20; ++i) {
        out.Poison();
        if (!Mamba1MixerForward(inputs, out.view()).ok() || out.ToDouble() != lone) ++differing;
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(differing.load(), 0) << "of 80 concurrent calls";
}

TEST(Mamba1Mixer, OutMayBeX) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  ScopedThreads threads(2);
  MixerProblem p(kCases[0], DType::kF32, rng);
  const std::vector<double> apart = p.Run();
  const Status s = Mamba1MixerForward(p.Inputs(), p.x.view());
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(p.x.ToDouble(), apart);
}

// Each bad argument is refused with its name, expected and given, and writes nothing.
TEST(Mamba1Mixer, RefusesBadArguments) {
  Rng rng(7);
  MixerProblem p(kCases[1], DType::kF32, rng);
  HostTensor out({p.c.B, p.c.L, p.c.d}, DType::kF32);
  out.Poison();
  HostTensor wide_in_proj({2 * p.c.D + 2, p.c.d}, DType::kF32);
  HostTensor thin_x_proj({2 * p.c.N, p.c.D}, DType::kF32);
  HostTensor wide_conv({p.c.D, 9}, DType::kF32);
  HostTensor short_bias({p.c.D - 1}, DType::kF32);
  HostTensor ints({2 * p.c.D, p.c.d}, DType::kI32);
  struct Bad {
    const char* name;
    std::function<void(Mamba1MixerInputs&, Tensor&)> edit;
    const char* message;  // a part of the error
  };
  const Bad bads[] = {
      {"in_proj rows", [&](Mamba1MixerInputs& in, Tensor&) { in.in_proj = wide_in_proj.view(); },
       "in_proj: expected shape (2D, d)"},
      {"x_proj without dt rows",
       [&](Mamba1MixerInputs& in, Tensor&) { in.x_proj = thin_x_proj.view(); },
       "x_proj: expected R + 2N rows, R >= 1"},
      {"conv width 9", [&](Mamba1MixerInputs& in, Tensor&) { in.conv_weight = wide_conv.view(); },
       "conv_weight: expected (D, K) with 2 <= K <= 8"},
      {"dt_bias length", [&](Mamba1MixerInputs& in, Tensor&) { in.dt_bias = short_bias.view(); },
       "dt_bias: expected shape (D)"},
      {"integer in_proj", [&](Mamba1MixerInputs& in, Tensor&) { in.in_proj = ints.view(); },
       "in_proj: expected dtype"},
      {"x of rank 2",
       [&](Mamba1MixerInputs& in, Tensor&) {
         in.x.rank = 2;
         in.x.shape = {p.c.B * p.c.L, p.c.d};
         in.x.strides = {p.c.d, 1};
       },
       "x: expected rank 3"},
      {"x's rows unevenly spaced", [&](Mamba1MixerInputs& in, Tensor&) { in.x.strides[0] += 1; },
       "x: expected rows evenly spaced"},
      {"out over in_proj", [&](Mamba1MixerInputs& in, Tensor& o) { o.data = in.in_proj.data; },
       "out: expected memory not overlapping in_proj"},
      {"A transposed",
       [&](Mamba1MixerInputs& in, Tensor&) { std::swap(in.A.shape[0], in.A.shape[1]); },
       "expected"},
  };
  for (const Bad& bad : bads) {
    SCOPED_TRACE(bad.name);
    Mamba1MixerInputs in = p.Inputs();
    Tensor o = out.view();
    bad.edit(in, o);
    const Status s = Mamba1MixerForward(in, o);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(bad.message), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("mamba1_mixer"), std::string::npos) << s.message();
  }
  for (double v : out.ToDouble()) ASSERT_TRUE(std::isnan(v));  // nothing written
  Mamba1MixerInputs on_gpu = p.Inputs();
  Tensor o = out.view();
  for (Tensor* t :
       {&on_gpu.x, &on_gpu.in_proj, &on_gpu.conv_weight, &on_gpu.conv_bias, &on_gpu.x_proj,
        &on_gpu.dt_proj, &on_gpu.dt_bias, &on_gpu.A, &on_gpu.D, &on_gpu.out_proj, &o}) {
    t->device = Device::kCuda;
  }
  EXPECT_EQ(Mamba1MixerForward(on_gpu, o).code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace ssmkit::testing
