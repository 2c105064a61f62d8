// Mamba1MixerForward (include/ssmkit/mamba1_mixer.hpp): argument checks, then the mixer's steps
// with the channels in groups, each group kept on one thread from in_proj through the scan.
// Dimension legend as there; T = B L rows, G channel groups, Dg channels in a group.
//
// Activations are channel-major, (features, T), so that a group's channels are whole rows and
// (1, T) strides make the products' feature-major x and out, the conv's and the scan's
// (B, Dg, L) views: xz (2D, T), xc (D, T), delta (D, T), y (D, T), xdbl (E, T).
//
//   region 1, per group (channels [c0, c1)):  xz rows [c0, c1) and [D + c0, D + c1) = those
//       rows of in_proj times x; xc[c0:c1] = conv; x_proj per group: P[g] = x_proj[:, c0:c1]
//       xc[c0:c1]
//   x_proj whole (xdbl = x_proj xc) otherwise
//   region 2, per group: x_proj per group: the group's own xdbl = P[0] + P[1] + ... (in group
//       order; E T adds, next to the group's scan of Dg N T steps); delta[c0:c1] =
//       dt_proj[c0:c1] dt_in, y[c0:c1] = scan; out_proj per group: Q[g] = y[c0:c1]^T
//       out_proj[:, c0:c1]^T (T, d)
//   out = Q[0] + Q[1] + ... over rows of out, or out_proj whole
//
// x_proj and out_proj go per group (Mixer's constructor says when) only on AMX's tiles: the
// group products over a column range of W read it at its own row stride
// (LinearParams::weight_row_stride), which only that kernel takes. A block's ops run on its
// thread (an op called inside a parallel region runs there), so the rows of xz, xc, delta and y
// a group writes stay in its core's cache until it reads them.
#include "ssmkit/mamba1_mixer.hpp"

#include <algorithm>
#include <mutex>
#include <new>
#include <string>

#include "core/cache_line_vector.hpp"
#include "core/dtype.hpp"
#include "core/parallel.hpp"
#include "cpu/linear.hpp"
#include "cpu/linear_bf16.hpp"
#include "ops/check.hpp"
#include "ops/tensor_span.hpp"
#include "params/linear_params.hpp"
#include "ssmkit/conv1d.hpp"
#include "ssmkit/op_tensors.hpp"
#include "ssmkit/selective_scan.hpp"

namespace ssmkit {
namespace {

constexpr const char* kOp = "mamba1_mixer";
// Past this many floats (1 TB) the workspace is not even asked for.
constexpr double kMaxWorkspaceFloats = 0x1p38;

struct Dims {
  int64_t B, L, T, d, D, N, R, E, K, G;
  int64_t x_ld, out_ld;  // row strides of x and out viewed as (T, d)
};

// A (B, L, d) tensor's row stride as T = B L rows evenly spaced, or an error.
Status RowStride(const char* name, const Tensor& t, const Dims& s, int64_t* ld) {
  const int64_t sb = t.strides[0], sl = t.strides[1];
  if (s.B == 1) {
    *ld = s.L == 1 ? s.d : sl;
  } else if (s.L == 1) {
    *ld = sb;
  } else if (sb == s.L * sl) {
    *ld = sl;
  } else {
    return check::Mismatch(kOp, name, "rows evenly spaced: strides (L s, s, 1)",
                           "strides (" + std::to_string(sb) + ", " + std::to_string(sl) + ", 1)");
  }
  if (*ld < s.d) {
    return check::Mismatch(kOp, name, "a row stride >= d = " + std::to_string(s.d),
                           std::to_string(*ld));
  }
  return Status::Ok();
}

Status CheckWeight(const char* name, const Tensor& w, const char* legend, int64_t rows,
                   int64_t cols) {
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, name, w, {legend, {rows, cols}},
                                       {DType::kF32, DType::kBF16, DType::kF16}));
  if (!w.is_contiguous()) {
    return check::Mismatch(
        kOp, name, "a contiguous row-major matrix",
        "strides (" + std::to_string(w.strides[0]) + ", " + std::to_string(w.strides[1]) + ")");
  }
  return Status::Ok();
}

