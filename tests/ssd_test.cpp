// SSD forward: both algorithms against the fp64 oracle on fresh random inputs, outputs
// poisoned (NaN) before the call, errors as ||out - ref|| / ||ref||.
#include <string>
#include <tuple>
#include <vector>

#include "ssd_fixture.hpp"
#include "ssmkit/threads.hpp"

namespace ssmkit::testing {
namespace {

constexpr double kF32Tol = 1e-5;
constexpr double kBf16Tol = 1e-2;  // bf16 inputs, f32 accumulation, bf16 output

const SsdAlgorithm kAlgorithms[] = {SsdAlgorithm::kSequential, SsdAlgorithm::kChunked};

// Runs `c` with `options` and checks out and final_states against the oracle.
void CheckForward(const SsdCase& c, const SsdOptions& options, double tol) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  SCOPED_TRACE(c.Name() + " algorithm " + SsdAlgorithmName(options.algorithm) + " chunk " +
               std::to_string(options.chunk_size));
  Rng rng(seed);
  SsdProblem prob(c, rng);
  std::vector<double> want_out, want_final, got_out, got_final;
  prob.Reference(&want_out, &want_final);
  const Status s = RunForward(prob, options, &got_out, &got_final);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_LE(RelativeError(got_out, want_out), tol);
  EXPECT_LE(RelativeError(got_final, want_final), tol);
}

SsdCase AllOn() {
  SsdCase c;
  c.has_seq_idx = true;
  c.dt_min = 0.002f;
  c.dt_max = 0.15f;
  return c;
}

TEST(SsdForward, AllOptionsOn) {
  for (SsdAlgorithm a : kAlgorithms) CheckForward(AllOn(), Algo(a, 8), kF32Tol);
}

TEST(SsdForward, AllOptionsOff) {
  SsdCase c;
  c.has_D = c.has_z = c.has_dt_bias = c.has_h0 = c.softplus = false;
  for (SsdAlgorithm a : kAlgorithms) CheckForward(c, Algo(a, 8), kF32Tol);
}

// Each optional input turned off in turn from the all-on case.
TEST(SsdForward, EachOptionOff) {
  for (int option = 0; option < 7; ++option) {
    SsdCase c = AllOn();
    switch (option) {
      case 0:
        c.has_D = false;
        break;
      case 1:
        c.has_z = false;
        break;
      case 2:
        c.has_dt_bias = false;
        break;
      case 3:
        c.has_h0 = false;
        break;
      case 4:
        c.has_seq_idx = false;
        break;
      case 5:
        c.softplus = false;
        c.dt_min = 0.0f;
        c.dt_max = 1.0f;
        break;
      case 6:
        c.dt_min = 0.0f;
        c.dt_max = std::numeric_limits<float>::infinity();
        break;
    }
    for (SsdAlgorithm a : kAlgorithms) CheckForward(c, Algo(a, 8), kF32Tol);
  }
}

TEST(SsdForward, FinalStatesAbsent) {
  for (SsdAlgorithm a : kAlgorithms) {
    const uint64_t seed = FreshSeed();
    SCOPED_TRACE(SeedTrace(seed));
    Rng rng(seed);
    SsdProblem prob(AllOn(), rng);
    std::vector<double> want_out, want_final, got_out;
    prob.Reference(&want_out, &want_final);
    ASSERT_TRUE(RunForward(prob, Algo(a, 8), &got_out, nullptr).ok());
    EXPECT_LE(RelativeError(got_out, want_out), kF32Tol);
  }
}

TEST(SsdForward, GroupsAndHeadsPerGroup) {
  for (int64_t groups : {1, 2, 4}) {
    SsdCase c = AllOn();
    c.nheads = 4;
    c.ngroups = groups;
    for (SsdAlgorithm a : kAlgorithms) CheckForward(c, Algo(a, 8), kF32Tol);
  }
}

TEST(SsdForward, DPerHeadAndPerChannel) {
  for (bool per_channel : {false, true}) {
    SsdCase c = AllOn();
    c.d_per_channel = per_channel;
    for (SsdAlgorithm a : kAlgorithms) CheckForward(c, Algo(a, 8), kF32Tol);
  }
}

// Chunk sizes that divide L, that do not, one step, and longer than L.
TEST(SsdForward, ChunkSizes) {
  SsdCase c = AllOn();
  c.seqlen = 50;
  for (int64_t q : {1, 5, 10, 16, 25, 50, 64, 256})
    CheckForward(c, Algo(SsdAlgorithm::kChunked, q), kF32Tol);
}

// Decode-length sequences (the sequential path's short-sequence kernel): with and without
// initial states, N a multiple of 16 (states read and written in place) and not, each case
// after the others so a thread's scratch from an earlier call must not leak in.
TEST(SsdForward, SingleStep) {
  for (int64_t L : {1, 5}) {
    for (bool h0 : {true, false}) {
      for (int64_t N : {128, 24}) {
        SsdCase c = AllOn();
        c.seqlen = L;
        c.has_h0 = h0;
        c.dstate = N;
        for (SsdAlgorithm a : kAlgorithms) CheckForward(c, Algo(a), kF32Tol);
      }
    }
  }
}

// Head dims and state sizes off the vector width, and P = N = 1.
TEST(SsdForward, OddSizes) {
  for (auto [P, N] : {std::pair<int64_t, int64_t>{1, 1}, {3, 5}, {17, 33}, {64, 24}, {24, 128}}) {
    SsdCase c = AllOn();
    c.headdim = P;
    c.dstate = N;
    c.seqlen = 19;
    for (SsdAlgorithm a : kAlgorithms) CheckForward(c, Algo(a, 7), kF32Tol);
  }
}

TEST(SsdForward, Bf16Inputs) {
  SsdCase c = AllOn();
  c.dtype = DType::kBF16;
  for (SsdAlgorithm a : kAlgorithms) CheckForward(c, Algo(a, 8), kBf16Tol);
}

TEST(SsdForward, SoftplusIdentityBranch) {
  SsdCase c = AllOn();
  c.big_dt_fraction = 0.05;  // dt > 20: a decay of exp(20 A) ~ 0, a reset in all but name
  c.dt_max = std::numeric_limits<float>::infinity();
  for (SsdAlgorithm a : kAlgorithms) CheckForward(c, Algo(a, 8), kF32Tol);
}

// Mamba-2 sized heads over a long sequence: many chunks, many rebases of the scaled state.
TEST(SsdForward, LongSequence) {
  SsdCase c;
  c.batch = 1;
  c.seqlen = 2048;
  c.nheads = 2;
  c.ngroups = 1;
  c.headdim = 64;
  c.dstate = 128;
  c.has_seq_idx = false;
  CheckForward(c, Algo(SsdAlgorithm::kSequential), kF32Tol);
  CheckForward(c, Algo(SsdAlgorithm::kChunked, 256), kF32Tol);
  CheckForward(c, Algo(SsdAlgorithm::kChunked, 100), kF32Tol);
}

// Inputs as views into larger buffers (the zxbcdt projection of a Mamba-2 layer): strides
// on every dimension but the last.
TEST(SsdForward, StridedInputs) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const int64_t Bn = 2, L = 20, H = 4, P = 8, G = 2, N = 16;
  // One row per (b, l): [x (H*P) | B (G*N) | C (G*N) | dt (H) | pad]
  const int64_t row = H * P + 2 * G * N + H + 3;
  std::vector<float> buf(Bn * L * row);
  for (auto& v : buf) v = static_cast<float>(rng.Normal());
  for (int64_t i = 0; i < Bn * L; ++i)
    for (int64_t h = 0; h < H; ++h)
      buf[i * row + H * P + 2 * G * N + h] = static_cast<float>(rng.Uniform(-4, -1));
  auto view = [&](int64_t offset, std::initializer_list<int64_t> shape,
                  std::initializer_list<int64_t> strides) {
    Tensor t;
    t.data = buf.data() + offset;
    t.rank = static_cast<int>(shape.size());
    int d = 0;
    for (int64_t s : shape) t.shape[d++] = s;
    d = 0;
    for (int64_t s : strides) t.strides[d++] = s;
    return t;
  };
  std::vector<float> A(H);
  for (auto& v : A) v = static_cast<float>(-std::exp(rng.Uniform(0.0, 2.0)));
  SsdInputs in;
  in.x = view(0, {Bn, L, H, P}, {L * row, row, P, 1});
  in.B = view(H * P, {Bn, L, G, N}, {L * row, row, N, 1});
  in.C = view(H * P + G * N, {Bn, L, G, N}, {L * row, row, N, 1});
  in.dt = view(H * P + 2 * G * N, {Bn, L, H}, {L * row, row, 1});
  in.A = Tensor::Contiguous(A.data(), DType::kF32, {H});
  in.dt_softplus = true;
  // The same values, contiguous, through the oracle.
  std::vector<double> x_d, B_d, C_d, dt_d, A_d(A.begin(), A.end());
  for (int64_t b = 0; b < Bn; ++b) {
    for (int64_t l = 0; l < L; ++l) {
      const float* r = buf.data() + (b * L + l) * row;
      x_d.insert(x_d.end(), r, r + H * P);
      B_d.insert(B_d.end(), r + H * P, r + H * P + G * N);
      C_d.insert(C_d.end(), r + H * P + G * N, r + H * P + 2 * G * N);
      dt_d.insert(dt_d.end(), r + H * P + 2 * G * N, r + H * P + 2 * G * N + H);
    }
  }
  ref::SsdShape shape{Bn, L, H, P, G, N};
  shape.dt_softplus = true;
  ref::SsdInputs rin;
  rin.x = x_d.data();
  rin.B = B_d.data();
  rin.C = C_d.data();
  rin.dt = dt_d.data();
  rin.A = A_d.data();
  std::vector<double> want(Bn * L * H * P), want_final(Bn * H * P * N);
  ref::SsdForward(shape, rin, want.data(), want_final.data());
  for (SsdAlgorithm a : kAlgorithms) {
    HostTensor out({Bn, L, H, P}, DType::kF32), fin({Bn, H, P, N}, DType::kF32);
    out.Poison();
    fin.Poison();
    const Status s = SsdForward(in, out.view(), fin.view(), Algo(a, 6));
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_LE(RelativeError(out.ToDouble(), want), kF32Tol) << SsdAlgorithmName(a);
    EXPECT_LE(RelativeError(fin.ToDouble(), want_final), kF32Tol) << SsdAlgorithmName(a);
  }
}

