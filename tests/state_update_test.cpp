// selective_state_update against the fp64 oracle: both forms (Mamba-1 (B, D, N), Mamba-2
// (B, H, P, N)), G = 1 and G > 1, B/C as (B, N) or (B, G, N), every optional input on and off,
// f32 and bf16, odd N (masked tails), strided rows, state_batch_indices with skipped rows (their
// state rows bit-identical afterwards, their out rows untouched), out aliasing x, the model
// shapes (threaded, several segments), every compiled SIMD target, determinism.
#include "ssmkit/state_update.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "ref/state_update_ref.hpp"
#include "ssmkit/threads.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

double Tolerance(DType dtype) { return dtype == DType::kF32 ? 1e-5 : 1e-2; }

// A tensor whose last dimension is stored `pad` elements wider (a strided view); the pads are
// random finite values the op must neither use nor write.
class PaddedTensor {
 public:
  PaddedTensor() = default;
  PaddedTensor(std::vector<int64_t> shape, int64_t pad, DType dtype)
      : shape_(shape), pad_(pad), storage_(Widened(shape, pad), dtype) {
    last_ = shape.empty() ? 1 : shape.back();
    rows_ = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i) rows_ *= shape[i];
  }
  Tensor view() {
    Tensor v = storage_.view();
    v.shape[v.rank - 1] = last_;
    return v;
  }
  std::vector<double> Fill(Rng& rng, const std::vector<double>& values) {
    std::vector<double> all = rng.NormalVec(rows_ * (last_ + pad_));
    for (int64_t r = 0; r < rows_; ++r) {
      for (int64_t i = 0; i < last_; ++i) all[r * (last_ + pad_) + i] = values[r * last_ + i];
    }
    storage_.Fill(all);
    return Values();
  }
  std::vector<double> Values() const {
    const std::vector<double> all = storage_.ToDouble();
    std::vector<double> v(static_cast<size_t>(rows_ * last_));
    for (int64_t r = 0; r < rows_; ++r) {
      for (int64_t i = 0; i < last_; ++i) v[r * last_ + i] = all[r * (last_ + pad_) + i];
    }
    return v;
  }
  void Poison() { storage_.Poison(); }
  int64_t numel() const { return rows_ * last_; }
  const std::vector<uint8_t>& bytes() const { return storage_.bytes(); }
  // Bytes of outer index i (the first dimension), pads included.
  std::vector<uint8_t> Slab(int64_t i) const {
    const int64_t slab = storage_.bytes().size() / shape_[0];
    return {storage_.bytes().begin() + i * slab, storage_.bytes().begin() + (i + 1) * slab};
  }

 private:
  static std::vector<int64_t> Widened(std::vector<int64_t> shape, int64_t pad) {
    shape.back() += pad;
    return shape;
  }
  std::vector<int64_t> shape_;
  int64_t pad_ = 0, last_ = 1, rows_ = 1;
  HostTensor storage_;
};

