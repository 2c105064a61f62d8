#include "ref/mamba1_mixer_ref.hpp"

#include <cstddef>
#include <vector>

#include "ref/conv1d_ref.hpp"
#include "ref/linear_ref.hpp"
#include "ref/selective_scan_ref.hpp"

namespace ssmkit::ref {
namespace {

// dst (B, C, L)[b, c, l] = src (T, ld)[b L + l, c0 + c]: features of token rows to channels.
std::vector<double> ToChannels(const double* src, int64_t ld, int64_t c0, int64_t B, int64_t C,
                               int64_t L) {
  std::vector<double> dst(static_cast<size_t>(B * C * L));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t l = 0; l < L; ++l) dst[(b * C + c) * L + l] = src[(b * L + l) * ld + c0 + c];
  return dst;
}

// The reverse: (B, C, L) channels to (T, C) token rows.
std::vector<double> ToRows(const std::vector<double>& src, int64_t B, int64_t C, int64_t L) {
  std::vector<double> dst(src.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t l = 0; l < L; ++l) dst[(b * L + l) * C + c] = src[(b * C + c) * L + l];
  return dst;
}

}  // namespace

void Mamba1MixerForward(const Mamba1MixerShape& s, const Mamba1MixerWeights& w, const double* x,
                        double* out) {
  const int64_t B = s.batch, L = s.seqlen, T = B * L, d = s.d_model, D = s.d_inner;
  const int64_t N = s.d_state, R = s.dt_rank, E = R + 2 * N;
  std::vector<double> xz(static_cast<size_t>(T * 2 * D));
  Linear(T, d, 2 * D, x, w.in_proj, nullptr, xz.data());

  const std::vector<double> xs = ToChannels(xz.data(), 2 * D, 0, B, D, L);
  const std::vector<double> z = ToChannels(xz.data(), 2 * D, D, B, D, L);
  std::vector<double> xc(xs.size());
  Conv1dShape conv{B, D, L, s.d_conv, /*silu=*/true};
  Conv1dInputs conv_in;
  conv_in.x = xs.data();
  conv_in.weight = w.conv_weight;
  conv_in.bias = w.conv_bias;
  CausalConv1dForward(conv, conv_in, xc.data(), nullptr);

  const std::vector<double> xc_rows = ToRows(xc, B, D, L);
  std::vector<double> xdbl(static_cast<size_t>(T * E));
  Linear(T, D, E, xc_rows.data(), w.x_proj, nullptr, xdbl.data());
  std::vector<double> dt_in(static_cast<size_t>(T * R));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < R; ++r) dt_in[t * R + r] = xdbl[t * E + r];
  std::vector<double> delta_rows(static_cast<size_t>(T * D));
  Linear(T, R, D, dt_in.data(), w.dt_proj, nullptr, delta_rows.data());
  const std::vector<double> delta = ToChannels(delta_rows.data(), D, 0, B, D, L);
  const std::vector<double> Bm = ToChannels(xdbl.data(), E, R, B, N, L);  // (B, 1, N, L)
  const std::vector<double> Cm = ToChannels(xdbl.data(), E, R + N, B, N, L);

  ScanShape scan;
  scan.batch = B;
  scan.dim = D;
  scan.seqlen = L;
  scan.dstate = N;
  scan.delta_softplus = true;
  ScanInputs in;
  in.u = xc.data();
  in.delta = delta.data();
  in.A = w.A;
  in.B = Bm.data();
  in.C = Cm.data();
  in.D = w.D;
  in.z = z.data();
  in.delta_bias = w.dt_bias;
  std::vector<double> y(xc.size());
  SelectiveScanForward(scan, in, y.data(), nullptr);

  const std::vector<double> y_rows = ToRows(y, B, D, L);
  Linear(T, D, d, y_rows.data(), w.out_proj, nullptr, out);
}

}  // namespace ssmkit::ref