// The same inputs and thread count give the same bits; the default algorithm runs.
// Both algorithms with dispatch forced to each compiled SIMD target (AVX-512, AVX2, the
// portable fallback): the vector width changes the padding of P and N, the register tiles and
// the short-sequence path's lane sums.
TEST(SsdForward, EverySimdTarget) {
  const int targets = ForEachSimdTarget([&] {
    for (auto [L, P, N] :
         {std::tuple<int64_t, int64_t, int64_t>{3, 13, 5}, {40, 8, 16}, {40, 24, 33}}) {
      SsdCase c = AllOn();
      c.seqlen = L;
      c.headdim = P;
      c.dstate = N;
      for (SsdAlgorithm a : kAlgorithms) CheckForward(c, Algo(a, 16), kF32Tol);
      c.dtype = DType::kBF16;
      CheckForward(c, Algo(SsdAlgorithm::kSequential, 16), kBf16Tol);
    }
  });
  EXPECT_GE(targets, kMinSimdTargets);
}

TEST(SsdForward, DeterministicAndAuto) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  SsdCase c = AllOn();
  c.seqlen = 40;
  SsdProblem prob(c, rng);
  std::vector<double> want_out, want_final;
  prob.Reference(&want_out, &want_final);
  for (SsdAlgorithm a : {SsdAlgorithm::kAuto, SsdAlgorithm::kSequential, SsdAlgorithm::kChunked}) {
    for (int threads : {1, 2, 3}) {
      SetNumThreads(threads);
      std::vector<double> out1, fin1, out2, fin2;
      ASSERT_TRUE(RunForward(prob, Algo(a, 16), &out1, &fin1).ok());
      ASSERT_TRUE(RunForward(prob, Algo(a, 16), &out2, &fin2).ok());
      EXPECT_EQ(out1, out2) << SsdAlgorithmName(a) << " threads " << threads;
      EXPECT_EQ(fin1, fin2) << SsdAlgorithmName(a) << " threads " << threads;
      EXPECT_LE(RelativeError(out1, want_out), kF32Tol);
    }
  }
  SetNumThreads(0);
}

}  // namespace
}  // namespace ssmkit::testing
