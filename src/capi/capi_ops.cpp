// The C ABI's op entry points: each converts its descriptors to C++ views and calls the op of
// the same name in include/ssmkit/*.hpp, which checks every argument.
#include <cstddef>

#include "capi/capi_internal.hpp"
#include "ssmkit/conv1d.hpp"
#include "ssmkit/norm.hpp"
#include "ssmkit/op_tensors.hpp"
#include "ssmkit/selective_scan.hpp"
#include "ssmkit/ssd.hpp"
#include "ssmkit/state_update.hpp"

namespace ssmkit::capi {
namespace {

// Converts descriptors one after another, keeping the first failure.
class Converter {
 public:
  explicit Converter(const char* fn) : fn_(fn) {}
  void operator()(const char* name, const ssmkit_tensor* t, Tensor* out) {
    if (status_.ok()) status_ = ToTensor(fn_, name, t, out);
  }
  void operator()(const char* name, const ssmkit_tensor& t, Tensor* out) { (*this)(name, &t, out); }
  const Status& status() const { return status_; }

 private:
  const char* fn_;
  Status status_;
};

// Expansions of op_tensors.hpp's lists, whose names are the members of both the C and the C++
// structs: each converts one tensor with Converter `c` from C struct `a` (args) or `grads` into
// C++ struct `in` or `g`, named as the C caller wrote it.
#define SSMKIT_CONVERT_ARG_(name, role) c("args." #name, a->name, &in->name);
#define SSMKIT_CONVERT_GRAD_(grad, input) c("grads." #grad, grads->grad, &g.grad);

// The struct_size of each earlier version of the args structs (0.1: before the packed
// sequence fields).
constexpr size_t kScanArgsV1 = offsetof(ssmkit_selective_scan_args, seq_idx);
constexpr size_t kSsdArgsV1 = offsetof(ssmkit_ssd_args, cu_seqlens);
constexpr size_t kConv1dArgsV1 = offsetof(ssmkit_conv1d_args, seq_idx);

Status ScanInputs(const char* fn, const ssmkit_selective_scan_args* args, SelectiveScanInputs* in,
                  SelectiveScanOptions* options) {
  ssmkit_selective_scan_args copy;
  SSMKIT_RETURN_IF_ERROR(ReadVersionedStruct(fn, "args", args, {kScanArgsV1}, &copy));
  const ssmkit_selective_scan_args* a = &copy;
  Converter c(fn);
  SSMKIT_SELECTIVE_SCAN_INPUTS(SSMKIT_CONVERT_ARG_)
  in->delta_softplus = a->delta_softplus != 0;
  options->algorithm = static_cast<ScanAlgorithm>(a->algorithm);
  options->chunk_length = a->chunk_length;
  return c.status();
}

Status SsdArgs(const char* fn, const ssmkit_ssd_args* args, SsdInputs* in, SsdOptions* options) {
  ssmkit_ssd_args copy;
  SSMKIT_RETURN_IF_ERROR(ReadVersionedStruct(fn, "args", args, {kSsdArgsV1}, &copy));
  const ssmkit_ssd_args* a = &copy;
  Converter c(fn);
  SSMKIT_SSD_INPUTS(SSMKIT_CONVERT_ARG_)
  in->dt_softplus = a->dt_softplus != 0;
  if (a->has_dt_limit) {
    in->dt_min = a->dt_min;
    in->dt_max = a->dt_max;
  }
  options->algorithm = static_cast<SsdAlgorithm>(a->algorithm);
  options->chunk_size = a->chunk_size;
  return c.status();
}

Status Conv1dArgs(const char* fn, const ssmkit_conv1d_args* args, CausalConv1dInputs* in) {
  ssmkit_conv1d_args copy;
  SSMKIT_RETURN_IF_ERROR(ReadVersionedStruct(fn, "args", args, {kConv1dArgsV1}, &copy));
  const ssmkit_conv1d_args* a = &copy;
  Converter c(fn);
  SSMKIT_CAUSAL_CONV1D_INPUTS(SSMKIT_CONVERT_ARG_)
  in->activation = static_cast<Conv1dActivation>(a->activation);
  return c.status();
}

Status StateUpdateArgs(const char* fn, const ssmkit_state_update_args* a, StateUpdateInputs* in) {
  SSMKIT_RETURN_IF_ERROR(CheckStructPtr(fn, "args", a));
  Converter c(fn);
  SSMKIT_STATE_UPDATE_INPUTS(SSMKIT_CONVERT_ARG_)
  in->dt_softplus = a->dt_softplus != 0;
  return c.status();
}

Status Conv1dUpdateArgs(const char* fn, const ssmkit_conv1d_update_args* a,
                        CausalConv1dUpdateInputs* in) {
  SSMKIT_RETURN_IF_ERROR(CheckStructPtr(fn, "args", a));
  Converter c(fn);
  SSMKIT_CAUSAL_CONV1D_UPDATE_INPUTS(SSMKIT_CONVERT_ARG_)
  in->activation = static_cast<Conv1dActivation>(a->activation);
  return c.status();
}

Status RmsNormArgs(const char* fn, const ssmkit_rmsnorm_args* a, RmsNormInputs* in,
                   RmsNormOptions* options) {
  SSMKIT_RETURN_IF_ERROR(CheckStructPtr(fn, "args", a));
  Converter c(fn);
  SSMKIT_RMSNORM_INPUTS(SSMKIT_CONVERT_ARG_)
  options->eps = a->eps;
  options->group_size = a->group_size;
  options->norm_before_gate = a->norm_before_gate != 0;
  return c.status();
}

Status AddRmsNormArgs(const char* fn, const ssmkit_add_rmsnorm_args* a, AddRmsNormInputs* in,
                      AddRmsNormOptions* options) {
  SSMKIT_RETURN_IF_ERROR(CheckStructPtr(fn, "args", a));
  Converter c(fn);
  SSMKIT_ADD_RMSNORM_INPUTS(SSMKIT_CONVERT_ARG_)
  options->eps = a->eps;
  return c.status();
}

}  // namespace
}  // namespace ssmkit::capi

