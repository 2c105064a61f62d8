// libFuzzer target for the C ABI's op argument structs (include/ssmkit/ssmkit.h): the bytes
// choose an op, its dimensions, and for every tensor slot whether it is absent, well formed
// (the shape the header documents, in one of the allowed dtypes) or broken in one way (a
// dimension off by one, a missing or extra axis, another dtype or an invalid one, the CUDA
// device, transposed, zero or negative strides, a rank past SSMKIT_MAX_RANK, a non-zero
// reserved field), plus the integer contents of index tensors (seq_idx, cu_seqlens,
// state_batch_indices) and the scalar fields. Every buffer is allocated to exactly the
// elements its shape and strides reach, so any read or write the argument checks should have
// prevented lands outside an allocation and AddressSanitizer stops the run. A call must
// succeed or return an error with a message (ssmkit_last_error), never crash.
// Seeds: tests/fuzz/corpus/capi_ops/.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "ssmkit/ssmkit.h"

namespace {

// Reads the fuzz input front to back; past its end every read is 0.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  int Range(int lo, int hi) { return lo + Byte() % (hi - lo + 1); }  // in [lo, hi]
  bool Chance(int one_in) { return Byte() % one_in == 0; }

 private:
  const uint8_t* data_;
  size_t size_, pos_ = 0;
};

size_t ElementSize(int32_t dtype) {
  switch (dtype) {
    case SSMKIT_BF16:
    case SSMKIT_F16:
      return 2;
    case SSMKIT_I64:
      return 8;
    default:
      return 4;  // f32, i32, and the invalid dtypes (which must be rejected unread)
  }
}

// The dimensions of one call; a shape template's letters name them.
struct Dims {
  int64_t B, D, L, N, G, H, P, K, E, M, S, T, I, O;
  int64_t Of(char c) const {
    switch (c) {
      case 'B':
        return B;
      case 'D':
        return D;
      case 'L':
        return L;
      case 'N':
        return N;
      case 'G':
        return G;
      case 'H':
        return H;
      case 'P':
        return P;
      case 'K':
        return K;
      case 'k':
        return K - 1;
      case 'E':
        return E;
      case 'M':
        return M;
      case 's':
        return S + 1;
      case 'S':
        return S;
      case 'T':
        return T;
      case 'I':
        return I;
      case 'O':
        return O;
      case 'W':  // the Mamba-1 mixer's in_proj rows
        return 2 * D;
      case 'R':  // its dt_rank, from x_proj's E = R + 2N rows
        return E > 2 * N ? E - 2 * N : 0;
      default:
        return 1;
    }
  }
};

// The buffers of one call, kept alive until it returns.
class Arena {
 public:
  void* Allocate(size_t bytes) {
    buffers_.push_back(std::make_unique<uint8_t[]>(bytes == 0 ? 1 : bytes));
    return buffers_.back().get();
  }

 private:
  std::vector<std::unique_ptr<uint8_t[]>> buffers_;
};

class CallBuilder {
 public:
  CallBuilder(Bytes& in, const Dims& dims) : in_(in), dims_(dims) {}

  // A tensor for a slot documented as `shape` in one of `dtypes`; `optional` slots are absent
  // more often. Integer slots (i32 / i64 first in dtypes) get fuzzed contents.
  ssmkit_tensor Slot(const char* shape, std::vector<int32_t> dtypes, bool optional) {
    ssmkit_tensor t{};
    if (in_.Chance(optional ? 3 : 24)) return t;  // absent
    t.dtype = dtypes[in_.Byte() % dtypes.size()];
    t.rank = static_cast<int32_t>(std::strlen(shape));
    for (int i = 0; i < t.rank; ++i) t.shape[i] = dims_.Of(shape[i]);
    Break(&t);
    Strides(&t);
    Fill(&t);
    return t;
  }

  double Scalar(double sensible) {
    switch (in_.Range(0, 9)) {
      case 0:
        return 0.0;
      case 1:
        return -sensible;
      case 2:
        return NAN;
      case 3:
        return INFINITY;
      default:
        return sensible;
    }
  }

