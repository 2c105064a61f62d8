// selective_scan: argument checking, then dispatch to the backend. Every rule here has a
// test in tests/selective_scan_errors_test.cpp.
#include "ssmkit/selective_scan.hpp"

#include <new>
#include <string>

#include "cpu/selective_scan.hpp"
#include "cuda/backend.hpp"
#include "ops/check.hpp"
#include "ops/varlen.hpp"
#include "params/selective_scan_params.hpp"
#include "ssmkit/op_tensors.hpp"

namespace ssmkit {
namespace {

constexpr const char* kOp = "selective_scan";

SeqView MakeSeqView(const Tensor& t) {
  if (!t.defined()) return {};
  return {t.data, t.dtype, t.strides[0], t.strides[1]};
}

F32View MakeF32View(const Tensor& t) {
  F32View v;
  if (!t.defined()) return v;
  v.data = static_cast<float*>(t.data);
  if (t.rank == 1) v.stride_dim = t.strides[0];
  if (t.rank == 2) v = {v.data, 0, t.strides[0], t.strides[1]};
  if (t.rank == 3) v = {v.data, t.strides[0], t.strides[1], t.strides[2]};
  return v;
}

ChunkStatesView MakeChunkStatesView(const Tensor& t, int64_t interval) {
  if (!t.defined()) return {};
  return {static_cast<float*>(t.data),
          interval,
          t.strides[0],
          t.strides[1],
          t.strides[2],
          t.strides[3]};
}

BCView MakeBCView(const Tensor& t) {
  BCView v;
  v.data = t.data;
  v.dtype = t.dtype;
  if (t.rank == 2) {  // constant (D, N)
    v.groups = t.shape[0];
    v.stride_group = t.strides[0];
    v.stride_state = t.strides[1];
  } else if (t.rank == 3) {  // (B, N, L)
    v.is_variable = true;
    v.stride_batch = t.strides[0];
    v.stride_state = t.strides[1];
    v.stride_time = t.strides[2];
  } else {  // (B, G, N, L)
    v.is_variable = true;
    v.groups = t.shape[1];
    v.stride_batch = t.strides[0];
    v.stride_group = t.strides[1];
    v.stride_state = t.strides[2];
    v.stride_time = t.strides[3];
  }
  return v;
}

// Checks B or C, whose rank picks its form.
Status CheckBC(const char* name, const Tensor& t, int64_t batch, int64_t dim, int64_t dstate,
               int64_t seqlen, std::initializer_list<DType> dtypes) {
  if (!t.defined()) {
    return check::Mismatch(kOp, name, "a tensor (D, N), (B, N, L) or (B, G, N, L)", "null");
  }
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, name, t, {2, 3, 4}));
  if (t.rank == 2) return check::Tensor(kOp, name, t, {"(D, N)", {dim, dstate}}, dtypes);
  if (t.rank == 3)
    return check::Tensor(kOp, name, t, {"(B, N, L)", {batch, dstate, seqlen}}, dtypes);
  const int64_t groups = t.shape[1];
  if (groups < 1 || dim % groups != 0) {
    return check::Mismatch(kOp, name, "a group count G dividing D = " + std::to_string(dim),
                           "G = " + std::to_string(groups));
  }
  return check::Tensor(kOp, name, t, {"(B, G, N, L)", {batch, groups, dstate, seqlen}}, dtypes);
}