using namespace ssmkit;        // NOLINT: this file only forwards to the C++ API
using namespace ssmkit::capi;  // NOLINT

extern "C" {

ssmkit_status ssmkit_selective_scan_fwd(const ssmkit_selective_scan_args* args,
                                        const ssmkit_tensor* out,
                                        const ssmkit_tensor* final_state) {
  return ssmkit_selective_scan_fwd_varlen(args, out, final_state, nullptr);
}

ssmkit_status ssmkit_selective_scan_fwd_varlen(const ssmkit_selective_scan_args* args,
                                               const ssmkit_tensor* out,
                                               const ssmkit_tensor* final_state,
                                               const ssmkit_tensor* varlen_states) {
  constexpr const char* kFn = "ssmkit_selective_scan_fwd";
  return Guarded(kFn, [&]() -> Status {
    SelectiveScanInputs in;
    SelectiveScanOptions options;
    SSMKIT_RETURN_IF_ERROR(ScanInputs(kFn, args, &in, &options));
    SelectiveScanOutputs o;
    Converter c(kFn);
    c("out", out, &o.out);
    c("final_state", final_state, &o.final_state);
    c("varlen_states", varlen_states, &o.varlen_states);
    SSMKIT_RETURN_IF_ERROR(c.status());
    return SelectiveScanForward(in, o, options);
  });
}

ssmkit_status ssmkit_selective_scan_bwd(const ssmkit_selective_scan_args* args,
                                        const ssmkit_tensor* dout,
                                        const ssmkit_tensor* dfinal_state,
                                        const ssmkit_selective_scan_grads* grads) {
  return ssmkit_selective_scan_bwd_varlen(args, dout, dfinal_state, nullptr, grads);
}

ssmkit_status ssmkit_selective_scan_bwd_varlen(const ssmkit_selective_scan_args* args,
                                               const ssmkit_tensor* dout,
                                               const ssmkit_tensor* dfinal_state,
                                               const ssmkit_tensor* dvarlen_states,
                                               const ssmkit_selective_scan_grads* grads) {
  constexpr const char* kFn = "ssmkit_selective_scan_bwd";
  return Guarded(kFn, [&]() -> Status {
    SelectiveScanInputs in;
    SelectiveScanOptions options;
    SSMKIT_RETURN_IF_ERROR(ScanInputs(kFn, args, &in, &options));
    SSMKIT_RETURN_IF_ERROR(CheckStructPtr(kFn, "grads", grads));
    SelectiveScanOutputGrads d;
    SelectiveScanGrads g;
    Converter c(kFn);
    c("dout", dout, &d.dout);
    c("dfinal_state", dfinal_state, &d.dfinal_state);
    c("dvarlen_states", dvarlen_states, &d.dvarlen_states);
    SSMKIT_SELECTIVE_SCAN_GRADS(SSMKIT_CONVERT_GRAD_)
    SSMKIT_RETURN_IF_ERROR(c.status());
    return SelectiveScanBackward(in, d, Tensor{}, g, options);
  });
}

ssmkit_status ssmkit_ssd_fwd(const ssmkit_ssd_args* args, const ssmkit_tensor* out,
                             const ssmkit_tensor* final_states) {
  return ssmkit_ssd_fwd_varlen(args, out, final_states, nullptr);
}

ssmkit_status ssmkit_ssd_fwd_varlen(const ssmkit_ssd_args* args, const ssmkit_tensor* out,
                                    const ssmkit_tensor* final_states,
                                    const ssmkit_tensor* varlen_states) {
  constexpr const char* kFn = "ssmkit_ssd_fwd";
  return Guarded(kFn, [&]() -> Status {
    SsdInputs in;
    SsdOptions options;
    SSMKIT_RETURN_IF_ERROR(SsdArgs(kFn, args, &in, &options));
    SsdOutputs o;
    Converter c(kFn);
    c("out", out, &o.out);
    c("final_states", final_states, &o.final_states);
    c("varlen_states", varlen_states, &o.varlen_states);
    SSMKIT_RETURN_IF_ERROR(c.status());
    return SsdForward(in, o, options);
  });
}

ssmkit_status ssmkit_ssd_bwd(const ssmkit_ssd_args* args, const ssmkit_tensor* dout,
                             const ssmkit_tensor* dfinal_states, const ssmkit_ssd_grads* grads) {
  return ssmkit_ssd_bwd_varlen(args, dout, dfinal_states, nullptr, grads);
}

ssmkit_status ssmkit_ssd_bwd_varlen(const ssmkit_ssd_args* args, const ssmkit_tensor* dout,
                                    const ssmkit_tensor* dfinal_states,
                                    const ssmkit_tensor* dvarlen_states,
                                    const ssmkit_ssd_grads* grads) {
  constexpr const char* kFn = "ssmkit_ssd_bwd";
  return Guarded(kFn, [&]() -> Status {
    SsdInputs in;
    SsdOptions options;
    SSMKIT_RETURN_IF_ERROR(SsdArgs(kFn, args, &in, &options));
    SSMKIT_RETURN_IF_ERROR(CheckStructPtr(kFn, "grads", grads));
    SsdOutputGrads d;
    SsdGrads g;
    Converter c(kFn);
    c("dout", dout, &d.dout);
    c("dfinal_states", dfinal_states, &d.dfinal_states);
    c("dvarlen_states", dvarlen_states, &d.dvarlen_states);
    SSMKIT_SSD_GRADS(SSMKIT_CONVERT_GRAD_)
    SSMKIT_RETURN_IF_ERROR(c.status());
    return SsdBackward(in, d, g, options);
  });
}

ssmkit_status ssmkit_selective_state_update(const ssmkit_state_update_args* args,
                                            const ssmkit_tensor* state, const ssmkit_tensor* out) {
  constexpr const char* kFn = "ssmkit_selective_state_update";
  return Guarded(kFn, [&]() -> Status {
    StateUpdateInputs in;
    SSMKIT_RETURN_IF_ERROR(StateUpdateArgs(kFn, args, &in));
    Tensor s, o;
    Converter c(kFn);
    c("state", state, &s);
    c("out", out, &o);
    SSMKIT_RETURN_IF_ERROR(c.status());
    return SelectiveStateUpdate(in, s, o);
  });
}

ssmkit_status ssmkit_causal_conv1d_fwd(const ssmkit_conv1d_args* args, const ssmkit_tensor* out,
                                       const ssmkit_tensor* final_states) {
  constexpr const char* kFn = "ssmkit_causal_conv1d_fwd";
  return Guarded(kFn, [&]() -> Status {
    CausalConv1dInputs in;
    SSMKIT_RETURN_IF_ERROR(Conv1dArgs(kFn, args, &in));
    Tensor o, f;
    Converter c(kFn);
    c("out", out, &o);
    c("final_states", final_states, &f);
    SSMKIT_RETURN_IF_ERROR(c.status());
    return CausalConv1dForward(in, o, f);
  });
}

ssmkit_status ssmkit_causal_conv1d_bwd(const ssmkit_conv1d_args* args, const ssmkit_tensor* dout,
                                       const ssmkit_tensor* dfinal_states,
                                       const ssmkit_conv1d_grads* grads) {
  constexpr const char* kFn = "ssmkit_causal_conv1d_bwd";
  return Guarded(kFn, [&]() -> Status {
    CausalConv1dInputs in;
    SSMKIT_RETURN_IF_ERROR(Conv1dArgs(kFn, args, &in));
    SSMKIT_RETURN_IF_ERROR(CheckStructPtr(kFn, "grads", grads));
    Tensor d, df;
    CausalConv1dGrads g;
    Converter c(kFn);
    c("dout", dout, &d);
    c("dfinal_states", dfinal_states, &df);
    SSMKIT_CAUSAL_CONV1D_GRADS(SSMKIT_CONVERT_GRAD_)
    SSMKIT_RETURN_IF_ERROR(c.status());
    return CausalConv1dBackward(in, d, df, g);
  });
}

ssmkit_status ssmkit_causal_conv1d_update(const ssmkit_conv1d_update_args* args,
                                          const ssmkit_tensor* conv_state,
                                          const ssmkit_tensor* out) {
  constexpr const char* kFn = "ssmkit_causal_conv1d_update";
  return Guarded(kFn, [&]() -> Status {
    CausalConv1dUpdateInputs in;
    SSMKIT_RETURN_IF_ERROR(Conv1dUpdateArgs(kFn, args, &in));
    Tensor s, o;
    Converter c(kFn);
    c("conv_state", conv_state, &s);
    c("out", out, &o);
    SSMKIT_RETURN_IF_ERROR(c.status());
    return CausalConv1dUpdate(in, s, o);
  });
}

ssmkit_status ssmkit_rmsnorm_fwd(const ssmkit_rmsnorm_args* args, const ssmkit_tensor* out) {
  constexpr const char* kFn = "ssmkit_rmsnorm_fwd";
  return Guarded(kFn, [&]() -> Status {
    RmsNormInputs in;
    RmsNormOptions options;
    SSMKIT_RETURN_IF_ERROR(RmsNormArgs(kFn, args, &in, &options));
    Tensor o;
    SSMKIT_RETURN_IF_ERROR(ToTensor(kFn, "out", out, &o));
    return RmsNormForward(in, o, options);
  });
}

ssmkit_status ssmkit_rmsnorm_bwd(const ssmkit_rmsnorm_args* args, const ssmkit_tensor* dout,
                                 const ssmkit_rmsnorm_grads* grads) {
  constexpr const char* kFn = "ssmkit_rmsnorm_bwd";
  return Guarded(kFn, [&]() -> Status {
    RmsNormInputs in;
    RmsNormOptions options;
    SSMKIT_RETURN_IF_ERROR(RmsNormArgs(kFn, args, &in, &options));
    SSMKIT_RETURN_IF_ERROR(CheckStructPtr(kFn, "grads", grads));
    Tensor d;
    RmsNormGrads g;
    Converter c(kFn);
    c("dout", dout, &d);
    SSMKIT_RMSNORM_GRADS(SSMKIT_CONVERT_GRAD_)
    SSMKIT_RETURN_IF_ERROR(c.status());
    return RmsNormBackward(in, d, g, options);
  });
}

ssmkit_status ssmkit_add_rmsnorm_fwd(const ssmkit_add_rmsnorm_args* args, const ssmkit_tensor* out,
                                     const ssmkit_tensor* residual_out) {
  constexpr const char* kFn = "ssmkit_add_rmsnorm_fwd";
  return Guarded(kFn, [&]() -> Status {
    AddRmsNormInputs in;
    AddRmsNormOptions options;
    SSMKIT_RETURN_IF_ERROR(AddRmsNormArgs(kFn, args, &in, &options));
    Tensor o, r;
    Converter c(kFn);
    c("out", out, &o);
    c("residual_out", residual_out, &r);
    SSMKIT_RETURN_IF_ERROR(c.status());
    return AddRmsNormForward(in, o, r, options);
  });
}

ssmkit_status ssmkit_add_rmsnorm_bwd(const ssmkit_add_rmsnorm_args* args, const ssmkit_tensor* dout,
                                     const ssmkit_tensor* dresidual_out,
                                     const ssmkit_add_rmsnorm_grads* grads) {
  constexpr const char* kFn = "ssmkit_add_rmsnorm_bwd";
  return Guarded(kFn, [&]() -> Status {
    AddRmsNormInputs in;
    AddRmsNormOptions options;
    SSMKIT_RETURN_IF_ERROR(AddRmsNormArgs(kFn, args, &in, &options));
    SSMKIT_RETURN_IF_ERROR(CheckStructPtr(kFn, "grads", grads));
    Tensor d, dr;
    AddRmsNormGrads g;
    Converter c(kFn);
    c("dout", dout, &d);
    c("dresidual_out", dresidual_out, &dr);
    SSMKIT_ADD_RMSNORM_GRADS(SSMKIT_CONVERT_GRAD_)
    SSMKIT_RETURN_IF_ERROR(c.status());
    return AddRmsNormBackward(in, d, dr, g, options);
  });
}

}  // extern "C"

#undef SSMKIT_CONVERT_ARG_
#undef SSMKIT_CONVERT_GRAD_