 private:
  void Break(ssmkit_tensor* t) {
    if (!in_.Chance(4)) return;  // most slots well formed, so that calls get past the checks
    const int axis = t->rank > 0 ? in_.Byte() % t->rank : 0;
    switch (in_.Range(0, 9)) {
      case 0:
        if (t->rank > 0) ++t->shape[axis];
        break;
      case 1:
        if (t->rank > 0 && t->shape[axis] > 0) --t->shape[axis];
        break;
      case 2:
        if (t->rank > 0) --t->rank;
        break;
      case 3:
        if (t->rank < SSMKIT_MAX_RANK) t->shape[t->rank++] = in_.Range(1, 3);
        break;
      case 4:
        t->dtype = in_.Range(0, 6);
        break;  // 5 and 6 are no dtype
      case 5:
        t->device = in_.Range(1, 3);
        break;
      case 6:
        t->reserved = 1;
        break;
      case 7:
        t->rank = in_.Chance(2) ? SSMKIT_MAX_RANK + 1 : -1;
        break;
      case 8:
        if (t->rank > 0) t->shape[axis] = 0;
        break;
      default:
        break;
    }
  }

  // Row-major, or (one time in four) transposed, padded, zero or negative strides.
  void Strides(ssmkit_tensor* t) {
    const int rank = std::min(std::max(t->rank, 0), SSMKIT_MAX_RANK);
    int64_t stride = 1;
    for (int i = rank - 1; i >= 0; --i) {
      t->strides[i] = stride;
      stride *= std::max<int64_t>(t->shape[i], 1);
    }
    if (rank == 0 || !in_.Chance(4)) return;
    const int a = in_.Byte() % rank, b = in_.Byte() % rank;
    switch (in_.Range(0, 3)) {
      case 0:
        std::swap(t->strides[a], t->strides[b]);
        break;
      case 1:
        t->strides[a] *= 2;
        break;
      case 2:
        t->strides[a] = 0;
        break;
      default:
        t->strides[a] = -t->strides[a];
        break;
    }
  }

  // A buffer holding exactly the elements the shape and strides reach.
  void Fill(ssmkit_tensor* t) {
    const int rank = std::min(std::max(t->rank, 0), SSMKIT_MAX_RANK);
    int64_t lo = 0, hi = 0;  // element offsets reached, relative to data
    bool empty = false;
    for (int i = 0; i < rank; ++i) {
      if (t->shape[i] <= 0) empty = true;
      const int64_t reach = (std::max<int64_t>(t->shape[i], 1) - 1) * t->strides[i];
      (reach < 0 ? lo : hi) += reach;
    }
    const size_t elem = ElementSize(t->dtype);
    const size_t count = empty ? 0 : static_cast<size_t>(hi - lo + 1);
    auto* base = static_cast<uint8_t*>(arena_.Allocate(count * elem));
    t->data = base - lo * static_cast<int64_t>(elem);
    if (empty) t->data = base;
    const bool integer = t->dtype == SSMKIT_I32 || t->dtype == SSMKIT_I64;
    for (size_t i = 0; i < count; ++i) {
      uint8_t* p = base + i * elem;
      if (integer) {
        // Mostly small valid-looking indices, sometimes anything.
        const int64_t v = in_.Chance(8) ? static_cast<int8_t>(in_.Byte()) * 1000003LL
                                        : static_cast<int64_t>(i) * in_.Range(0, 2) / 2;
        if (elem == 8)
          std::memcpy(p, &v, 8);
        else {
          const int32_t v32 = static_cast<int32_t>(v);
          std::memcpy(p, &v32, 4);
        }
      } else {
        const float f = static_cast<float>(in_.Range(-64, 64)) / 32.0f;
        if (elem == 4)
          std::memcpy(p, &f, 4);
        else {
          uint32_t bits;
          std::memcpy(&bits, &f, 4);
          const uint16_t half = static_cast<uint16_t>(bits >> 16);  // bf16 (f16 reads it too)
          std::memcpy(p, &half, 2);
        }
      }
    }
  }

