// ssd (mamba_chunk_scan_combined): argument checking, then dispatch to the backend. Every
// rule here has a test in tests/ssd_errors_test.cpp.
#include "ssmkit/ssd.hpp"

#include <cmath>
#include <new>
#include <string>

#include "cpu/ssd.hpp"
#include "cuda/backend.hpp"
#include "ops/check.hpp"
#include "ops/varlen.hpp"
#include "params/ssd_params.hpp"
#include "ssmkit/op_tensors.hpp"

namespace ssmkit {
namespace {

constexpr const char* kOp = "ssd";
constexpr int64_t kDefaultChunkSize = 256;  // mamba_ssm's usual chunk_size

SsdSeqView MakeSeqView(const Tensor& t) {
  if (!t.defined()) return {};
  return {t.data, t.dtype, t.strides[0], t.strides[1], t.strides[2]};
}

SsdDtView MakeDtView(const Tensor& t) {
  if (!t.defined()) return {};
  return {t.data, t.dtype, t.strides[0], t.strides[1]};
}

SsdStateView MakeStateView(const Tensor& t) {
  if (!t.defined()) return {};
  return {static_cast<float*>(t.data), t.strides[0], t.strides[1], t.strides[2]};
}

// (H) or (H, P); a size-1 dimension's stride is free, so it is not read.
SsdHeadView MakeHeadView(const Tensor& t) {
  if (!t.defined()) return {};
  SsdHeadView v{static_cast<float*>(t.data), t.shape[0] > 1 ? t.strides[0] : 0, 0};
  if (t.rank == 2) v.stride_p = t.shape[1] > 1 ? t.strides[1] : 0;
  return v;
}

std::string Dim(const char* name, int64_t v) {
  return std::string(name) + " = " + std::to_string(v);
}

// Checks the inputs shared by forward and backward and fills the input half of `p`.
Status CheckInputs(const SsdInputs& in, Device device, SsdParams* p) {
  if (!in.x.defined()) return check::Mismatch(kOp, "x", "a tensor (B, L, H, P)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "x", in.x, {4}));
  if (!in.B.defined()) return check::Mismatch(kOp, "B", "a tensor (B, L, G, N)", "null");
  SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "B", in.B, {4}));
  const int64_t batch = in.x.shape[0], seqlen = in.x.shape[1], nheads = in.x.shape[2];
  const int64_t headdim = in.x.shape[3], ngroups = in.B.shape[2], dstate = in.B.shape[3];
  if (batch < 1) return check::Mismatch(kOp, "x", "batch B >= 1", Dim("B", batch));
  if (seqlen < 1) return check::Mismatch(kOp, "x", "sequence length L >= 1", Dim("L", seqlen));
  if (nheads < 1) return check::Mismatch(kOp, "x", "heads H >= 1", Dim("H", nheads));
  if (headdim < 1) return check::Mismatch(kOp, "x", "head dim P >= 1", Dim("P", headdim));
  if (dstate < 1) return check::Mismatch(kOp, "B", "state size N >= 1", Dim("N", dstate));
  if (ngroups < 1 || nheads % ngroups != 0) {
    return check::Mismatch(kOp, "B", "a group count G dividing H = " + std::to_string(nheads),
                           Dim("G", ngroups));
  }
  const auto seq_dtypes = {DType::kF32, DType::kBF16};
  const check::ShapeSpec xshape{"(B, L, H, P)", {batch, seqlen, nheads, headdim}};
  const check::ShapeSpec bcshape{"(B, L, G, N)", {batch, seqlen, ngroups, dstate}};
  const check::ShapeSpec hshape{"(H)", {nheads}};
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "x", in.x, xshape, seq_dtypes));
  SSMKIT_RETURN_IF_ERROR(
      check::Tensor(kOp, "dt", in.dt, {"(B, L, H)", {batch, seqlen, nheads}}, seq_dtypes));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "A", in.A, hshape, {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "B", in.B, bcshape, seq_dtypes));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "C", in.C, bcshape, seq_dtypes));
  if (in.D.defined()) {
    SSMKIT_RETURN_IF_ERROR(check::RankIn(kOp, "D", in.D, {1, 2}));
    if (in.D.rank == 1) {
      SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "D", in.D, hshape, {DType::kF32}));
    } else {
      SSMKIT_RETURN_IF_ERROR(
          check::Tensor(kOp, "D", in.D, {"(H, P)", {nheads, headdim}}, {DType::kF32}));
    }
  }
  SSMKIT_RETURN_IF_ERROR(check::Optional(kOp, "z", in.z, xshape, seq_dtypes));
  SSMKIT_RETURN_IF_ERROR(check::Optional(kOp, "dt_bias", in.dt_bias, hshape, {DType::kF32}));
  SeqIdxView seq_idx;
  SSMKIT_RETURN_IF_ERROR(check::PackedSequences(kOp, in.seq_idx, in.cu_seqlens, batch, seqlen,
                                                device, &seq_idx, &p->cu_seqlens));
  if (p->cu_seqlens.data && device == Device::kCuda) {
    return Status::Unsupported(std::string(kOp) +
                               ": cu_seqlens: not on the CUDA backend yet (pass seq_idx for the "
                               "resets; varlen_states and per-sequence initial states are CPU "
                               "only)");
  }
  const int64_t S = p->cu_seqlens.nseqs;
  p->initial_states_per_sequence = check::PerSequence(in.initial_states, p->cu_seqlens, batch);
  const check::ShapeSpec h0_shape =
      p->initial_states_per_sequence
          ? check::ShapeSpec{"(S, H, P, N)", {S, nheads, headdim, dstate}}
      : p->cu_seqlens.data ? check::ShapeSpec{"(B, H, P, N) (or (S, H, P, N) with cu_seqlens)",
                                              {batch, nheads, headdim, dstate}}
                           : check::ShapeSpec{"(B, H, P, N)", {batch, nheads, headdim, dstate}};
  SSMKIT_RETURN_IF_ERROR(
      check::Optional(kOp, "initial_states", in.initial_states, h0_shape, {DType::kF32}));
  if (std::isnan(in.dt_min) || std::isnan(in.dt_max) || in.dt_min > in.dt_max) {
    return check::Mismatch(
        kOp, "dt_limit", "dt_min <= dt_max (neither NaN)",
        "(" + std::to_string(in.dt_min) + ", " + std::to_string(in.dt_max) + ")");
  }
  p->batch = batch;
  p->seqlen = seqlen;
  p->nheads = nheads;
  p->headdim = headdim;
  p->ngroups = ngroups;
  p->dstate = dstate;
  p->dt_softplus = in.dt_softplus;
  p->dt_min = in.dt_min;
  p->dt_max = in.dt_max;
  p->x = MakeSeqView(in.x);
  p->dt = MakeDtView(in.dt);
  p->A = MakeHeadView(in.A);
  p->B = MakeSeqView(in.B);
  p->C = MakeSeqView(in.C);
  p->D = MakeHeadView(in.D);
  p->d_per_channel = in.D.defined() && in.D.rank == 2;
  p->z = MakeSeqView(in.z);
  p->dt_bias = MakeHeadView(in.dt_bias);
  p->initial_states = MakeStateView(in.initial_states);
  // With cu_seqlens the sequences are run one by one, so seq_idx (checked to agree) is not
  // needed.
  if (!p->cu_seqlens.data) {
    p->seq_idx = seq_idx.data;
    p->seq_idx_stride_batch = seq_idx.stride_batch;
    p->seq_idx_stride_seq = seq_idx.stride_seq;
  }
  return Status::Ok();
}