// Checks the inputs shared by forward and backward and fills the input half of `p`.
Status CheckInputs(const SelectiveScanInputs& in, Device device, SelectiveScanParams* p) {
  if (!in.u.defined()) return check::Mismatch(kOp, "u", "a tensor (B, D, L)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "u", in.u, {3}));
  if (!in.A.defined()) return check::Mismatch(kOp, "A", "a tensor (D, N)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "A", in.A, {2}));
  const int64_t batch = in.u.shape[0], dim = in.u.shape[1], seqlen = in.u.shape[2];
  const int64_t dstate = in.A.shape[1];
  if (batch < 1) return check::Mismatch(kOp, "u", "batch B >= 1", "B = " + std::to_string(batch));
  if (dim < 1) return check::Mismatch(kOp, "u", "channels D >= 1", "D = " + std::to_string(dim));
  if (seqlen < 1) {
    return check::Mismatch(kOp, "u", "sequence length L >= 1", "L = " + std::to_string(seqlen));
  }
  if (dstate < 1 || dstate > kMaxScanStateSize) {
    return check::Mismatch(kOp, "A",
                           "state size N in [1, " + std::to_string(kMaxScanStateSize) + "]",
                           "N = " + std::to_string(dstate));
  }
  // f16 is served by the CUDA backend only.
  const std::initializer_list<DType> cpu_dtypes = {DType::kF32, DType::kBF16};
  const std::initializer_list<DType> cuda_dtypes = {DType::kF32, DType::kBF16, DType::kF16};
  const std::initializer_list<DType> seq_dtypes =
      device == Device::kCuda ? cuda_dtypes : cpu_dtypes;
  const check::ShapeSpec seq{"(B, D, L)", {batch, dim, seqlen}};
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "u", in.u, seq, seq_dtypes));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "delta", in.delta, seq, seq_dtypes));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "A", in.A, {"(D, N)", {dim, dstate}}, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(CheckBC("B", in.B, batch, dim, dstate, seqlen, seq_dtypes));
  SSMKIT_RETURN_IF_ERROR(CheckBC("C", in.C, batch, dim, dstate, seqlen, seq_dtypes));
  SSMKIT_RETURN_IF_ERROR(check::Optional(kOp, "D", in.D, {"(D)", {dim}}, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(check::Optional(kOp, "z", in.z, seq, seq_dtypes));
  SSMKIT_RETURN_IF_ERROR(
      check::Optional(kOp, "delta_bias", in.delta_bias, {"(D)", {dim}}, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(check::PackedSequences(kOp, in.seq_idx, in.cu_seqlens, batch, seqlen,
                                                device, &p->seq_idx, &p->cu_seqlens));
  const bool per_sequence = check::PerSequence(in.initial_state, p->cu_seqlens, batch);
  const check::ShapeSpec h0_shape =
      per_sequence ? check::ShapeSpec{"(S, D, N)", {p->cu_seqlens.nseqs, dim, dstate}}
      : p->cu_seqlens.data
          ? check::ShapeSpec{"(B, D, N) (or (S, D, N) with cu_seqlens)", {batch, dim, dstate}}
          : check::ShapeSpec{"(B, D, N)", {batch, dim, dstate}};
  SSMKIT_RETURN_IF_ERROR(
      check::Optional(kOp, "initial_state", in.initial_state, h0_shape, {DType::kF32}));
  p->batch = batch;
  p->dim = dim;
  p->seqlen = seqlen;
  p->dstate = dstate;
  p->delta_softplus = in.delta_softplus;
  p->u = MakeSeqView(in.u);
  p->delta = MakeSeqView(in.delta);
  p->z = MakeSeqView(in.z);
  p->B = MakeBCView(in.B);
  p->C = MakeBCView(in.C);
  p->A = MakeF32View(in.A);
  p->D = MakeF32View(in.D);
  p->delta_bias = MakeF32View(in.delta_bias);
  p->initial_state = MakeF32View(in.initial_state);
  if (per_sequence) p->seq_initial_states = p->initial_state;
  return Status::Ok();
}

// A per-sequence state output or gradient (varlen_states, dvarlen_states).
Status CheckVarlenStates(const char* name, const Tensor& t, const SelectiveScanParams& p,
                         F32View* view) {
  SSMKIT_RETURN_IF_ERROR(check::VarlenStates(kOp, name, t, p.cu_seqlens,
                                             {"(S, D, N)", {p.cu_seqlens.nseqs, p.dim, p.dstate}}));
  *view = MakeF32View(t);
  return Status::Ok();
}

Status CheckOptions(const SelectiveScanOptions& options) {
  const int a = static_cast<int>(options.algorithm);
  if (a < 0 || a > static_cast<int>(ScanAlgorithm::kLogSpace)) {
    return check::Mismatch(kOp, "options.algorithm", "a ScanAlgorithm value 0..4",
                           std::to_string(a));
  }
  if (options.chunk_length < 0) {
    return check::Mismatch(kOp, "options.chunk_length", "0 (default) or a positive length",
                           std::to_string(options.chunk_length));
  }
  return Status::Ok();
}

int64_t ChunkLength(const SelectiveScanOptions& options) {
  return options.chunk_length > 0 ? options.chunk_length : kDefaultScanChunkLength;
}

// Checks the optional chunk states against the checked problem in `p` and sets p->chunk_states.
Status CheckChunkStates(const Tensor& t, const SelectiveScanOptions& options, Device device,
                        SelectiveScanParams* p) {
  if (t.defined() && device == Device::kCuda) {
    return check::Mismatch(kOp, "chunk_states", "undefined on the CUDA backend (CPU only for now)",
                           "a CUDA tensor");
  }
  const int64_t chunks = SelectiveScanChunkCount(p->seqlen, options);
  SSMKIT_RETURN_IF_ERROR(check::Optional(
      kOp, "chunk_states", t,
      {"(B, D, K, N), K = ceil(L / Q)", {p->batch, p->dim, chunks, p->dstate}}, {DType::kF32}));
  p->chunk_states = MakeChunkStatesView(t, ChunkLength(options));
  return Status::Ok();
}

}  // namespace

const char* ScanAlgorithmName(ScanAlgorithm algorithm) {
  switch (algorithm) {
    case ScanAlgorithm::kSequential:
      return "sequential";
    case ScanAlgorithm::kChunked:
      return "chunked";
    case ScanAlgorithm::kBlelloch:
      return "blelloch";
    case ScanAlgorithm::kHillisSteele:
      return "hillis-steele";
    case ScanAlgorithm::kLogSpace:
      return "log-space";
  }
  return "unknown";
}

Status ParseScanAlgorithm(std::string_view name, ScanAlgorithm* algorithm) {
  for (int a = 0; a <= static_cast<int>(ScanAlgorithm::kLogSpace); ++a) {
    if (name == ScanAlgorithmName(static_cast<ScanAlgorithm>(a))) {
      *algorithm = static_cast<ScanAlgorithm>(a);
      return Status::Ok();
    }
  }
  return check::Mismatch("scan algorithm", "name",
                         "sequential, chunked, blelloch, hillis-steele or log-space",
                         "\"" + std::string(name) + "\"");
}

int64_t SelectiveScanChunkCount(int64_t seqlen, const SelectiveScanOptions& options) {
  const int64_t Q = ChunkLength(options);
  return (seqlen + Q - 1) / Q;
}

Status SelectiveScanForward(const SelectiveScanInputs& inputs, const Tensor& out,
                            const Tensor& final_state, const SelectiveScanOptions& options) {
  return SelectiveScanForward(inputs, SelectiveScanOutputs{out, final_state, {}, {}}, options);
}

Status SelectiveScanForward(const SelectiveScanInputs& inputs, const Tensor& out,
                            const Tensor& final_state, const Tensor& chunk_states,
                            const SelectiveScanOptions& options) {
  return SelectiveScanForward(inputs, SelectiveScanOutputs{out, final_state, chunk_states, {}},
                              options);
}

Status SelectiveScanForward(const SelectiveScanInputs& inputs, const SelectiveScanOutputs& outputs,
                            const SelectiveScanOptions& options) {
  const Tensor& out = outputs.out;
  SelectiveScanParams p;
  Device device;
  SSMKIT_RETURN_IF_ERROR(
      check::OpDevices<SelectiveScanTensors>(kOp, inputs,
                                             {{"out", out},
                                              {"final_state", outputs.final_state},
                                              {"chunk_states", outputs.chunk_states},
                                              {"varlen_states", outputs.varlen_states}},
                                             &device));
  SSMKIT_RETURN_IF_ERROR(CheckOptions(options));
  SSMKIT_RETURN_IF_ERROR(CheckInputs(inputs, device, &p));
  SSMKIT_RETURN_IF_ERROR(
      check::Tensor(kOp, "out", out, {"(B, D, L)", {p.batch, p.dim, p.seqlen}}, {inputs.u.dtype}));
  SSMKIT_RETURN_IF_ERROR(check::Optional(kOp, "final_state", outputs.final_state,
                                         {"(B, D, N)", {p.batch, p.dim, p.dstate}}, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(CheckChunkStates(outputs.chunk_states, options, device, &p));
  SSMKIT_RETURN_IF_ERROR(
      CheckVarlenStates("varlen_states", outputs.varlen_states, p, &p.varlen_states));
  p.out = MakeSeqView(out);
  p.final_state = MakeF32View(outputs.final_state);
  if (device == Device::kCuda) return cuda::SelectiveScanForward(p);
  return check::RunGuarded(kOp, [&] { return cpu::SelectiveScanForward(p, options); });
}

Status SelectiveScanBackward(const SelectiveScanInputs& inputs, const Tensor& dout,
                             const Tensor& dfinal_state, const SelectiveScanGrads& grads,
                             const SelectiveScanOptions& options) {
  return SelectiveScanBackward(inputs, SelectiveScanOutputGrads{dout, dfinal_state, {}}, Tensor{},
                               grads, options);
}

Status SelectiveScanBackward(const SelectiveScanInputs& inputs, const Tensor& dout,
                             const Tensor& dfinal_state, const Tensor& chunk_states,
                             const SelectiveScanGrads& grads, const SelectiveScanOptions& options) {
  return SelectiveScanBackward(inputs, SelectiveScanOutputGrads{dout, dfinal_state, {}},
                               chunk_states, grads, options);
}

Status SelectiveScanBackward(const SelectiveScanInputs& inputs,
                             const SelectiveScanOutputGrads& output_grads,
                             const Tensor& chunk_states, const SelectiveScanGrads& grads,
                             const SelectiveScanOptions& options) {
  const Tensor& dout = output_grads.dout;
  const Tensor& dfinal_state = output_grads.dfinal_state;
  SelectiveScanBwdParams p;
  Device device;
  SSMKIT_RETURN_IF_ERROR(
      check::OpDevices<SelectiveScanTensors>(kOp, inputs,
                                             {{"dout", dout},
                                              {"dfinal_state", dfinal_state},
                                              {"dvarlen_states", output_grads.dvarlen_states},
                                              {"chunk_states", chunk_states}},
                                             grads, &device));
  SSMKIT_RETURN_IF_ERROR(CheckOptions(options));
  SSMKIT_RETURN_IF_ERROR(CheckInputs(inputs, device, &p));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "dout", dout, {"(B, D, L)", {p.batch, p.dim, p.seqlen}},
                                       {inputs.u.dtype}));
  SSMKIT_RETURN_IF_ERROR(check::Optional(kOp, "dfinal_state", dfinal_state,
                                         {"(B, D, N)", {p.batch, p.dim, p.dstate}}, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(
      CheckVarlenStates("dvarlen_states", output_grads.dvarlen_states, p, &p.dvarlen_states));
  SSMKIT_RETURN_IF_ERROR(check::GradsLike(kOp, grads, SelectiveScanTensors::grads, inputs));
  SSMKIT_RETURN_IF_ERROR(CheckChunkStates(chunk_states, options, device, &p));
  p.dout = MakeSeqView(dout);
  p.dfinal_state = MakeF32View(dfinal_state);
  p.du = MakeSeqView(grads.du);
  p.ddelta = MakeSeqView(grads.ddelta);
  p.dz = MakeSeqView(grads.dz);
  if (grads.dB.defined()) p.dB = MakeBCView(grads.dB);
  if (grads.dC.defined()) p.dC = MakeBCView(grads.dC);
  p.dA = MakeF32View(grads.dA);
  p.dD = MakeF32View(grads.dD);
  p.ddelta_bias = MakeF32View(grads.ddelta_bias);
  p.dinitial_state = MakeF32View(grads.dinitial_state);
  if (p.seq_initial_states.data) p.dseq_initial_states = p.dinitial_state;
  if (device == Device::kCuda) return cuda::SelectiveScanBackward(p);
  return check::RunGuarded(kOp, [&] { return cpu::SelectiveScanBackward(p, options); });
}

}  // namespace ssmkit