  Bytes& in_;
  const Dims& dims_;
  Arena arena_;
};

constexpr int32_t F32 = SSMKIT_F32, BF16 = SSMKIT_BF16, F16 = SSMKIT_F16, I32 = SSMKIT_I32,
                  I64 = SSMKIT_I64;
const std::vector<int32_t> kFloat{F32, BF16}, kF32{F32}, kI32{I32}, kIndex{I32, I64},
    kWeight{F32, BF16, F16};

const char* Either(Bytes& in, std::initializer_list<const char*> shapes) {
  return shapes.begin()[in.Byte() % shapes.size()];
}

ssmkit_status ScanCall(Bytes& in, CallBuilder& c, bool backward) {
  ssmkit_selective_scan_args a{};
  a.struct_size = sizeof(a);
  a.u = c.Slot("BDL", kFloat, false);
  a.delta = c.Slot("BDL", kFloat, false);
  a.A = c.Slot("DN", kF32, false);
  a.B = c.Slot(Either(in, {"DN", "BNL", "BGNL"}), kFloat, false);
  a.C = c.Slot(Either(in, {"DN", "BNL", "BGNL"}), kFloat, false);
  a.D = c.Slot("D", kF32, true);
  a.z = c.Slot("BDL", kFloat, true);
  a.delta_bias = c.Slot("D", kF32, true);
  a.initial_state = c.Slot(Either(in, {"BDN", "SDN"}), kF32, true);
  a.delta_softplus = in.Range(0, 2);
  a.algorithm = in.Range(0, 5);
  a.chunk_length = in.Range(-1, 9);
  a.seq_idx = c.Slot("BL", kI32, true);
  a.cu_seqlens = c.Slot("s", kIndex, true);
  const bool varlen = in.Chance(2);
  if (!backward) {
    const ssmkit_tensor out = c.Slot("BDL", kFloat, false), fin = c.Slot("BDN", kF32, true),
                        states = c.Slot("SDN", kF32, true);
    return varlen ? ssmkit_selective_scan_fwd_varlen(&a, &out, &fin, &states)
                  : ssmkit_selective_scan_fwd(&a, &out, &fin);
  }
  ssmkit_selective_scan_grads g{};
  g.struct_size = sizeof(g);
  g.du = c.Slot("BDL", kFloat, true);
  g.ddelta = c.Slot("BDL", kFloat, true);
  g.dA = c.Slot("DN", kF32, true);
  g.dB = c.Slot(Either(in, {"DN", "BNL", "BGNL"}), kFloat, true);
  g.dC = c.Slot(Either(in, {"DN", "BNL", "BGNL"}), kFloat, true);
  g.dD = c.Slot("D", kF32, true);
  g.dz = c.Slot("BDL", kFloat, true);
  g.ddelta_bias = c.Slot("D", kF32, true);
  g.dinitial_state = c.Slot("BDN", kF32, true);
  const ssmkit_tensor dout = c.Slot("BDL", kFloat, false), dfin = c.Slot("BDN", kF32, true),
                      dstates = c.Slot("SDN", kF32, true);
  return varlen ? ssmkit_selective_scan_bwd_varlen(&a, &dout, &dfin, &dstates, &g)
                : ssmkit_selective_scan_bwd(&a, &dout, &dfin, &g);
}