// A per-sequence state output or gradient (varlen_states, dvarlen_states).
Status CheckVarlenStates(const char* name, const Tensor& t, const SsdParams& p,
                         SsdStateView* view) {
  SSMKIT_RETURN_IF_ERROR(
      check::VarlenStates(kOp, name, t, p.cu_seqlens,
                          {"(S, H, P, N)", {p.cu_seqlens.nseqs, p.nheads, p.headdim, p.dstate}}));
  *view = MakeStateView(t);
  return Status::Ok();
}

// Resolves the options into p->chunk_size and the algorithm to run.
Status CheckOptions(const SsdOptions& options, SsdParams* p, SsdAlgorithm* algorithm) {
  const int a = static_cast<int>(options.algorithm);
  if (a < 0 || a > static_cast<int>(SsdAlgorithm::kSequential)) {
    return check::Mismatch(kOp, "options.algorithm", "an SsdAlgorithm value 0..2",
                           std::to_string(a));
  }
  if (options.chunk_size < 0) {
    return check::Mismatch(kOp, "options.chunk_size", "0 (default) or a positive length",
                           std::to_string(options.chunk_size));
  }
  p->chunk_size = options.chunk_size > 0 ? options.chunk_size : kDefaultChunkSize;
  // kAuto runs the sequential algorithm: the chunked one lost to it at every shape measured on
  // the CPU (docs/ops/ssd.md, "What kAuto runs"), so there is no shape rule to apply.
  *algorithm =
      options.algorithm == SsdAlgorithm::kAuto ? SsdAlgorithm::kSequential : options.algorithm;
  return Status::Ok();
}

}  // namespace

const char* SsdAlgorithmName(SsdAlgorithm algorithm) {
  switch (algorithm) {
    case SsdAlgorithm::kAuto:
      return "auto";
    case SsdAlgorithm::kChunked:
      return "chunked";
    case SsdAlgorithm::kSequential:
      return "sequential";
  }
  return "unknown";
}

