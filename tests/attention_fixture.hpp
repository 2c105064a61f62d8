// Shared pieces of the attention tests: strided views into larger buffers (q, k and v as
// slices of one fused projection output, outputs inside wider rows), a case table entry with
// the model each shape comes from, and one random problem per case with its stored values in
// double for the fp64 oracle.
// Dimension legend: B batch, L query length, S key length, H heads, Hk kv heads, E / Ev head
// dims.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "ref/attention_ref.hpp"
#include "ssmkit/attention.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {

// Storage shared by views; poisoned (NaN) when made, so that whatever no one writes stays NaN.
struct Buffer {
  Buffer(int64_t n, DType t) : dtype(t), bytes(static_cast<size_t>(n * DTypeSize(t))) {
    for (int64_t i = 0; i < n; ++i) {
      StoreFromF32(bytes.data(), dtype, i, std::numeric_limits<float>::quiet_NaN());
    }
  }
  DType dtype;
  std::vector<uint8_t> bytes;
};

// A rank-4 (or lower: leading dims of 1 dropped by `rank`) view: element (i0, i1, i2, i3) at
// offset + i0 s0 + i1 s1 + i2 s2 + i3.
class View {
 public:
  View() = default;
  View(std::shared_ptr<Buffer> buffer, int64_t offset, std::array<int64_t, 4> shape,
       std::array<int64_t, 3> strides, int rank = 4)
      : buffer_(std::move(buffer)),
        offset_(offset),
        shape_(shape),
        strides_(strides),
        rank_(rank) {}

  // A densely packed view in a buffer of its own.
  static View Dense(std::array<int64_t, 4> shape, DType dtype, int rank = 4) {
    const int64_t s2 = shape[3], s1 = shape[2] * s2, s0 = shape[1] * s1;
    return View(std::make_shared<Buffer>(shape[0] * s0, dtype), 0, shape, {s0, s1, s2}, rank);
  }

  int64_t numel() const { return shape_[0] * shape_[1] * shape_[2] * shape_[3]; }
  DType dtype() const { return buffer_->dtype; }

  // Element n of the view in row-major order -> its index in the buffer.
  int64_t Index(int64_t n) const {
    const int64_t i3 = n % shape_[3], i2 = n / shape_[3] % shape_[2];
    const int64_t i1 = n / (shape_[3] * shape_[2]) % shape_[1];
    const int64_t i0 = n / (shape_[3] * shape_[2] * shape_[1]);
    return offset_ + i0 * strides_[0] + i1 * strides_[1] + i2 * strides_[2] + i3;
  }
  // Stores `values` (row-major, numel) rounded to the dtype; returns them as stored.
  std::vector<double> Fill(const std::vector<double>& values) {
    for (int64_t n = 0; n < numel(); ++n) {
      StoreFromF32(buffer_->bytes.data(), dtype(), Index(n), static_cast<float>(values[n]));
    }
    return Values();
  }
  std::vector<double> Values() const {
    std::vector<double> v(static_cast<size_t>(numel()));
    for (int64_t n = 0; n < numel(); ++n)
      v[n] = LoadAsF32(buffer_->bytes.data(), dtype(), Index(n));
    return v;
  }
  void Poison() {
    for (int64_t n = 0; n < numel(); ++n) {
      StoreFromF32(buffer_->bytes.data(), dtype(), Index(n),
                   std::numeric_limits<float>::quiet_NaN());
    }
  }
  // The view as a Tensor; absent (Tensor{}) for a default-made View.
  Tensor tensor() const {
    Tensor t;
    if (!buffer_) return t;
    t.data = buffer_->bytes.data() + offset_ * DTypeSize(dtype());
    t.dtype = dtype();
    t.rank = rank_;
    const int skip = 4 - rank_;
    for (int d = 0; d < rank_; ++d) {
      t.shape[d] = shape_[d + skip];
      t.strides[d] = d + skip < 3 ? strides_[d + skip] : 1;
    }
    return t;
  }
  const std::vector<uint8_t>& bytes() const { return buffer_->bytes; }
  // Whether every byte of the buffer outside this view still equals `before`.
  bool UntouchedOutside(const std::vector<uint8_t>& before) const {
    std::vector<bool> inside(before.size(), false);
    const int64_t size = DTypeSize(dtype());
    for (int64_t n = 0; n < numel(); ++n) {
      for (int64_t b = 0; b < size; ++b) inside[static_cast<size_t>(Index(n) * size + b)] = true;
    }
    for (size_t b = 0; b < before.size(); ++b) {
      if (!inside[b] && before[b] != buffer_->bytes[b]) return false;
    }
    return true;
  }

 private:
  std::shared_ptr<Buffer> buffer_;
  int64_t offset_ = 0;
  std::array<int64_t, 4> shape_{1, 1, 1, 1};
  std::array<int64_t, 3> strides_{1, 1, 1};
  int rank_ = 4;
};