struct StateCase {
  bool mamba2 = false;
  int64_t B = 2, H = 8, P = 1, N = 16;  // H is D for Mamba-1 (P = 1)
  int64_t b_groups = 1, c_groups = 1;   // 0: B (or C) in the (B, N) form
  DType dtype = DType::kF32;            // x, dt, z, out
  DType bc_dtype = DType::kF32;         // B, C
  int skip = 0;                         // 0: no D, 1: D (H) / (D), 2: D (H, P)
  bool z = false, dt_bias = false, softplus = false;
  bool indices = false;  // Bs = B + 3, rows permuted, every third row skipped
  int64_t pad = 0;       // strided x, z, out, B, C and state rows
  bool alias = false;    // out = x
  std::string Name() const {
    return std::string(mamba2 ? "mamba2" : "mamba1") + " B=" + std::to_string(B) +
           " H=" + std::to_string(H) + " P=" + std::to_string(P) + " N=" + std::to_string(N) +
           " Gb=" + std::to_string(b_groups) + " Gc=" + std::to_string(c_groups) + " " +
           DTypeName(dtype) + " bc " + DTypeName(bc_dtype) + " skip=" + std::to_string(skip) +
           (z ? " z" : "") + (dt_bias ? " dt_bias" : "") + (softplus ? " softplus" : "") +
           (indices ? " indices" : "") + " pad=" + std::to_string(pad) + (alias ? " out=x" : "");
  }
  int64_t StateBatch() const { return indices ? B + 3 : B; }
  std::vector<int64_t> XShape() const {
    return mamba2 ? std::vector<int64_t>{B, H, P} : std::vector<int64_t>{B, H};
  }
  std::vector<int64_t> StateShape() const {
    return mamba2 ? std::vector<int64_t>{StateBatch(), H, P, N}
                  : std::vector<int64_t>{StateBatch(), H, N};
  }
  std::vector<int64_t> BCShape(int64_t groups) const {
    return groups == 0 ? std::vector<int64_t>{B, N} : std::vector<int64_t>{B, groups, N};
  }
};

struct StateProblem {
  StateCase c;
  PaddedTensor x, z, Bt, Ct, state;
  HostTensor dt, A, D, dt_bias, indices;
  std::vector<double> xd, zd, bd, cd, sd, dtd, ad, dd, dbd;
  std::vector<int32_t> idx;

  StateProblem(const StateCase& cc, Rng& rng)
      : c(cc),
        x(cc.XShape(), cc.pad, cc.dtype),
        z(cc.XShape(), cc.pad, cc.dtype),
        Bt(cc.BCShape(cc.b_groups), cc.pad, cc.bc_dtype),
        Ct(cc.BCShape(cc.c_groups), cc.pad, cc.bc_dtype),
        state(cc.StateShape(), cc.pad, DType::kF32),
        dt({cc.B, cc.H}, cc.dtype),
        A(cc.mamba2 ? std::vector<int64_t>{cc.H} : std::vector<int64_t>{cc.H, cc.N}, DType::kF32),
        D(cc.skip == 2 ? std::vector<int64_t>{cc.H, cc.P} : std::vector<int64_t>{cc.H},
          DType::kF32),
        dt_bias({cc.H}, DType::kF32),
        indices({cc.B}, DType::kI32) {
    xd = x.Fill(rng, rng.NormalVec(x.numel()));
    if (c.z) zd = z.Fill(rng, rng.NormalVec(z.numel()));
    bd = Bt.Fill(rng, rng.NormalVec(Bt.numel()));
    cd = Ct.Fill(rng, rng.NormalVec(Ct.numel()));
    sd = state.Fill(rng, rng.NormalVec(state.numel()));
    std::vector<double> dtv =
        c.softplus ? rng.UniformVec(c.B * c.H, -4.0, 1.0) : rng.UniformVec(c.B * c.H, 0.4, 1.0);
    if (c.softplus) dtv[0] = 25.0;  // above softplus' threshold: the identity
    dtd = dt.Fill(dtv);
    ad = A.Fill(rng.UniformVec(c.mamba2 ? c.H : c.H * c.N, -3.0, -0.2));
    if (c.skip) dd = D.Fill(rng.UniformVec(c.skip == 2 ? c.H * c.P : c.H, -1.0, 1.0));
    if (c.dt_bias) dbd = dt_bias.Fill(rng.UniformVec(c.H, -0.3, 0.3));
    if (c.indices) {  // a permutation of the pool's rows, every third batch row a pad slot
      std::vector<int32_t> pool(c.StateBatch());
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(),
                   std::mt19937(static_cast<uint32_t>(rng.Uniform(0, 1e9))));
      for (int64_t b = 0; b < c.B; ++b) idx.push_back(b % 3 == 1 ? -1 : pool[b]);
      indices.Fill(std::vector<double>(idx.begin(), idx.end()));
    }
  }

  StateUpdateInputs Inputs() {
    StateUpdateInputs in;
    in.x = x.view();
    in.dt = dt.view();
    in.A = A.view();
    in.B = Bt.view();
    in.C = Ct.view();
    if (c.skip) in.D = D.view();
    if (c.z) in.z = z.view();
    if (c.dt_bias) in.dt_bias = dt_bias.view();
    if (c.indices) in.state_batch_indices = indices.view();
    in.dt_softplus = c.softplus;
    return in;
  }

  // The oracle's step on a copy of the state: (out, state after).
  std::pair<std::vector<double>, std::vector<double>> Oracle() const {
    ref::StateUpdateShape s;
    s.batch = c.B;
    s.state_batch = c.StateBatch();
    s.dim = c.H;
    s.headdim = c.P;
    s.dstate = c.N;
    s.b_groups = std::max<int64_t>(1, c.b_groups);
    s.c_groups = std::max<int64_t>(1, c.c_groups);
    s.d_per_p = c.skip == 2;
    s.dt_softplus = c.softplus;
    ref::StateUpdateInputs in;
    in.x = xd.data();
    in.dt = dtd.data();
    in.A = ad.data();
    in.B = bd.data();
    in.C = cd.data();
    in.D = c.skip ? dd.data() : nullptr;
    in.z = c.z ? zd.data() : nullptr;
    in.dt_bias = c.dt_bias ? dbd.data() : nullptr;
    in.state_batch_indices = c.indices ? idx.data() : nullptr;
    std::vector<double> out(xd.size(), std::nan("")), st = sd;
    if (c.mamba2) {
      ref::SelectiveStateUpdate2(s, in, st.data(), out.data());
    } else {
      ref::SelectiveStateUpdate1(s, in, st.data(), out.data());
    }
    return {out, st};
  }
  bool Skipped(int64_t b) const { return c.indices && idx[b] < 0; }
  bool StateRowUsed(int64_t sb) const {
    if (!c.indices) return true;
    return std::find(idx.begin(), idx.end(), static_cast<int32_t>(sb)) != idx.end();
  }
};