Status ParseSsdAlgorithm(std::string_view name, SsdAlgorithm* algorithm) {
  for (int a = 0; a <= static_cast<int>(SsdAlgorithm::kSequential); ++a) {
    if (name == SsdAlgorithmName(static_cast<SsdAlgorithm>(a))) {
      *algorithm = static_cast<SsdAlgorithm>(a);
      return Status::Ok();
    }
  }
  std::string given = "\"";  // appended piecewise: GCC 12 misreports "x" + string as -Wrestrict
  given.append(name);
  given += '"';
  return check::Mismatch("ssd algorithm", "name", "auto, chunked or sequential", given);
}

Status SsdForward(const SsdInputs& inputs, const Tensor& out, const Tensor& final_states,
                  const SsdOptions& options) {
  return SsdForward(inputs, SsdOutputs{out, final_states, {}}, options);
}

Status SsdForward(const SsdInputs& inputs, const SsdOutputs& outputs, const SsdOptions& options) {
  const Tensor& out = outputs.out;
  SsdParams p;
  SsdAlgorithm algorithm;
  Device device;
  SSMKIT_RETURN_IF_ERROR(check::OpDevices<SsdTensors>(kOp, inputs,
                                                      {{"out", out},
                                                       {"final_states", outputs.final_states},
                                                       {"varlen_states", outputs.varlen_states}},
                                                      &device));
  SSMKIT_RETURN_IF_ERROR(CheckInputs(inputs, device, &p));
  SSMKIT_RETURN_IF_ERROR(CheckOptions(options, &p, &algorithm));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "out", out,
                                       {"(B, L, H, P)", {p.batch, p.seqlen, p.nheads, p.headdim}},
                                       {inputs.x.dtype}));
  SSMKIT_RETURN_IF_ERROR(check::Optional(kOp, "final_states", outputs.final_states,
                                         {"(B, H, P, N)", {p.batch, p.nheads, p.headdim, p.dstate}},
                                         {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(
      CheckVarlenStates("varlen_states", outputs.varlen_states, p, &p.varlen_states));
  p.out = MakeSeqView(out);
  p.final_states = MakeStateView(outputs.final_states);
  if (device == Device::kCuda) return cuda::SsdForward(p);
  return check::RunGuarded(kOp, [&] { return cpu::SsdForward(p, algorithm); });
}

Status SsdBackward(const SsdInputs& inputs, const Tensor& dout, const Tensor& dfinal_states,
                   const SsdGrads& grads, const SsdOptions& options) {
  return SsdBackward(inputs, SsdOutputGrads{dout, dfinal_states, {}}, grads, options);
}

Status SsdBackward(const SsdInputs& inputs, const SsdOutputGrads& output_grads,
                   const SsdGrads& grads, const SsdOptions& options) {
  const Tensor& dout = output_grads.dout;
  const Tensor& dfinal_states = output_grads.dfinal_states;
  SsdBwdParams p;
  SsdAlgorithm algorithm;
  Device device;
  SSMKIT_RETURN_IF_ERROR(
      check::OpDevices<SsdTensors>(kOp, inputs,
                                   {{"dout", dout},
                                    {"dfinal_states", dfinal_states},
                                    {"dvarlen_states", output_grads.dvarlen_states}},
                                   grads, &device));
  SSMKIT_RETURN_IF_ERROR(CheckInputs(inputs, device, &p));
  SSMKIT_RETURN_IF_ERROR(CheckOptions(options, &p, &algorithm));
  SSMKIT_RETURN_IF_ERROR(check::Tensor(kOp, "dout", dout,
                                       {"(B, L, H, P)", {p.batch, p.seqlen, p.nheads, p.headdim}},
                                       {inputs.x.dtype}));
  SSMKIT_RETURN_IF_ERROR(check::Optional(kOp, "dfinal_states", dfinal_states,
                                         {"(B, H, P, N)", {p.batch, p.nheads, p.headdim, p.dstate}},
                                         {DType::kF32}));
  SSMKIT_RETURN_IF_ERROR(
      CheckVarlenStates("dvarlen_states", output_grads.dvarlen_states, p, &p.dvarlen_states));
  SSMKIT_RETURN_IF_ERROR(check::GradsLike(kOp, grads, SsdTensors::grads, inputs));
  p.dout = MakeSeqView(dout);
  p.dfinal_states = MakeStateView(dfinal_states);
  p.dx = MakeSeqView(grads.dx);
  p.dz = MakeSeqView(grads.dz);
  p.ddt = MakeDtView(grads.ddt);
  p.dB = MakeSeqView(grads.dB);
  p.dC = MakeSeqView(grads.dC);
  p.dA = MakeHeadView(grads.dA);
  p.dD = MakeHeadView(grads.dD);
  p.ddt_bias = MakeHeadView(grads.ddt_bias);
  p.dinitial_states = MakeStateView(grads.dinitial_states);
  if (device == Device::kCuda) return cuda::SsdBackward(p);
  return check::RunGuarded(kOp, [&] { return cpu::SsdBackward(p, algorithm); });
}

}  // namespace ssmkit
