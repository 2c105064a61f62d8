// int64 indexing for the SSD: B*L*H*P*N = 2 * 2^16 * 3 * 64 * 128 ~ 3.2e9 > 2^31 state
// elements, with the second batch of every batched tensor placed more than 2^31 elements past
// the first (batch strides of 2^31 + 2^20), so any offset computed in 32 bits lands elsewhere.
// The buffers are sparse anonymous mappings (sparse_floats.hpp): ~60 GB of address space,
// ~0.5 GB of touched memory. Both algorithms run; the fp64 oracle checks the first and last
// head of each batch row over the whole sequence, sliced out as one-head problems (heads are
// independent given their group's B and C). Labelled `large` (the file name): excluded from
// the sanitizer preset.
#include <cmath>
#include <string>
#include <vector>

#include "ref/ssd_ref.hpp"
#include "sparse_floats.hpp"
#include "ssmkit/ssd.hpp"
#include "ssmkit/threads.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

constexpr int64_t kBatch = 2, kLen = int64_t{1} << 16, kHeads = 3, kHeadDim = 64, kState = 128;
constexpr int64_t kFarBatchStride = (int64_t{1} << 31) + (int64_t{1} << 20);  // elements

// A (B, d1, ..., dk) f32 view of `data` whose batch stride is kFarBatchStride.
Tensor FarBatchView(float* data, std::initializer_list<int64_t> inner) {
  Tensor t;
  t.data = data;
  t.rank = static_cast<int>(inner.size()) + 1;
  t.shape[0] = kBatch;
  int i = 1;
  for (int64_t d : inner) t.shape[i++] = d;
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 1; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  t.strides[0] = kFarBatchStride;
  return t;
}

// A batch row's `count` elements, filled by `draw`.
template <class Draw>
void FillRows(const SparseFloats& buf, int64_t count, Draw&& draw) {
  for (int64_t b = 0; b < kBatch; ++b) {
    float* row = buf.data() + b * kFarBatchStride;
    for (int64_t i = 0; i < count; ++i) row[i] = static_cast<float>(draw());
  }
}