struct StepResult {
  double out_error = 0.0, state_error = 0.0;
  bool skipped_out_untouched = true, unused_state_rows_identical = true;
};

StepResult Step(const StateCase& c, uint64_t seed) {
  Rng rng(seed);
  StateProblem prob(c, rng);
  PaddedTensor out(c.XShape(), c.pad, c.dtype);
  out.Poison();
  std::vector<std::vector<uint8_t>> before;
  for (int64_t sb = 0; sb < c.StateBatch(); ++sb) before.push_back(prob.state.Slab(sb));
  const std::vector<double> x_before = prob.xd;
  const Status s =
      SelectiveStateUpdate(prob.Inputs(), prob.state.view(), c.alias ? prob.x.view() : out.view());
  EXPECT_TRUE(s.ok()) << s.message();
  const auto [want_out, want_state] = prob.Oracle();
  const std::vector<double> got = c.alias ? prob.x.Values() : out.Values();
  StepResult r;
  // Rows that ran: compared with the oracle; skipped rows: out untouched (NaN, or x when aliased).
  const int64_t row = static_cast<int64_t>(got.size()) / c.B;
  std::vector<double> got_run, want_run;
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t i = b * row; i < (b + 1) * row; ++i) {
      if (!prob.Skipped(b)) {
        got_run.push_back(got[i]);
        want_run.push_back(want_out[i]);
      } else if (c.alias ? got[i] != x_before[i] : !std::isnan(got[i])) {
        r.skipped_out_untouched = false;
      }
    }
  }
  r.out_error = RelativeError(got_run, want_run);
  r.state_error = RelativeError(prob.state.Values(), want_state);
  for (int64_t sb = 0; sb < c.StateBatch(); ++sb) {
    if (!prob.StateRowUsed(sb) && prob.state.Slab(sb) != before[sb])
      r.unused_state_rows_identical = false;
  }
  return r;
}