ssmkit_status SsdCall(Bytes& in, CallBuilder& c, bool backward) {
  ssmkit_ssd_args a{};
  a.struct_size = sizeof(a);
  a.x = c.Slot("BLHP", kFloat, false);
  a.dt = c.Slot("BLH", kFloat, false);
  a.A = c.Slot("H", kF32, false);
  a.B = c.Slot("BLGN", kFloat, false);
  a.C = c.Slot("BLGN", kFloat, false);
  a.D = c.Slot(Either(in, {"H", "HP"}), kF32, true);
  a.z = c.Slot("BLHP", kFloat, true);
  a.dt_bias = c.Slot("H", kF32, true);
  a.initial_states = c.Slot(Either(in, {"BHPN", "SHPN"}), kF32, true);
  a.seq_idx = c.Slot("BL", kI32, true);
  a.dt_softplus = in.Range(0, 2);
  a.has_dt_limit = in.Range(0, 2);
  a.dt_min = static_cast<float>(c.Scalar(0.001));
  a.dt_max = static_cast<float>(c.Scalar(0.1));
  a.algorithm = in.Range(0, 3);
  a.reserved = in.Chance(16) ? 1 : 0;
  a.chunk_size = in.Range(-1, 9);
  a.cu_seqlens = c.Slot("s", kIndex, true);
  const bool varlen = in.Chance(2);
  if (!backward) {
    const ssmkit_tensor out = c.Slot("BLHP", kFloat, false), fin = c.Slot("BHPN", kF32, true),
                        states = c.Slot("SHPN", kF32, true);
    return varlen ? ssmkit_ssd_fwd_varlen(&a, &out, &fin, &states) : ssmkit_ssd_fwd(&a, &out, &fin);
  }
  ssmkit_ssd_grads g{};
  g.struct_size = sizeof(g);
  g.dx = c.Slot("BLHP", kFloat, true);
  g.ddt = c.Slot("BLH", kFloat, true);
  g.dA = c.Slot("H", kF32, true);
  g.dB = c.Slot("BLGN", kFloat, true);
  g.dC = c.Slot("BLGN", kFloat, true);
  g.dD = c.Slot(Either(in, {"H", "HP"}), kF32, true);
  g.dz = c.Slot("BLHP", kFloat, true);
  g.ddt_bias = c.Slot("H", kF32, true);
  g.dinitial_states = c.Slot("BHPN", kF32, true);
  const ssmkit_tensor dout = c.Slot("BLHP", kFloat, false), dfin = c.Slot("BHPN", kF32, true),
                      dstates = c.Slot("SHPN", kF32, true);
  return varlen ? ssmkit_ssd_bwd_varlen(&a, &dout, &dfin, &dstates, &g)
                : ssmkit_ssd_bwd(&a, &dout, &dfin, &g);
}

ssmkit_status StateUpdateCall(Bytes& in, CallBuilder& c) {
  ssmkit_state_update_args a{};
  a.struct_size = sizeof(a);
  const bool mamba2 = in.Chance(2);
  a.x = c.Slot(mamba2 ? "BHP" : "BD", kFloat, false);
  a.dt = c.Slot(mamba2 ? Either(in, {"BH", "BHP"}) : "BD", kFloat, false);
  a.A = c.Slot(mamba2 ? Either(in, {"H", "HPN"}) : "DN", kF32, false);
  a.B = c.Slot(Either(in, {"BN", "BGN"}), kFloat, false);
  a.C = c.Slot(Either(in, {"BN", "BGN"}), kFloat, false);
  a.D = c.Slot(mamba2 ? Either(in, {"H", "HP"}) : "D", kF32, true);
  a.z = c.Slot(mamba2 ? "BHP" : "BD", kFloat, true);
  a.dt_bias = c.Slot(mamba2 ? "H" : "D", kF32, true);
  a.state_batch_indices = c.Slot("B", kI32, true);
  a.dt_softplus = in.Range(0, 2);
  a.reserved = in.Chance(16) ? 1 : 0;
  const ssmkit_tensor state = c.Slot(mamba2 ? Either(in, {"BHPN", "THPN"}) : "BDN", kF32, false);
  const ssmkit_tensor out = c.Slot(mamba2 ? "BHP" : "BD", kFloat, false);
  return ssmkit_selective_state_update(&a, &state, &out);
}