TEST(SsdLarge, StateElementsAndOffsetsPast2To31) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  ASSERT_GT(kBatch * kLen * kHeads * kHeadDim * kState, int64_t{1} << 31);
  const int64_t x_count = kLen * kHeads * kHeadDim, dt_count = kLen * kHeads,
                bc_count = kLen * kState, state_count = kHeads * kHeadDim * kState;
  SparseFloats x(kFarBatchStride + x_count), dt(kFarBatchStride + dt_count),
      Bm(kFarBatchStride + bc_count), Cm(kFarBatchStride + bc_count),
      out(kFarBatchStride + x_count), h0(kFarBatchStride + state_count),
      final_states(kFarBatchStride + state_count);
  for (const SparseFloats* b : {&x, &dt, &Bm, &Cm, &out, &h0, &final_states}) {
    ASSERT_NE(b->data(), nullptr) << "could not reserve address space";
  }
  // x, B, C, h0 ~ N(0, 1); dt = softplus(dt_in + bias) in ~[1e-3, 0.1]; A in [-16, -1].
  Rng rng(seed);
  FillRows(x, x_count, [&] { return rng.Normal(); });
  FillRows(dt, dt_count, [&] { return rng.Uniform(-7.0, -2.3); });
  FillRows(Bm, bc_count, [&] { return rng.Normal(); });
  FillRows(Cm, bc_count, [&] { return rng.Normal(); });
  FillRows(h0, state_count, [&] { return rng.Normal(); });
  std::vector<float> A(kHeads), D(kHeads), bias(kHeads);
  for (int64_t h = 0; h < kHeads; ++h) {
    A[h] = static_cast<float>(-std::exp(rng.Uniform(0.0, std::log(16.0))));
    D[h] = static_cast<float>(rng.Normal());
    bias[h] = static_cast<float>(rng.Uniform(-0.2, 0.2));
  }

  SsdInputs in;
  in.x = FarBatchView(x.data(), {kLen, kHeads, kHeadDim});
  in.dt = FarBatchView(dt.data(), {kLen, kHeads});
  in.A = Tensor::Contiguous(A.data(), DType::kF32, {kHeads});
  in.B = FarBatchView(Bm.data(), {kLen, 1, kState});
  in.C = FarBatchView(Cm.data(), {kLen, 1, kState});
  in.D = Tensor::Contiguous(D.data(), DType::kF32, {kHeads});
  in.dt_bias = Tensor::Contiguous(bias.data(), DType::kF32, {kHeads});
  in.initial_states = FarBatchView(h0.data(), {kHeads, kHeadDim, kState});
  in.dt_softplus = true;
  const ScopedThreads threads(2);

  // The oracle's out and final state of head h of batch row b, from that head's slices.
  auto oracle = [&](int64_t b, int64_t h, std::vector<double>* ref_out,
                    std::vector<double>* ref_state) {
    const float* xb = x.data() + b * kFarBatchStride;
    const float* dtb = dt.data() + b * kFarBatchStride;
    std::vector<double> x_d(kLen * kHeadDim), dt_d(kLen);
    for (int64_t l = 0; l < kLen; ++l) {
      dt_d[l] = dtb[l * kHeads + h];
      for (int64_t p = 0; p < kHeadDim; ++p)
        x_d[l * kHeadDim + p] = xb[(l * kHeads + h) * kHeadDim + p];
    }
    const float* Bb = Bm.data() + b * kFarBatchStride;
    const float* Cb = Cm.data() + b * kFarBatchStride;
    const float* hb = h0.data() + b * kFarBatchStride + h * kHeadDim * kState;
    const std::vector<double> B_d(Bb, Bb + bc_count), C_d(Cb, Cb + bc_count),
        h0_d(hb, hb + kHeadDim * kState);
    const double A_d = A[h], D_d = D[h], bias_d = bias[h];
    ref::SsdShape shape;
    shape.seqlen = kLen;
    shape.headdim = kHeadDim;
    shape.dstate = kState;
    shape.dt_softplus = true;
    ref::SsdInputs r;
    r.x = x_d.data();
    r.dt = dt_d.data();
    r.A = &A_d;
    r.B = B_d.data();
    r.C = C_d.data();
    r.D = &D_d;
    r.dt_bias = &bias_d;
    r.h0 = h0_d.data();
    ref_out->assign(kLen * kHeadDim, 0.0);
    ref_state->assign(kHeadDim * kState, 0.0);
    ref::SsdForward(shape, r, ref_out->data(), ref_state->data());
  };
  struct Slice {
    int64_t b, h;
    std::vector<double> out, state;
  };
  std::vector<Slice> slices;
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t h : {int64_t{0}, kHeads - 1}) {
      Slice s{b, h, {}, {}};
      oracle(b, h, &s.out, &s.state);
      slices.push_back(std::move(s));
    }
  }

  for (SsdAlgorithm algorithm : {SsdAlgorithm::kSequential, SsdAlgorithm::kChunked}) {
    SCOPED_TRACE(SsdAlgorithmName(algorithm));
    FillRows(out, x_count, [] { return std::nan(""); });
    FillRows(final_states, state_count, [] { return std::nan(""); });
    SsdOptions options;
    options.algorithm = algorithm;
    const Status status =
        SsdForward(in, FarBatchView(out.data(), {kLen, kHeads, kHeadDim}),
                   FarBatchView(final_states.data(), {kHeads, kHeadDim, kState}), options);
    ASSERT_TRUE(status.ok()) << status.message();
    for (const Slice& s : slices) {
      SCOPED_TRACE("b=" + std::to_string(s.b) + " h=" + std::to_string(s.h));
      const float* ob = out.data() + s.b * kFarBatchStride;
      std::vector<double> got_out(kLen * kHeadDim);
      for (int64_t l = 0; l < kLen; ++l) {
        for (int64_t p = 0; p < kHeadDim; ++p)
          got_out[l * kHeadDim + p] = ob[(l * kHeads + s.h) * kHeadDim + p];
      }
      const float* fb = final_states.data() + s.b * kFarBatchStride + s.h * kHeadDim * kState;
      const std::vector<double> got_state(fb, fb + kHeadDim * kState);
      EXPECT_LE(RelativeError(got_out, s.out), 1e-5);
      EXPECT_LE(RelativeError(got_state, s.state), 1e-5);
    }
    // Every other element was written too (NaN before the call): spot-check each row's ends.
    for (int64_t b = 0; b < kBatch; ++b) {
      const float* ob = out.data() + b * kFarBatchStride;
      EXPECT_TRUE(std::isfinite(ob[0]) && std::isfinite(ob[x_count - 1])) << "batch row " << b;
      const float* fb = final_states.data() + b * kFarBatchStride;
      EXPECT_TRUE(std::isfinite(fb[0]) && std::isfinite(fb[state_count - 1])) << "batch row " << b;
    }
  }
}

}  // namespace
}  // namespace ssmkit::testing
