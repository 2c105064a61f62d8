// linear (include/ssmkit/linear.hpp), LinearForward and LinearBackward, in the op harness: f32,
// bf16 and f16 weights forward (f32 alone backward), the few-rows kernel (T <= 8) and the sgemm
// path, bias on and off, x, out, dout and dx row-major or feature-major, row strides wider than
// the row, K not a multiple of the vector width, shapes that split over threads, each gradient
// alone, and every argument rule of src/ops/linear.cpp. CPU only: on the GPU LinearForward is
// cuBLAS with x in the weight's dtype, another contract (tests/device_dispatch_test.cpp).
// tests/linear_test.cpp and linear_grad_test.cpp keep what a table cannot say: bits across runs,
// batches and concurrent callers, the oracle against finite differences, a call with no
// gradient requested; tests/linear_errors_test.cpp a valid quantized call.
#include <algorithm>
#include <cmath>
#include <utility>

#include "harness/op_spec.hpp"
#include "ref/linear_ref.hpp"
#include "ssmkit/linear.hpp"

namespace ssmkit::testing::harness {
namespace {

struct Lin {
  int64_t T = 3, K = 5, M = 4;
  DType wdtype = DType::kF32;
  bool bias = true;
  // Feature-major: the transpose of a (cols, rows) buffer, strides (1, ld).
  bool x_fm = false, out_fm = false, dout_fm = false, dx_fm = false;
  int64_t pad = 0;     // extra elements per stored row of x, out, dout (and dx)
  bool grads = false;  // a backward case's: the gradients' tolerances are computed
  std::string Name() const {
    return "T=" + std::to_string(T) + " K=" + std::to_string(K) + " M=" + std::to_string(M) +
           " w=" + DTypeName(wdtype) + (bias ? " bias" : "") + (x_fm ? " x^T" : "") +
           (out_fm ? " out^T" : "") + (dout_fm ? " dout^T" : "") + (dx_fm ? " dx^T" : "") +
           " pad=" + std::to_string(pad);
  }
};

// The stored shape of a (rows, cols) matrix.
std::vector<int64_t> StoredShape(int64_t rows, int64_t cols, bool fm) {
  return fm ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{rows, cols};
}

// A (rows, cols) matrix's values from (or to) its stored order.
std::vector<double> Transposed(const double* v, int64_t rows, int64_t cols) {
  std::vector<double> t(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = v[i * cols + j];
  }
  return t;
}
std::vector<double> RowMajor(const double* v, int64_t rows, int64_t cols, bool fm) {
  return fm ? Transposed(v, cols, rows) : std::vector<double>(v, v + rows * cols);
}
void Store(const std::vector<double>& row_major, int64_t rows, int64_t cols, bool fm, double* to) {
  const std::vector<double> stored = fm ? Transposed(row_major.data(), rows, cols) : row_major;
  std::copy(stored.begin(), stored.end(), to);
}

// The (rows, cols) view of a stored tensor: a feature-major one is its transpose.
Tensor View(Tensor t, bool fm) {
  if (fm) {
    std::swap(t.shape[0], t.shape[1]);
    std::swap(t.strides[0], t.strides[1]);
  }
  return t;
}

std::vector<double> Abs(std::vector<double> v) {
  for (double& e : v) e = std::fabs(e);
  return v;
}

// An f32 sum's rounding scales with the sum of its terms' magnitudes, and a short one can
// cancel to a tiny result (dbias with M = 1): 1e-5 times ||sums of |terms||| / ||result||.
double Conditioned(const std::vector<double>& result, const std::vector<double>& magnitudes) {
  return 1e-5 * std::max(1.0, Norm(magnitudes) / Norm(result));
}

void Make(const Lin& p, Problem& prob) {
  Arg& x = prob.Input("x", StoredShape(p.T, p.K, p.x_fm), DType::kF32, p.pad).Normal();
  Arg& w = prob.Input("weight", {p.M, p.K}, p.wdtype).Normal(0.1);
  Arg* bias = p.bias ? &prob.Input("bias", {p.M}, DType::kF32).Normal() : nullptr;
  // dout declared here rather than by the harness, for its layout and the gradients'
  // tolerances below (so the harness's finite differences, which need its upstream, are
  // tests/linear_grad_test.cpp's).
  Arg& dout =
      prob.Input("dout", StoredShape(p.T, p.M, p.dout_fm), DType::kF32, p.pad).Normal().NoGrad();
  Arg& out = prob.Output("out", StoredShape(p.T, p.M, p.out_fm), DType::kF32, p.pad).NoUpstream();

  const std::vector<double> xv = RowMajor(x.Stored().data(), p.T, p.K, p.x_fm);
  const std::vector<double> wv = w.Stored();
  const std::vector<double> bv = bias ? bias->Stored() : std::vector<double>{};
  const std::vector<double> xa = Abs(xv), wa = Abs(wv), ba = Abs(bv);
  std::vector<double> y(p.T * p.M), ya(p.T * p.M);
  ref::Linear(p.T, p.K, p.M, xv.data(), wv.data(), bias ? bv.data() : nullptr, y.data());
  ref::Linear(p.T, p.K, p.M, xa.data(), wa.data(), bias ? ba.data() : nullptr, ya.data());
  out.Tol(Conditioned(y, ya));
  if (!p.grads) return;

  const std::vector<double> dv = RowMajor(dout.Stored().data(), p.T, p.M, p.dout_fm);
  const std::vector<double> da = Abs(dv);
  std::vector<double> dx(p.T * p.K), dw(p.M * p.K), db(p.M), mx(dx.size()), mw(dw.size()),
      mb(db.size());
  ref::LinearBackward(p.T, p.K, p.M, xv.data(), wv.data(), dv.data(), dx.data(), dw.data(),
                      db.data());
  ref::LinearBackward(p.T, p.K, p.M, xa.data(), wa.data(), da.data(), mx.data(), mw.data(),
                      mb.data());
  x.GradTol(Conditioned(dx, mx));
  w.GradTol(Conditioned(dw, mw));
  if (bias) bias->GradTol(Conditioned(db, mb));
}

void OracleForward(const Lin& p, Values& v) {
  const std::vector<double> x = RowMajor(v["x"], p.T, p.K, p.x_fm);
  std::vector<double> out(p.T * p.M);
  ref::Linear(p.T, p.K, p.M, x.data(), v["weight"], v["bias"], out.data());
  Store(out, p.T, p.M, p.out_fm, v["out"]);
}

void OracleBackward(const Lin& p, Values& v) {
  const std::vector<double> x = RowMajor(v["x"], p.T, p.K, p.x_fm);
  const std::vector<double> dout = RowMajor(v["dout"], p.T, p.M, p.dout_fm);
  std::vector<double> dx(p.T * p.K), dbias(p.M);
  ref::LinearBackward(p.T, p.K, p.M, x.data(), v["weight"], dout.data(), dx.data(), v["dweight"],
                      dbias.data());
  Store(dx, p.T, p.K, p.x_fm, v["dx"]);
  if (p.bias) std::copy(dbias.begin(), dbias.end(), v["dbias"]);
}

Status Forward(const Lin& p, Bound& b) {
  return LinearForward({View(b["x"], p.x_fm), b["weight"], b["bias"]}, View(b["out"], p.out_fm));
}

// The harness gives dx x's layout; with dx_fm != x_fm the op writes a poisoned spare of the
// other layout, copied into dx after the call (so dx's checks read the op's values). A host
// spare: linear's cases run on the CPU alone.
Status Backward(const Lin& p, Bound& b) {
  const Tensor dx = b["dx"];
  const bool other = dx.defined() && p.dx_fm != p.x_fm;
  Tensor spare;
  if (other) {
    spare = b.Spare(StoredShape(p.T, p.K, p.dx_fm), DType::kF32);
    std::fill_n(static_cast<float*>(spare.data), p.T * p.K, NAN);
  }
  const Status s =
      LinearBackward({View(b["x"], p.x_fm), b["weight"], b["bias"]}, View(b["dout"], p.dout_fm),
                     {other ? View(spare, p.dx_fm) : View(dx, p.x_fm), b["dweight"], b["dbias"]});
  if (other) {
    const Tensor from = View(spare, p.dx_fm), to = View(dx, p.x_fm);
    for (int64_t t = 0; t < p.T; ++t) {
      for (int64_t k = 0; k < p.K; ++k) {
        static_cast<float*>(to.data)[t * to.strides[0] + k * to.strides[1]] =
            static_cast<const float*>(from.data)[t * from.strides[0] + k * from.strides[1]];
      }
    }
  }
  return s;
}

// The configurations of a backward case.
std::vector<Lin> WithGrads(std::vector<Lin> configs) {
  for (Lin& c : configs) c.grads = true;
  return configs;
}

std::vector<Case<Lin>> Cases() {
  std::vector<Lin> shapes, layouts, threaded, targets, grad_shapes, grad_layouts, grad_threaded;
  for (DType wd : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t T : {1, 2, 3, 4, 5, 7, 8, 9, 13, 20, 64, 65}) {
      for (int64_t K : {1, 7, 16, 48, 77}) {
        for (int64_t M : {1, 5, 17}) shapes.push_back({T, K, M, wd, (T + K + M) % 2 == 0});
      }
    }
    // Large enough (M * K >= 2^15) to split over threads, and panels for 16-bit weights.
    for (int64_t T : {1, 2, 8, 9, 40, 64}) {
      threaded.push_back({T, 768, 301, wd, T % 2 == 1});
      threaded.push_back({T, 48, 1536, wd, true});
      // Few inputs (the outer-product kernel at T >= 2): blocks of weight rows and a last
      // partial one, over threads.
      threaded.push_back({T, 29, 2100, wd, T % 2 == 0});
    }
    for (int64_t T : {1, 2, 4, 6, 8, 9, 17, 33})
      targets.push_back({.T = T, .K = 67, .M = 21, .wdtype = wd, .pad = 2});
  }
  // The sgemm path in feature-major layouts, two widened panels (kPanelFloats) per thread.
  threaded.push_back({.T = 65,
                      .K = 1500,
                      .M = 1600,
                      .wdtype = DType::kBF16,
                      .bias = false,
                      .x_fm = true,
                      .out_fm = true});
  // A few feature-major rows: copied to rows for the few-rows kernel.
  threaded.push_back({.T = 3,
                      .K = 1500,
                      .M = 400,
                      .wdtype = DType::kBF16,
                      .bias = false,
                      .x_fm = true,
                      .out_fm = true});
  // A feature-major out stored by the outer-product kernel: whole blocks and a partial one.
  threaded.push_back(
      {.T = 40, .K = 29, .M = 2100, .wdtype = DType::kF32, .bias = true, .out_fm = true});
  // One row, K = 11 unrolled blocks of 8 vectors + 5 vectors + a tail (AVX-512).
  threaded.push_back({1, 1500, 400, DType::kBF16, true});
  threaded.push_back({1, 1500, 400, DType::kF32, true});
  for (DType wd : {DType::kF32, DType::kBF16}) {
    for (int64_t T : {1, 3, 8, 33}) {
      for (bool xfm : {false, true}) {
        for (bool ofm : {false, true}) {
          // K = 40: the tiles; K = 20: the outer-product kernel (each storing a feature-major
          // out directly).
          for (int64_t pad : {0, 3}) {
            for (int64_t K : {40, 20})
              layouts.push_back(
                  {.T = T, .K = K, .M = 24, .wdtype = wd, .x_fm = xfm, .out_fm = ofm, .pad = pad});
          }
        }
      }
    }
  }
  for (int64_t T : {1, 2, 9, 33}) {
    for (int64_t K : {1, 7, 48}) {
      for (int64_t M : {1, 5, 17}) grad_shapes.push_back({T, K, M, DType::kF32, (T + K) % 2 == 0});
    }
  }
  for (int64_t T : {1, 3, 40}) {
    for (int layout = 0; layout < 8; ++layout) {
      grad_layouts.push_back({.T = T,
                              .K = 24,
                              .M = 13,
                              .x_fm = (layout & 1) != 0,
                              .dout_fm = (layout & 2) != 0,
                              .dx_fm = (layout & 4) != 0});
    }
  }
  // The `policy` network's projections (d_model 256, D 512): in_proj on one window of 60
  // frames, out_proj with y stored (D, L); many rows in both layouts.
  grad_threaded = {
      {.T = 60, .K = 256, .M = 1024, .bias = false},
      {.T = 60, .K = 512, .M = 256, .bias = false, .dout_fm = true},
      {.T = 300, .K = 40, .M = 33, .x_fm = true, .dx_fm = true},
  };
  const Checks fwd = {.backward = false};
  return {
      {"shapes", shapes, fwd},
      {"layouts", layouts, fwd},
      {"threaded_shapes", threaded, fwd},
      {"targets", targets, fwd},
      {"grad_shapes", WithGrads(grad_shapes)},
      {"grad_layouts", WithGrads(grad_layouts)},
      {"grads_alone", WithGrads({{12, 10, 6}}), {.grads_alone = true}},
      {"grad_threaded_1", WithGrads(grad_threaded), {.threads = 1}},
      {"grad_threaded_3", WithGrads(grad_threaded), {.threads = 3}},
  };
}

using Bad = BadInput<Lin>;
constexpr Call kFwd = Call::kForward, kBwd = Call::kBackward;

// Every tensor of the forward on the device.
void AllOnCuda(Bound& b) {
  for (const char* name : {"x", "weight", "bias", "out"}) b[name].device = Device::kCuda;
}

// A quantized (M, K) = (4, 5) weight in place of the valid one.
void QuantizedWeight(Bound& b, DType dtype) {
  const Tensor bytes = b.Spare({4 * DTypeBlockBytes(dtype)}, DType::kF32);
  b["weight"] = Tensor::Contiguous(bytes.data, dtype, {4, 5});
}

// The valid configuration: T = 3, K = 5, M = 4, an f32 weight (the backward's), a bias.
std::vector<Bad> BadInputs() {
  return {
      {"NullWeight",
       kFwd,
       [](Lin&, Bound& b) { b["weight"] = Tensor{}; },
       {"linear: weight", "null"}},
      {"WeightRank",
       kFwd,
       [](Lin&, Bound& b) {
         b["weight"].rank = 3;
         b["weight"].shape[2] = 1;
         b["weight"].strides[2] = 1;
       },
       {"linear: weight", "rank 2", "given rank 3"}},
      {"WeightDtype",
       kFwd,
       [](Lin&, Bound& b) { b["weight"].dtype = DType::kI32; },
       {"linear: weight", "dtype f32 or bf16 or f16", "i32"}},
      {"QuantizedWeightKNotAWholeBlock",
       kFwd,
       [](Lin&, Bound& b) { QuantizedWeight(b, DType::kQ4_K); },
       {"linear: weight", "K a multiple of q4_k's block of 256 elements", "K = 5"}},
      {"WeightNotContiguous",
       kFwd,
       [](Lin&, Bound& b) {
         b["weight"].shape[1] = 2;  // a column slice: row stride 5, width 2
         b["x"].shape[1] = 2;
       },
       {"linear: weight", "contiguous"}},
      {"EmptyWeight",
       kFwd,
       [](Lin&, Bound& b) { b["weight"].shape[0] = 0; },
       {"linear: weight", "M >= 1"}},
      {"NullX", kFwd, [](Lin&, Bound& b) { b["x"] = Tensor{}; }, {"linear: x", "null"}},
      {"XFeatures",
       kFwd,
       [](Lin&, Bound& b) { b["x"].shape[1] = 4; },
       {"linear: x", "(T, K) = (3, 5)", "(3, 4)"}},
      {"XDtype",
       kFwd,
       [](Lin&, Bound& b) { b["x"].dtype = DType::kBF16; },
       {"linear: x", "dtype f32", "bf16"}},
      {"XStrides",
       kFwd,
       [](Lin&, Bound& b) {
         b["x"].strides = {2, 2};
       },
       {"linear: x", "strides", "(2, 2)"}},
      {"XOnCuda",
       kFwd,
       [](Lin&, Bound& b) { b["x"].device = Device::kCuda; },
       {"linear: x", "CPU"}},
      // cuBLAS multiplies x in the weight's 16-bit dtype (the CPU's f32 x is an error there; a
      // valid CUDA call is tests/device_dispatch_test.cpp's).
      {"OnCudaXIsInTheWeightsDtype",
       kFwd,
       [](Lin&, Bound& b) {
         AllOnCuda(b);
         b["weight"].dtype = DType::kBF16;
       },
       {"linear: x", "dtype bf16", "f32"}},
      // An f32 (or quantized) weight on the device: a valid request the GPU does not serve.
      {"OnCudaAnF32WeightIsUnsupported",
       kFwd,
       [](Lin&, Bound& b) { AllOnCuda(b); },
       {"linear: weight", "on CUDA expected bf16 or f16", "given f32", "CPU only"},
       StatusCode::kUnsupported},
      {"OnCudaOutIsF32OrTheWeightsDtype",
       kFwd,
       [](Lin&, Bound& b) {
         AllOnCuda(b);
         b["weight"].dtype = DType::kBF16;
         b["x"].dtype = DType::kBF16;
         b["out"].dtype = DType::kF16;
       },
       {"linear: out", "f32", "bf16", "f16"}},
      {"BiasShape",
       kFwd,
       [](Lin&, Bound& b) { b["bias"].shape[0] = 5; },
       {"linear: bias", "(M) = (4,)", "(5,)"}},
      {"BiasDtype",
       kFwd,
       [](Lin&, Bound& b) { b["bias"].dtype = DType::kBF16; },
       {"linear: bias", "dtype f32"}},
      {"NullOut", kFwd, [](Lin&, Bound& b) { b["out"] = Tensor{}; }, {"linear: out", "null"}},
      {"OutShape",
       kFwd,
       [](Lin&, Bound& b) { b["out"].shape[1] = 3; },
       {"linear: out", "(T, M) = (3, 4)", "(3, 3)"}},
      {"OutOverlapsX",
       kFwd,
       [](Lin&, Bound& b) {
         b["x"] = b["out"];  // out's (3, 4) buffer read as x (3, 3) with row stride 4
         b["x"].shape[1] = 3;
         b["weight"].shape[1] = 3;  // shapes consistent: only the overlap is wrong
         b["weight"].strides[0] = 3;
       },
       {"linear: out", "overlapping"}},
      // LinearBackward's own rules: an f32 weight, dout, the gradients' shapes, dbias only with
      // a bias, no gradient overlapping an input or another gradient.
      {"BackwardWeightMustBeF32",
       kBwd,
       [](Lin&, Bound& b) { b["weight"].dtype = DType::kBF16; },
       {"linear: weight", "dtype f32", "bf16"}},
      {"BackwardQuantizedWeight",
       kBwd,
       [](Lin&, Bound& b) { QuantizedWeight(b, DType::kQ4_0); },
       {"linear: weight", "dtype f32 (no gradient of a quantized weight", "given q4_0"}},
      {"NullDout", kBwd, [](Lin&, Bound& b) { b["dout"] = Tensor{}; }, {"linear: dout", "null"}},
      {"DoutShape",
       kBwd,
       [](Lin&, Bound& b) { b["dout"].shape[1] = 5; },
       {"linear: dout", "(T, M) = (3, 4)", "(3, 5)"}},
      {"DxShape",
       kBwd,
       [](Lin&, Bound& b) { b["dx"].shape[0] = 4; },
       {"linear: dx", "(T, K) = (3, 5)", "(4, 5)"}},
      {"DweightDtype",
       kBwd,
       [](Lin&, Bound& b) { b["dweight"].dtype = DType::kBF16; },
       {"linear: dweight", "dtype f32", "bf16"}},
      {"DbiasWithoutBias",
       kBwd,
       [](Lin&, Bound& b) { b["bias"] = Tensor{}; },
       {"linear: dbias", "since bias is absent"}},
      {"DxOverlapsDout",
       kBwd,
       [](Lin&, Bound& b) {
         b["dx"] = b["dout"];  // dout's (3, 4) buffer as dx (3, 4): K = 4 here
         b["x"].shape[1] = 4;
         b["weight"].shape[1] = 4;
         b["weight"].strides[0] = 4;
         b["dweight"].shape[1] = 4;
         b["dweight"].strides[0] = 4;
       },
       {"linear: dx", "overlapping dout"}},
      {"DweightOverlapsDx",
       kBwd,
       [](Lin&, Bound& b) {
         b["dweight"] = b["dx"];  // dx's (3, 5) buffer as dweight: M = T = 3 here
         b["dweight"].shape[0] = 3;
         b["weight"].shape[0] = 3;
         b["dout"].shape[1] = 3;
         b["dout"].strides[0] = 3;
         b["bias"] = Tensor{};
         b["dbias"] = Tensor{};
       },
       {"linear: dweight", "overlapping dx"}},
  };
}

OpSpec<Lin> LinearSpec() {
  return {.name = "linear",
          .make = Make,
          .oracle_forward = OracleForward,
          .oracle_backward = OracleBackward,
          .forward = Forward,
          .backward = Backward,
          .cases = Cases(),
          .valid = Lin{},
          .bad_inputs = BadInputs(),
          .cuda = false};
}

}  // namespace

SSMKIT_HARNESS_OP(LinearSpec);

}  // namespace ssmkit::testing::harness