ssmkit_status Conv1dCall(Bytes& in, CallBuilder& c, int which) {
  if (which == 2) {
    ssmkit_conv1d_update_args a{};
    a.struct_size = sizeof(a);
    a.x = c.Slot(Either(in, {"BD", "BDL"}), kFloat, false);
    a.weight = c.Slot("DK", kF32, false);
    a.bias = c.Slot("D", kF32, true);
    a.activation = in.Range(0, 2);
    a.reserved = in.Chance(16) ? 1 : 0;
    const ssmkit_tensor state = c.Slot(Either(in, {"BDk", "BDK", "BDL"}), kF32, false);
    const ssmkit_tensor out = c.Slot(Either(in, {"BD", "BDL"}), kFloat, false);
    return ssmkit_causal_conv1d_update(&a, &state, &out);
  }
  ssmkit_conv1d_args a{};
  a.struct_size = sizeof(a);
  a.x = c.Slot("BDL", kFloat, false);
  a.weight = c.Slot("DK", kF32, false);
  a.bias = c.Slot("D", kF32, true);
  a.initial_states = c.Slot("BDk", kFloat, true);
  a.activation = in.Range(0, 2);
  a.seq_idx = c.Slot("BL", kI32, true);
  if (which == 0) {
    const ssmkit_tensor out = c.Slot("BDL", kFloat, false), fin = c.Slot("BDk", kFloat, true);
    return ssmkit_causal_conv1d_fwd(&a, &out, &fin);
  }
  ssmkit_conv1d_grads g{};
  g.struct_size = sizeof(g);
  g.dx = c.Slot("BDL", kFloat, true);
  g.dweight = c.Slot("DK", kF32, true);
  g.dbias = c.Slot("D", kF32, true);
  g.dinitial_states = c.Slot("BDk", kFloat, true);
  const ssmkit_tensor dout = c.Slot("BDL", kFloat, false), dfin = c.Slot("BDk", kFloat, true);
  return ssmkit_causal_conv1d_bwd(&a, &dout, &dfin, &g);
}

ssmkit_status NormCall(Bytes& in, CallBuilder& c, int which) {
  if (which < 2) {
    ssmkit_rmsnorm_args a{};
    a.struct_size = sizeof(a);
    a.x = c.Slot("ME", kFloat, false);
    a.weight = c.Slot("E", kF32, false);
    a.bias = c.Slot("E", kF32, true);
    a.z = c.Slot("ME", kFloat, true);
    a.eps = static_cast<float>(c.Scalar(1e-6));
    a.norm_before_gate = in.Range(0, 2);
    a.group_size = in.Range(-1, 6);
    if (which == 0) {
      const ssmkit_tensor out = c.Slot("ME", kFloat, false);
      return ssmkit_rmsnorm_fwd(&a, &out);
    }
    ssmkit_rmsnorm_grads g{};
    g.struct_size = sizeof(g);
    g.dx = c.Slot("ME", kFloat, true);
    g.dweight = c.Slot("E", kF32, true);
    g.dbias = c.Slot("E", kF32, true);
    g.dz = c.Slot("ME", kFloat, true);
    const ssmkit_tensor dout = c.Slot("ME", kFloat, false);
    return ssmkit_rmsnorm_bwd(&a, &dout, &g);
  }
  ssmkit_add_rmsnorm_args a{};
  a.struct_size = sizeof(a);
  a.x = c.Slot("ME", kFloat, false);
  a.residual = c.Slot("ME", kF32, true);
  a.weight = c.Slot("E", kF32, false);
  a.bias = c.Slot("E", kF32, true);
  a.eps = static_cast<float>(c.Scalar(1e-5));
  a.reserved = in.Chance(16) ? 1 : 0;
  if (which == 2) {
    const ssmkit_tensor out = c.Slot("ME", kFloat, false), res = c.Slot("ME", kF32, false);
    return ssmkit_add_rmsnorm_fwd(&a, &out, &res);
  }
  ssmkit_add_rmsnorm_grads g{};
  g.struct_size = sizeof(g);
  g.dx = c.Slot("ME", kFloat, true);
  g.dresidual = c.Slot("ME", kF32, true);
  g.dweight = c.Slot("E", kF32, true);
  g.dbias = c.Slot("E", kF32, true);
  const ssmkit_tensor dout = c.Slot("ME", kFloat, false), dres = c.Slot("ME", kF32, true);
  return ssmkit_add_rmsnorm_bwd(&a, &dout, &dres, &g);
}