void ExpectStep(const StateCase& c, uint64_t seed, double* worst_out = nullptr) {
  SCOPED_TRACE(c.Name());
  const StepResult r = Step(c, seed);
  EXPECT_LE(
      r.out_error,
      Tolerance(c.dtype == DType::kF32 && c.bc_dtype == DType::kF32 ? DType::kF32 : DType::kBF16));
  EXPECT_LE(r.state_error, 1e-5);
  EXPECT_TRUE(r.skipped_out_untouched);
  EXPECT_TRUE(r.unused_state_rows_identical);
  if (worst_out) *worst_out = std::max(*worst_out, r.out_error);
}

TEST(StateUpdate, Mamba1MatchesOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  int n = 0;
  double worst[2] = {0.0, 0.0};
  for (int64_t N : {16, 5, 37}) {
    for (auto [gb, gc] : std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {1, 1}, {3, 2}, {0, 6}}) {
      for (int options = 0; options < 16; ++options) {
        for (DType dtype : {DType::kF32, DType::kBF16}) {
          StateCase c;
          c.B = 3;
          c.H = 24;
          c.N = N;
          c.b_groups = gb;
          c.c_groups = gc;
          c.dtype = c.bc_dtype = dtype;
          c.skip = options & 1;
          c.z = options & 2;
          c.dt_bias = options & 4;
          c.softplus = options & 8;
          c.pad = options % 3;
          ExpectStep(c, seed + n++, &worst[dtype == DType::kBF16]);
        }
      }
    }
  }
  std::printf("mamba1 step worst out error: f32 %.3g, bf16 %.3g\n", worst[0], worst[1]);
}

TEST(StateUpdate, Mamba2MatchesOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  int n = 0;
  double worst[2] = {0.0, 0.0};
  for (auto [P, N] :
       std::vector<std::pair<int64_t, int64_t>>{{8, 16}, {13, 7}, {4, 128}, {1, 33}}) {
    for (auto [gb, gc] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 3}, {6, 6}}) {
      for (int options = 0; options < 16; ++options) {
        for (DType dtype : {DType::kF32, DType::kBF16}) {
          StateCase c;
          c.mamba2 = true;
          c.B = 2;
          c.H = 6;
          c.P = P;
          c.N = N;
          c.b_groups = gb;
          c.c_groups = gc;
          c.dtype = c.bc_dtype = dtype;
          c.skip = options % 3;
          c.z = options & 2;
          c.dt_bias = options & 4;
          c.softplus = options & 8;
          c.pad = options % 2 ? 0 : 3;
          ExpectStep(c, seed + n++, &worst[dtype == DType::kBF16]);
        }
      }
    }
  }
  std::printf("mamba2 step worst out error: f32 %.3g, bf16 %.3g\n", worst[0], worst[1]);
}

TEST(StateUpdate, MixedDtypes) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  int n = 0;
  for (bool mamba2 : {false, true}) {
    for (auto [io, bc] : std::vector<std::pair<DType, DType>>{{DType::kF32, DType::kBF16},
                                                              {DType::kBF16, DType::kF32}}) {
      StateCase c;
      c.mamba2 = mamba2;
      c.P = mamba2 ? 16 : 1;
      c.dtype = io;
      c.bc_dtype = bc;
      c.skip = 1;
      c.z = c.dt_bias = c.softplus = true;
      ExpectStep(c, seed + n++);
    }
  }
}

TEST(StateUpdate, StateBatchIndicesWithSkippedRows) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  int n = 0;
  for (bool mamba2 : {false, true}) {
    for (int64_t B : {1, 2, 7}) {
      for (bool alias : {false, true}) {
        StateCase c;
        c.mamba2 = mamba2;
        c.B = B;
        c.H = mamba2 ? 4 : 20;
        c.P = mamba2 ? 8 : 1;
        c.N = mamba2 ? 32 : 16;
        c.b_groups = c.c_groups = 2;
        c.skip = 1;
        c.z = c.dt_bias = c.softplus = true;
        c.indices = true;
        c.alias = alias;
        c.pad = alias ? 0 : 2;
        ExpectStep(c, seed + n++);
      }
    }
  }
}