Status Check(const Mamba1MixerInputs& in, const Tensor& out, Dims* s) {
  Device device = Device::kCpu;
  SSMKIT_RETURN_IF_ERROR(check::OpDevices<Mamba1MixerTensors>(kOp, in, {{"out", out}}, &device));
  if (device != Device::kCpu) return Status::Unsupported("mamba1_mixer: runs on the CPU only");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "x", in.x, {3}));
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "A", in.A, {2}));
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "conv_weight", in.conv_weight, {2}));
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "x_proj", in.x_proj, {2}));
  s->B = in.x.shape[0];
  s->L = in.x.shape[1];
  s->d = in.x.shape[2];
  s->D = in.A.shape[0];
  s->N = in.A.shape[1];
  s->K = in.conv_weight.shape[1];
  s->E = in.x_proj.shape[0];
  s->R = s->E - 2 * s->N;
  s->T = s->B * s->L;
  s->G = (s->D + kMamba1MixerGroupChannels - 1) / kMamba1MixerGroupChannels;
  if (s->B < 1 || s->L < 1 || s->d < 1) {
    return check::Mismatch(kOp, "x", "(B, L, d) with B, L, d >= 1", in.x.shape_string());
  }
  if (s->D < 1 || s->N < 1) {
    return check::Mismatch(kOp, "A", "(D, N) with D, N >= 1", in.A.shape_string());
  }
  if (s->R < 1) {
    return check::Mismatch(kOp, "x_proj", "R + 2N rows, R >= 1 (N = " + std::to_string(s->N) + ")",
                           in.x_proj.shape_string());
  }
  if (s->K < kMinConvWidth || s->K > kMaxConvWidth) {
    return check::Mismatch(kOp, "conv_weight", "(D, K) with 2 <= K <= 8",
                           in.conv_weight.shape_string());
  }
  const check::ShapeSpec x_shape{"(B, L, d)", {s->B, s->L, s->d}};
  const check::ShapeSpec channels{"(D)", {s->D}};
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "x", in.x, x_shape, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "out", out, x_shape, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(RowStride("x", in.x, *s, &s->x_ld));
  SSMKIT_RETURN_IF_ERROR(RowStride("out", out, *s, &s->out_ld));
  SSMKIT_RETURN_IF_ERROR(CheckWeight("in_proj", in.in_proj, "(2D, d)", 2 * s->D, s->d));
  SSMKIT_RETURN_IF_ERROR(CheckWeight("x_proj", in.x_proj, "(R + 2N, D)", s->E, s->D));
  SSMKIT_RETURN_IF_ERROR(CheckWeight("dt_proj", in.dt_proj, "(D, R)", s->D, s->R));
  SSMKIT_RETURN_IF_ERROR(CheckWeight("out_proj", in.out_proj, "(d, D)", s->d, s->D));
  SSMKIT_RETURN_IF_ERROR(
      check::Tensor(kOp, "conv_weight", in.conv_weight, {"(D, K)", {s->D, s->K}}, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "A", in.A, {"(D, N)", {s->D, s->N}}, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(check::Optional(kOp, "conv_bias", in.conv_bias, channels, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(check::Optional(kOp, "dt_bias", in.dt_bias, channels, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(check::Optional(kOp, "D", in.D, channels, {DType::kF32}));
  // out is written after x is read in full; it may be x, and must not overlap anything else.
  const bool out_is_x = out.data == in.x.data && out.strides == in.x.strides;
  for (const auto& input : Mamba1MixerTensors::inputs) {
    const Tensor& t = in.*input.member;
    if (out_is_x && t.data == in.x.data) continue;
    SSMKIT_RETURN_IF_ERROR(check::Disjoint(kOp, "out", out, input.name, t));
  }
  return Status::Ok();
}

// The product of a weight (rows, cols) row range or column range with x: LinearParams of W's
// rows [r0, r0 + rows) and columns [k0, k0 + cols) (row stride W's width).
LinearParams Product(const Tensor& w, int64_t r0, int64_t rows, int64_t k0, int64_t cols) {
  LinearParams p;
  const int64_t width = w.shape[1];
  p.out_features = rows;
  p.in_features = cols;
  p.weight = static_cast<const char*>(w.data) + (r0 * width + k0) * DTypeSize(w.dtype);
  p.weight_dtype = w.dtype;
  if (cols != width) p.weight_row_stride = width;
  return p;
}

// x (T, K) feature-major at data (K rows of T); out (T, M) likewise.
void FeatureMajorX(LinearParams* p, const float* data, int64_t T) {
  p->rows = T;
  p->x = data;
  p->x_stride_row = 1;
  p->x_stride_feature = T;
}
void FeatureMajorOut(LinearParams* p, float* data, int64_t T) {
  p->out = data;
  p->out_stride_row = 1;
  p->out_stride_feature = T;
}

// (B, features, L) over a channel-major (features, T) buffer.
Tensor Channels(const float* data, int64_t B, int64_t features, int64_t L) {
  Tensor t;
  t.data = const_cast<float*>(data);
  t.rank = 3;
  t.shape = {B, features, L};
  t.strides = {L, B * L, 1};
  return t;
}

// Rows [c0, c0 + n) of an optional (D) or (D, cols) f32 tensor.
Tensor RowsOf(const Tensor& t, int64_t c0, int64_t n) {
  if (!t.defined()) return t;
  Tensor v = t;
  v.data = static_cast<float*>(t.data) + c0 * t.strides[0];
  v.shape[0] = n;
  return v;
}

// The first failure of the blocks, kept for the caller.
class FirstError {
 public:
  void Keep(const Status& s) {
    if (s.ok()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (status_.ok()) status_ = s;
  }
  Status Take() { return status_; }

 private:
  std::mutex mutex_;
  Status status_;
};

class Mixer {
 public:
  Mixer(const Mamba1MixerInputs& in, const Tensor& out, const Dims& s) : in_(in), out_(out), s_(s) {
    LinearParams x_proj = Product(in.x_proj, 0, s.E, 0, s.D);
    FeatureMajorX(&x_proj, nullptr, s.T);
    LinearParams out_proj = Product(in.out_proj, 0, s.d, 0, s.D);
    FeatureMajorX(&out_proj, nullptr, s.T);
    // Per group only where the groups' partial sums (G rows of E or d per step) are no more
    // floats than the activation they keep on its cores (D per step): the policy window's
    // (D 512, d 256, G 2) both, m1-130m's (D 1536, d 768, G 6) x_proj only (its out_proj per
    // group took 6.3-6.6 ms at 512 steps against 5.0-5.1 whole).
    x_proj_groups_ = s.G > 1 && s.G * s.E <= s.D && cpu::TakesAmxTiles(x_proj);
    out_proj_groups_ = s.G > 1 && s.G * s.d <= s.D && cpu::TakesAmxTiles(out_proj);
  }

  // The floats Run carves from its workspace (in double: no overflow to check for).
  double WorkspaceFloats() const {
    const double T = static_cast<double>(s_.T);
    return T * (5.0 * s_.D + static_cast<double>(s_.E) * (x_proj_groups_ ? 2 * s_.G : 1) +
                (out_proj_groups_ ? static_cast<double>(s_.G) * s_.d : 0.0));
  }

  Status Run(float* ws) {
    const int64_t T = s_.T, D = s_.D;
    xz_ = ws;
    xc_ = xz_ + 2 * D * T;
    delta_ = xc_ + D * T;
    y_ = delta_ + D * T;
    xdbl_ = y_ + D * T;  // (E, T), or one per group (G, E, T) on the tiles
    partial_x_ = xdbl_ + (x_proj_groups_ ? s_.G : 1) * s_.E * T;
    partial_out_ = partial_x_ + (x_proj_groups_ ? s_.G * s_.E * T : 0);
    FirstError error;
    ParallelFor(s_.G, [&](int64_t begin, int64_t end, int) {
      for (int64_t g = begin; g < end; ++g) error.Keep(Region1(g));
    });
    SSMKIT_RETURN_IF_ERROR(error.Take());
    if (!x_proj_groups_) {
      LinearParams p = Product(in_.x_proj, 0, s_.E, 0, D);
      FeatureMajorX(&p, xc_, T);
      FeatureMajorOut(&p, xdbl_, T);
      SSMKIT_RETURN_IF_ERROR(cpu::Linear(p));
    }
    ParallelFor(s_.G, [&](int64_t begin, int64_t end, int) {
      for (int64_t g = begin; g < end; ++g) {
        float* xdbl = xdbl_;
        if (x_proj_groups_) {
          xdbl += g * s_.E * T;
          SumGroups(partial_x_, s_.E * T, s_.E * T, xdbl);
        }
        error.Keep(Region2(g, xdbl));
      }
    });
    SSMKIT_RETURN_IF_ERROR(error.Take());
    if (!out_proj_groups_) {
      LinearParams p = Product(in_.out_proj, 0, s_.d, 0, D);
      FeatureMajorX(&p, y_, T);
      p.out = static_cast<float*>(out_.data);
      p.out_stride_row = s_.out_ld;
      return cpu::Linear(p);
    }
    ParallelFor(T, [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t) {
        SumGroups(partial_out_ + t * s_.d, T * s_.d, s_.d,
                  static_cast<float*>(out_.data) + t * s_.out_ld);
      }
    });
    return Status::Ok();
  }

 private:
  int64_t GroupStart(int64_t g) const { return g * kMamba1MixerGroupChannels; }
  int64_t GroupSize(int64_t g) const {
    return std::min(kMamba1MixerGroupChannels, s_.D - GroupStart(g));
  }

  // dst[i] = sum over groups of src[g * stride + i] for i < n, in group order.
  void SumGroups(const float* src, int64_t stride, int64_t n, float* dst) const {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
    for (int64_t g = 1; g < s_.G; ++g) {
      const float* part = src + g * stride;
      for (int64_t i = 0; i < n; ++i) dst[i] += part[i];
    }
  }

  Status Region1(int64_t g) {
    const int64_t T = s_.T, D = s_.D, c0 = GroupStart(g), n = GroupSize(g);
    for (const int64_t r0 : {c0, D + c0}) {  // the group's rows of xs, then of z
      LinearParams p = Product(in_.in_proj, r0, n, 0, s_.d);
      p.rows = T;
      p.x = static_cast<const float*>(in_.x.data);
      p.x_stride_row = s_.x_ld;
      FeatureMajorOut(&p, xz_ + r0 * T, T);
      SSMKIT_RETURN_IF_ERROR(cpu::Linear(p));
    }
    CausalConv1dInputs conv;
    conv.x = Channels(xz_ + c0 * T, s_.B, n, s_.L);
    conv.weight = RowsOf(in_.conv_weight, c0, n);
    conv.bias = RowsOf(in_.conv_bias, c0, n);
    conv.activation = Conv1dActivation::kSilu;
    SSMKIT_RETURN_IF_ERROR(CausalConv1dForward(conv, Channels(xc_ + c0 * T, s_.B, n, s_.L), {}));
    if (!x_proj_groups_) return Status::Ok();
    LinearParams p = Product(in_.x_proj, 0, s_.E, c0, n);
    FeatureMajorX(&p, xc_ + c0 * T, T);
    FeatureMajorOut(&p, partial_x_ + g * s_.E * T, T);
    return cpu::Linear(p);
  }

  Status Region2(int64_t g, const float* xdbl) {
    const int64_t T = s_.T, c0 = GroupStart(g), n = GroupSize(g), R = s_.R, N = s_.N;
    LinearParams dt = Product(in_.dt_proj, c0, n, 0, R);
    FeatureMajorX(&dt, xdbl, T);
    FeatureMajorOut(&dt, delta_ + c0 * T, T);
    SSMKIT_RETURN_IF_ERROR(cpu::Linear(dt));
    SelectiveScanInputs scan;
    scan.u = Channels(xc_ + c0 * T, s_.B, n, s_.L);
    scan.delta = Channels(delta_ + c0 * T, s_.B, n, s_.L);
    scan.A = RowsOf(in_.A, c0, n);
    scan.B = Channels(xdbl + R * T, s_.B, N, s_.L);
    scan.C = Channels(xdbl + (R + N) * T, s_.B, N, s_.L);
    scan.D = RowsOf(in_.D, c0, n);
    scan.z = Channels(xz_ + (s_.D + c0) * T, s_.B, n, s_.L);
    scan.delta_bias = RowsOf(in_.dt_bias, c0, n);
    scan.delta_softplus = true;
    SSMKIT_RETURN_IF_ERROR(SelectiveScanForward(scan, Channels(y_ + c0 * T, s_.B, n, s_.L), {}));
    if (!out_proj_groups_) return Status::Ok();
    LinearParams p = Product(in_.out_proj, 0, s_.d, c0, n);
    FeatureMajorX(&p, y_ + c0 * T, T);
    p.out = partial_out_ + g * T * s_.d;
    p.out_stride_row = s_.d;
    return cpu::Linear(p);
  }

  const Mamba1MixerInputs& in_;
  const Tensor& out_;
  const Dims s_;
  bool x_proj_groups_ = false, out_proj_groups_ = false;
  float *xz_ = nullptr, *xc_ = nullptr, *delta_ = nullptr, *y_ = nullptr, *xdbl_ = nullptr;
  float *partial_x_ = nullptr, *partial_out_ = nullptr;  // (G, E, T), (G, T, d)
};

}  // namespace

Status Mamba1MixerForward(const Mamba1MixerInputs& inputs, const Tensor& out) {
  Dims s;
  SSMKIT_RETURN_IF_ERROR(Check(inputs, out, &s));
  return check::RunGuarded(kOp, [&]() -> Status {
    Mixer mixer(inputs, out, s);
    const double floats = mixer.WorkspaceFloats();
    if (floats > kMaxWorkspaceFloats) {
      return Status::OutOfMemory("mamba1_mixer: the activations need " + std::to_string(floats) +
                                 " floats of workspace");
    }
    thread_local CacheLineVector<float> workspace;
    workspace.resize(static_cast<size_t>(floats));
    return mixer.Run(workspace.data());
  });
}

}  // namespace ssmkit