// One row of a case table. `label` names the model the shape comes from.
struct AttnCase {
  const char* label;
  int64_t B, L, S, H, Hk, E, Ev;
  int64_t window = 0;
  bool left_pad = false;  // kv_start drawn per sequence (up to half of S, one row all pad)
  bool fused = false;     // q, k, v slices of one (B, S, H E + Hk E + Hk Ev) projection output
  DType dtype = DType::kF32;
  float scale = 0.0f;

  std::string Name() const {
    return std::string(label) + ": B=" + std::to_string(B) + " L=" + std::to_string(L) +
           " S=" + std::to_string(S) + " H=" + std::to_string(H) + " Hk=" + std::to_string(Hk) +
           " E=" + std::to_string(E) + " Ev=" + std::to_string(Ev) +
           " window=" + std::to_string(window) + (left_pad ? " left_pad" : "") +
           (fused ? " fused" : "") + " " + DTypeName(dtype);
  }
  double Scale() const { return scale > 0.0f ? scale : 1.0 / std::sqrt(static_cast<double>(E)); }
};

// Random q, k, v (and kv_start) for a case; the values as stored, in double, for the oracle.
struct AttnProblem {
  AttnCase c;
  View q, k, v;
  std::vector<double> q_d, k_d, v_d;
  std::vector<int32_t> kv_start;
  View kv_start_view;

  AttnProblem(const AttnCase& ac, Rng& rng) : c(ac) {
    if (c.fused) {
      // One projection output per token: [q heads | k heads | v heads], plus 3 spare floats.
      const int64_t width = c.H * c.E + c.Hk * c.E + c.Hk * c.Ev + 3;
      auto buffer = std::make_shared<Buffer>(c.B * c.S * width, c.dtype);
      // q holds the last L tokens (a chunk continuing a prefix); k and v all S.
      q = View(buffer, (c.S - c.L) * width, {c.B, c.L, c.H, c.E}, {c.S * width, width, c.E});
      k = View(buffer, c.H * c.E, {c.B, c.S, c.Hk, c.E}, {c.S * width, width, c.E});
      v = View(buffer, c.H * c.E + c.Hk * c.E, {c.B, c.S, c.Hk, c.Ev}, {c.S * width, width, c.Ev});
    } else {
      q = View::Dense({c.B, c.L, c.H, c.E}, c.dtype);
      k = View::Dense({c.B, c.S, c.Hk, c.E}, c.dtype);
      v = View::Dense({c.B, c.S, c.Hk, c.Ev}, c.dtype);
    }
    // Realistic scales: unit-variance q and k (scores of spread ~ 1 after 1/sqrt(E)); the
    // softmax is then neither uniform nor one-hot.
    q_d = q.Fill(rng.NormalVec(q.numel(), 1.0));
    k_d = k.Fill(rng.NormalVec(k.numel(), 1.0));
    v_d = v.Fill(rng.NormalVec(v.numel(), 1.0));
    if (c.left_pad) {
      kv_start.resize(static_cast<size_t>(c.B));
      for (int64_t b = 0; b < c.B; ++b) {
        kv_start[b] = static_cast<int32_t>(rng.Uniform(0.0, static_cast<double>(c.S) / 2));
      }
      // The last sequence is padded past the chunk's start: some of its query rows see no key.
      if (c.B > 1) kv_start[c.B - 1] = static_cast<int32_t>(c.S - c.L / 2);
      kv_start_view = View::Dense({1, 1, 1, c.B}, DType::kI32, 1);
      std::vector<double> as_double(kv_start.begin(), kv_start.end());
      kv_start_view.Fill(as_double);
    }
  }

  AttentionInputs Inputs() const {
    return {q.tensor(), k.tensor(), v.tensor(), c.left_pad ? kv_start_view.tensor() : Tensor{}};
  }
  AttentionOptions Options() const { return {c.scale, c.window}; }
  ref::AttentionShape RefShape() const {
    return {c.B, c.L, c.S, c.H, c.Hk, c.E, c.Ev, Scale(), c.window};
  }
  const int32_t* RefKvStart() const { return c.left_pad ? kv_start.data() : nullptr; }
  double Scale() const { return c.Scale(); }
};

// An output view inside wider rows (2 spare elements per (b, l) row), poisoned, so that a
// write outside it shows.
inline View PaddedOutput(int64_t B, int64_t L, int64_t H, int64_t D, DType dtype) {
  const int64_t width = H * D + 2;
  return View(std::make_shared<Buffer>(B * L * width, dtype), 1, {B, L, H, D},
              {L * width, width, D});
}

// `values` rounded to `dtype`, as a kernel's output is.
inline std::vector<double> RoundedTo(const std::vector<double>& values, DType dtype) {
  if (dtype == DType::kF32) return values;
  View t = View::Dense({1, 1, 1, static_cast<int64_t>(values.size())}, dtype, 1);
  return t.Fill(values);
}

}  // namespace ssmkit::testing