TEST(StateUpdate, OutAliasesX) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  int n = 0;
  for (bool mamba2 : {false, true}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      StateCase c;
      c.mamba2 = mamba2;
      c.P = mamba2 ? 16 : 1;
      c.dtype = c.bc_dtype = dtype;
      c.skip = 1;
      c.z = true;
      c.alias = true;
      ExpectStep(c, seed + n++);
    }
  }
}

// The decode shapes of the models: threaded, and (H * P > the segment size) several segments
// per block.
TEST(StateUpdate, ModelShapes) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  SetNumThreads(2);
  int n = 0;
  struct Shape {
    bool mamba2;
    int64_t B, H, P, N;
  };
  // mamba-130m (D = 1536, N = 16); a wide Mamba-1 (D = 5120); mamba2-130m (H = 24, P = 64,
  // N = 128); mamba2-2.7b (H = 80); a batch of 3.
  for (const Shape& s :
       {Shape{false, 1, 1536, 1, 16}, Shape{false, 2, 5120, 1, 16}, Shape{true, 1, 24, 64, 128},
        Shape{true, 1, 80, 64, 128}, Shape{true, 3, 24, 64, 128}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      StateCase c;
      c.mamba2 = s.mamba2;
      c.B = s.B;
      c.H = s.H;
      c.P = s.P;
      c.N = s.N;
      c.dtype = c.bc_dtype = dtype;
      c.skip = 1;
      c.z = c.dt_bias = c.softplus = true;
      c.indices = s.B == 3;
      ExpectStep(c, seed + n++);
    }
  }
  SetNumThreads(0);
}

TEST(StateUpdateTargets, EveryCompiledTargetMatchesTheOracle) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  int n = 0;
  const int targets_run = ForEachSimdTarget([&] {
    for (bool mamba2 : {false, true}) {
      for (int64_t N : {16, 11, 40}) {
        for (DType dtype : {DType::kF32, DType::kBF16}) {
          StateCase c;
          c.mamba2 = mamba2;
          c.H = 12;
          c.P = mamba2 ? 5 : 1;
          c.N = N;
          c.b_groups = 3;
          c.dtype = c.bc_dtype = dtype;
          c.skip = 1;
          c.z = c.dt_bias = c.softplus = true;
          c.indices = N == 11;
          ExpectStep(c, seed + n++);
        }
      }
    }
  });
  EXPECT_GE(targets_run, 2) << "the portable target at least, and one SIMD target";
}

// The same step on 1 and 2 threads, twice each: the same bits (no value is reduced across
// the split, so the thread count cannot matter).
TEST(StateUpdateDeterminism, SameBitsAcrossRunsAndThreadCounts) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (bool mamba2 : {false, true}) {
    StateCase c;
    c.mamba2 = mamba2;
    c.B = 2;
    c.H = mamba2 ? 24 : 3000;
    c.P = mamba2 ? 64 : 1;
    c.N = mamba2 ? 64 : 16;
    c.skip = 1;
    c.z = c.dt_bias = c.softplus = true;
    std::vector<uint8_t> first;
    for (int threads : {2, 2, 1, 1}) {
      SetNumThreads(threads);
      Rng rng(seed);
      StateProblem prob(c, rng);
      PaddedTensor out(c.XShape(), 0, c.dtype);
      ASSERT_TRUE(SelectiveStateUpdate(prob.Inputs(), prob.state.view(), out.view()).ok());
      std::vector<uint8_t> bits = out.bytes();
      bits.insert(bits.end(), prob.state.bytes().begin(), prob.state.bytes().end());
      if (first.empty()) first = bits;
      EXPECT_TRUE(bits == first) << c.Name() << ", threads " << threads;
    }
  }
  SetNumThreads(0);
}

}  // namespace
}  // namespace ssmkit::testing
