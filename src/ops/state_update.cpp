// selective_state_update: argument checking (the state's rank picks Mamba-1 or Mamba-2), the
// state_batch_indices values checked before anything is written, then dispatch to the
// backend. Every rule here has a test in tests/state_update_errors_test.cpp.
#include "ssmkit/state_update.hpp"

#include <new>
#include <string>
#include <vector>

#include "cpu/state_update.hpp"
#include "cuda/backend.hpp"
#include "ops/check.hpp"
#include "params/state_update_params.hpp"
#include "ssmkit/op_tensors.hpp"

namespace ssmkit {
namespace {

constexpr const char* kOp = "selective_state_update";

// The names of the dimensions in messages: Mamba-1 (B, D), Mamba-2 (B, H, P).
struct Form {
  bool mamba2;
  const char* x;       // "(B, D)" | "(B, H, P)"
  const char* dt;      // "(B, D)" | "(B, H)"
  const char* head;    // "(D)" | "(H)"
  const char* groups;  // "D" | "H": what G must divide
};

constexpr Form kMamba1{false, "(B, D)", "(B, D)", "(D)", "D"};
constexpr Form kMamba2{true, "(B, H, P)", "(B, H)", "(H)", "H"};

HeadsView MakeHeadsView(const Tensor& t) {
  if (!t.defined()) return {};
  return {t.data, t.dtype, t.strides[0], t.strides[1]};
}

// B or C: (B, N) or (B, G, N) with G dividing the head count.
Status CheckBC(const char* name, const Tensor& t, const Form& f, int64_t batch, int64_t heads,
               int64_t dstate, GroupsView* v) {
  if (!t.defined()) return check::Mismatch(kOp, name, "a tensor (B, N) or (B, G, N)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, name, t, {2, 3}));
  const auto dtypes = {DType::kF32, DType::kBF16};
  if (t.rank == 2) {
    SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, name, t, {"(B, N)", {batch, dstate}}, dtypes));
    *v = {t.data, t.dtype, 1, t.strides[0], 0};
    return Status::Ok();
  }
  const int64_t groups = t.shape[1];
  if (groups < 1 || heads % groups != 0) {
    return check::Mismatch(
        kOp, name,
        std::string("a group count G dividing ") + f.groups + " = " + std::to_string(heads),
        "G = " + std::to_string(groups));
  }
  SSMKIT_RETURN_IF_ERROR(
      check::Tensor(kOp, name, t, {"(B, G, N)", {batch, groups, dstate}}, dtypes));
  *v = {t.data, t.dtype, groups, t.strides[0], t.strides[1]};
  return Status::Ok();
}

// Every non-negative index below Bs, and no state row named twice: two batch rows updating
// one state row would race. `first_row` is per thread and reset after use, so no allocation
// once it has grown to Bs (the decode path).
Status CheckIndexValues(const StateUpdateParams& p) {
  thread_local std::vector<int64_t> first_row;
  if (static_cast<int64_t>(first_row.size()) < p.state_batch) {
    first_row.assign(static_cast<size_t>(p.state_batch), -1);
  }
  Status status = Status::Ok();
  int64_t b = 0;
  for (; b < p.batch; ++b) {
    const int64_t s = p.state_batch_indices[b * p.indices_stride];
    if (s < 0) continue;
    if (s >= p.state_batch) {
      status = check::Mismatch(kOp, "state_batch_indices",
                               "indices < Bs = " + std::to_string(p.state_batch) +
                                   " (the state's batch), or negative to skip a row",
                               std::to_string(s) + " at row " + std::to_string(b));
      break;
    }
    if (first_row[s] >= 0) {
      status = check::Mismatch(kOp, "state_batch_indices", "distinct non-negative indices",
                               std::to_string(s) + " at rows " + std::to_string(first_row[s]) +
                                   " and " + std::to_string(b));
      break;
    }
    first_row[s] = b;
  }
  for (int64_t r = 0; r < b; ++r) {  // reset what this call marked
    const int64_t s = p.state_batch_indices[r * p.indices_stride];
    if (s >= 0 && s < p.state_batch) first_row[s] = -1;
  }
  return status;
}

Status CheckAll(const StateUpdateInputs& in, const Tensor& state, const Tensor& out, Device device,
                StateUpdateParams* p) {
  if (!state.defined()) {
    return check::Mismatch(kOp, "state", "a tensor (Bs, D, N) or (Bs, H, P, N)", "null");
  }
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "state", state, {3, 4}));
  const Form& f = state.rank == 4 ? kMamba2 : kMamba1;
  const int64_t state_batch = state.shape[0], heads = state.shape[1];
  const int64_t headdim = f.mamba2 ? state.shape[2] : 1, dstate = state.shape[state.rank - 1];
  if (state_batch < 1 || heads < 1 || headdim < 1) {
    return check::Mismatch(kOp, "state", "every dimension >= 1", state.shape_string());
  }
  if (dstate < 1 || dstate > kMaxStateUpdateStateSize) {
    return check::Mismatch(kOp, "state",
                           "state size N in [1, " + std::to_string(kMaxStateUpdateStateSize) + "]",
                           "N = " + std::to_string(dstate));
  }
  if (!in.x.defined()) return check::Mismatch(kOp, "x", std::string("a tensor ") + f.x, "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "x", in.x, {f.mamba2 ? 3 : 2}));
  const int64_t batch = in.x.shape[0];
  if (batch < 1) return check::Mismatch(kOp, "x", "batch B >= 1", "B = " + std::to_string(batch));

  const auto io_dtypes = {DType::kF32, DType::kBF16};
  const check::ShapeSpec x_spec = f.mamba2 ? check::ShapeSpec{f.x, {batch, heads, headdim}}
                                           : check::ShapeSpec{f.x, {batch, heads}};
  const check::ShapeSpec head_spec{f.head, {heads}};
  // Without indices the state's batch is B; with them it is the pool's size Bs.
  const bool indexed = in.state_batch_indices.defined();
  const int64_t sb = indexed ? state_batch : batch;
  const check::ShapeSpec state_spec =
      f.mamba2 ? check::ShapeSpec{indexed ? "(Bs, H, P, N)" : "(B, H, P, N)",
                                  {sb, heads, headdim, dstate}}
               : check::ShapeSpec{indexed ? "(Bs, D, N)" : "(B, D, N)", {sb, heads, dstate}};
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "state", state, state_spec, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(check::Optional(kOp, "state_batch_indices", in.state_batch_indices,
                                         {"(B)", {batch}}, {DType::kI32}));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "x", in.x, x_spec, io_dtypes));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "dt", in.dt, {f.dt, {batch, heads}}, io_dtypes));
  if (f.mamba2) {
    SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "A", in.A, head_spec, {DType::kF32}));
  } else {
    SSMKIT_RETURN_IF_ERROR(
        check::Tensor(kOp, "A", in.A, {"(D, N)", {heads, dstate}}, {DType::kF32}));
  }
  SSMKIT_RETURN_IF_ERROR(CheckBC("B", in.B, f, batch, heads, dstate, &p->B));
  SSMKIT_RETURN_IF_ERROR(CheckBC("C", in.C, f, batch, heads, dstate, &p->C));
  if (in.D.defined() && f.mamba2) {
    SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "D", in.D, {1, 2}));
    const check::ShapeSpec spec =
        in.D.rank == 1 ? head_spec : check::ShapeSpec{"(H, P)", {heads, headdim}};
    SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "D", in.D, spec, {DType::kF32}));
  } else {
    SSMKIT_RETURN_IF_ERROR(check::Optional(kOp, "D", in.D, head_spec, {DType::kF32}));
  }
  SSMKIT_RETURN_IF_ERROR(check::Optional(kOp, "z", in.z, x_spec, io_dtypes));
  SSMKIT_RETURN_IF_ERROR(check::Optional(kOp, "dt_bias", in.dt_bias, head_spec, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "out", out, x_spec, {in.x.dtype}));

  p->batch = batch;
  p->state_batch = state_batch;
  p->heads = heads;
  p->headdim = headdim;
  p->dstate = dstate;
  p->dt_softplus = in.dt_softplus;
  p->a_per_state = !f.mamba2;
  p->x = MakeHeadsView(in.x);
  p->z = MakeHeadsView(in.z);
  p->out = MakeHeadsView(out);
  p->dt = MakeHeadsView(in.dt);
  p->A = {static_cast<const float*>(in.A.data), in.A.strides[0], f.mamba2 ? 0 : 1};
  if (in.D.defined()) {
    p->D = {static_cast<const float*>(in.D.data), in.D.strides[0], in.D.rank == 2 ? 1 : 0};
  }
  if (in.dt_bias.defined())
    p->dt_bias = {static_cast<const float*>(in.dt_bias.data), in.dt_bias.strides[0], 0};
  p->state = static_cast<float*>(state.data);
  p->state_stride_batch = state.strides[0];
  p->state_stride_head = state.strides[1];
  p->state_stride_p = f.mamba2 ? state.strides[2] : 0;
  if (in.state_batch_indices.defined()) {
    p->state_batch_indices = static_cast<const int32_t*>(in.state_batch_indices.data);
    p->indices_stride = in.state_batch_indices.strides[0];
    // Device memory is not read on the host (that would synchronise every decode step): the
    // CUDA kernel skips rows whose index is negative or >= Bs, and distinctness is the
    // caller's promise there (docs/cuda.md).
    if (device == Device::kCpu) SSMKIT_RETURN_IF_ERROR(CheckIndexValues(*p));
  }
  return Status::Ok();
}

}  // namespace

Status SelectiveStateUpdate(const StateUpdateInputs& inputs, const Tensor& state,
                            const Tensor& out) {
  StateUpdateParams p;
  Device device;
  SSMKIT_RETURN_IF_ERROR(
      check::OpDevices<StateUpdateTensors>(kOp, inputs, {{"state", state}, {"out", out}}, &device));
  try {
    SSMKIT_RETURN_IF_ERROR(CheckAll(inputs, state, out, device, &p));
    if (device == Device::kCuda) return cuda::SelectiveStateUpdate(p);
    return cpu::SelectiveStateUpdate(p);
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory(std::string(kOp) + ": could not allocate the workspace");
  }
}

}  // namespace ssmkit