ssmkit_status LinearCall(Bytes& in, CallBuilder& c, bool backward) {
  ssmkit_linear_args a{};
  a.struct_size = sizeof(a);
  a.x = c.Slot("TI", kF32, false);
  a.weight = c.Slot("OI", backward ? kF32 : kWeight, false);
  a.bias = c.Slot("O", kF32, true);
  if (!backward) {
    const ssmkit_tensor out = c.Slot("TO", kF32, false);
    return ssmkit_linear_fwd(&a, &out);
  }
  ssmkit_linear_grads g{};
  g.struct_size = sizeof(g);
  g.dx = c.Slot("TI", kF32, true);
  g.dweight = c.Slot("OI", kF32, true);
  g.dbias = c.Slot("O", kF32, true);
  const ssmkit_tensor dout = c.Slot("TO", kF32, false);
  return ssmkit_linear_bwd(&a, &dout, &g);
}

// The fused Mamba-1 mixer: I is d_model, E x_proj's rows (R + 2N, R >= 1 to be valid).
ssmkit_status MixerCall(CallBuilder& c) {
  ssmkit_mamba1_mixer_args a{};
  a.struct_size = sizeof(a);
  a.x = c.Slot("BLI", kF32, false);
  a.in_proj = c.Slot("WI", kWeight, false);
  a.conv_weight = c.Slot("DK", kF32, false);
  a.conv_bias = c.Slot("D", kF32, true);
  a.x_proj = c.Slot("ED", kWeight, false);
  a.dt_proj = c.Slot("DR", kWeight, false);
  a.dt_bias = c.Slot("D", kF32, true);
  a.A = c.Slot("DN", kF32, false);
  a.D = c.Slot("D", kF32, true);
  a.out_proj = c.Slot("ID", kWeight, false);
  const ssmkit_tensor out = c.Slot("BLI", kF32, false);
  return ssmkit_mamba1_mixer_fwd(&a, &out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool once = [] {
    ssmkit_set_num_threads(2);  // the blocked paths too, on a pool thread
    return true;
  }();
  (void)once;
  Bytes in(data, size);
  const int op = in.Range(0, 15);
  Dims d{};
  d.B = in.Range(0, 3);
  d.D = in.Range(0, 6);
  d.L = in.Range(0, 40);
  d.N = in.Range(0, 9);
  d.G = in.Range(0, 3);
  d.H = in.Range(0, 4);
  d.P = in.Range(0, 5);
  d.K = in.Range(0, 9);
  d.E = in.Range(0, 12);
  d.M = in.Range(0, 5);
  d.S = in.Range(0, 4);
  d.T = in.Range(0, 4);
  d.I = in.Range(0, 20);
  d.O = in.Range(0, 20);
  CallBuilder c(in, d);
  ssmkit_status status;
  switch (op) {
    case 0:
      status = ScanCall(in, c, false);
      break;
    case 1:
      status = ScanCall(in, c, true);
      break;
    case 2:
      status = SsdCall(in, c, false);
      break;
    case 3:
      status = SsdCall(in, c, true);
      break;
    case 4:
      status = StateUpdateCall(in, c);
      break;
    case 5:
    case 6:
    case 7:
      status = Conv1dCall(in, c, op - 5);
      break;
    case 8:
    case 9:
    case 10:
    case 11:
      status = NormCall(in, c, op - 8);
      break;
    case 12:
      status = LinearCall(in, c, false);
      break;
    case 13:
    case 14:
      status = LinearCall(in, c, true);
      break;
    default:
      status = MixerCall(c);
      break;
  }
  // A refusal says why.
  const char* message = ssmkit_last_error();
  if (status != SSMKIT_OK && (message == nullptr || message[0] == '\0')) std::abort();
  return 0;
}
