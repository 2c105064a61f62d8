// XLA FFI handlers (CPU) for every op direction, written against jaxlib's xla/ffi/api/ffi.h.
// Operands and results come in the orders of op_tensors.hpp; python/ssmkit/jax.py is the
// other side of each call (output shapes, placeholders for absent optionals, the ranks
// attribute, jax.custom_vjp). Every handler binds XLA's intra-op thread pool.
#include "ffi_handlers.hpp"

#include "ffi_slices.hpp"
#include "op_tensors.hpp"

namespace ssmkit::python {
namespace {

using Ranks = ffi::Span<const int64_t>;

// The binding every handler starts with: thread pool, operands, results, ranks.
auto Bind() {
  return ffi::Ffi::Bind().Ctx<ffi::ThreadPool>().RemainingArgs().RemainingRets().Attr<Ranks>(
      "ranks");
}

// The SSD's and the gated RMSNorm's attributes, the same for forward and backward.
auto SsdBind() {
  return Bind()
      .Attr<bool>("dt_softplus")
      .Attr<float>("dt_min")
      .Attr<float>("dt_max")
      .Attr<int64_t>("algorithm")
      .Attr<int64_t>("chunk_size");
}
auto RmsNormBind() {
  return Bind().Attr<float>("eps").Attr<int64_t>("group_size").Attr<bool>("norm_before_gate");
}

ffi::Error ScanFwd(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                   Ranks ranks, bool delta_softplus, int64_t algorithm, int64_t chunk_length) {
  SelectiveScanOptions options;
  options.algorithm = static_cast<ScanAlgorithm>(algorithm);
  options.chunk_length = chunk_length;
  return RunOverSlices("selective_scan_fn", pool, args, rets, ranks, kScanInputs.size(), 2,
                       [&](Tensors in, Tensors out) {
                         return SelectiveScanForward(ScanInputs(in, delta_softplus), out[0], out[1],
                                                     options);
                       });
}

// Operands: the inputs, dout, dfinal_state. Results: the gradients.
ffi::Error ScanBwd(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                   Ranks ranks, bool delta_softplus, int64_t chunk_length) {
  SelectiveScanOptions options;
  options.chunk_length = chunk_length;
  constexpr size_t n = kScanInputs.size();
  return RunOverSlices("selective_scan_bwd", pool, args, rets, ranks, n + 2, kScanGrads.size(),
                       [&](Tensors in, Tensors out) {
                         return SelectiveScanBackward(ScanInputs(in, delta_softplus), in[n],
                                                      in[n + 1], ScanGrads(out), options);
                       });
}

ffi::Error SsdFwd(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                  Ranks ranks, bool dt_softplus, float dt_min, float dt_max, int64_t algorithm,
                  int64_t chunk_size) {
  SsdOptions options;
  options.algorithm = static_cast<SsdAlgorithm>(algorithm);
  options.chunk_size = chunk_size;
  return RunOverSlices("mamba_chunk_scan_combined", pool, args, rets, ranks, kSsdInputs.size(), 2,
                       [&](Tensors in, Tensors out) {
                         return SsdForward(SsdInputsOf(in, dt_softplus, dt_min, dt_max), out[0],
                                           out[1], options);
                       });
}

ffi::Error SsdBwd(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                  Ranks ranks, bool dt_softplus, float dt_min, float dt_max, int64_t algorithm,
                  int64_t chunk_size) {
  SsdOptions options;
  options.algorithm = static_cast<SsdAlgorithm>(algorithm);
  options.chunk_size = chunk_size;
  constexpr size_t n = kSsdInputs.size();
  return RunOverSlices("mamba_chunk_scan_combined_bwd", pool, args, rets, ranks, n + 2,
                       kSsdGrads.size(), [&](Tensors in, Tensors out) {
                         return SsdBackward(SsdInputsOf(in, dt_softplus, dt_min, dt_max), in[n],
                                            in[n + 1], SsdGradsOf(out), options);
                       });
}

// Operands: state, then the inputs. Results: out, the updated state.
ffi::Error StateUpdate(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                       Ranks ranks, bool dt_softplus) {
  return RunOverSlices("selective_state_update", pool, args, rets, ranks,
                       kStateUpdateInputs.size() + 1, 2, [&](Tensors in, Tensors out) {
                         SSMKIT_RETURN_IF_ERROR(CopyInto(in[0], out[1], "selective_state_update"));
                         return SelectiveStateUpdate(
                             StateUpdateInputsOf(in.subspan(1), dt_softplus), out[1], out[0]);
                       });
}

ffi::Error ConvFwd(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                   Ranks ranks, bool silu) {
  return RunOverSlices("causal_conv1d_fn", pool, args, rets, ranks, kConvInputs.size(), 2,
                       [&](Tensors in, Tensors out) {
                         return CausalConv1dForward(ConvInputs(in, silu), out[0], out[1]);
                       });
}

ffi::Error ConvBwd(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                   Ranks ranks, bool silu) {
  constexpr size_t n = kConvInputs.size();
  return RunOverSlices("causal_conv1d_bwd", pool, args, rets, ranks, n + 2, kConvGrads.size(),
                       [&](Tensors in, Tensors out) {
                         return CausalConv1dBackward(ConvInputs(in, silu), in[n], in[n + 1],
                                                     ConvGrads(out));
                       });
}

// Operands: conv_state, then the inputs. Results: out, the updated conv_state.
ffi::Error ConvUpdate(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                      Ranks ranks, bool silu) {
  return RunOverSlices("causal_conv1d_update", pool, args, rets, ranks,
                       kConvUpdateInputs.size() + 1, 2, [&](Tensors in, Tensors out) {
                         SSMKIT_RETURN_IF_ERROR(CopyInto(in[0], out[1], "causal_conv1d_update"));
                         return CausalConv1dUpdate(ConvUpdateInputs(in.subspan(1), silu), out[1],
                                                   out[0]);
                       });
}

ffi::Error RmsNormFwd(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                      Ranks ranks, float eps, int64_t group_size, bool norm_before_gate) {
  const RmsNormOptions options = RmsNormOptionsOf(eps, group_size, norm_before_gate);
  return RunOverSlices("rmsnorm_fn", pool, args, rets, ranks, kRmsNormInputs.size(), 1,
                       [&](Tensors in, Tensors out) {
                         return RmsNormForward(RmsNormInputsOf(in), out[0], options);
                       });
}

ffi::Error RmsNormBwd(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                      Ranks ranks, float eps, int64_t group_size, bool norm_before_gate) {
  const RmsNormOptions options = RmsNormOptionsOf(eps, group_size, norm_before_gate);
  constexpr size_t n = kRmsNormInputs.size();
  return RunOverSlices("rmsnorm_bwd", pool, args, rets, ranks, n + 1, kRmsNormGrads.size(),
                       [&](Tensors in, Tensors out) {
                         return RmsNormBackward(RmsNormInputsOf(in), in[n], RmsNormGradsOf(out),
                                                options);
                       });
}

ffi::Error AddRmsNormFwd(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                         Ranks ranks, float eps) {
  AddRmsNormOptions options;
  options.eps = eps;
  return RunOverSlices("rms_norm_fn", pool, args, rets, ranks, kAddRmsNormInputs.size(), 2,
                       [&](Tensors in, Tensors out) {
                         return AddRmsNormForward(AddRmsNormInputsOf(in), out[0], out[1], options);
                       });
}

ffi::Error AddRmsNormBwd(ffi::ThreadPool pool, ffi::RemainingArgs args, ffi::RemainingRets rets,
                         Ranks ranks, float eps) {
  AddRmsNormOptions options;
  options.eps = eps;
  constexpr size_t n = kAddRmsNormInputs.size();
  return RunOverSlices("rms_norm_bwd", pool, args, rets, ranks, n + 2, kAddRmsNormGrads.size(),
                       [&](Tensors in, Tensors out) {
                         return AddRmsNormBackward(AddRmsNormInputsOf(in), in[n], in[n + 1],
                                                   AddRmsNormGradsOf(out), options);
                       });
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    SsmkitScanFwd, ScanFwd,
    Bind().Attr<bool>("delta_softplus").Attr<int64_t>("algorithm").Attr<int64_t>("chunk_length"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(SsmkitScanBwd, ScanBwd,
                              Bind().Attr<bool>("delta_softplus").Attr<int64_t>("chunk_length"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(SsmkitSsdFwd, SsdFwd, SsdBind());
XLA_FFI_DEFINE_HANDLER_SYMBOL(SsmkitSsdBwd, SsdBwd, SsdBind());
XLA_FFI_DEFINE_HANDLER_SYMBOL(SsmkitStateUpdate, StateUpdate, Bind().Attr<bool>("dt_softplus"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(SsmkitConvFwd, ConvFwd, Bind().Attr<bool>("silu"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(SsmkitConvBwd, ConvBwd, Bind().Attr<bool>("silu"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(SsmkitConvUpdate, ConvUpdate, Bind().Attr<bool>("silu"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(SsmkitRmsNormFwd, RmsNormFwd, RmsNormBind());
XLA_FFI_DEFINE_HANDLER_SYMBOL(SsmkitRmsNormBwd, RmsNormBwd, RmsNormBind());
XLA_FFI_DEFINE_HANDLER_SYMBOL(SsmkitAddRmsNormFwd, AddRmsNormFwd, Bind().Attr<float>("eps"));
XLA_FFI_DEFINE_HANDLER_SYMBOL(SsmkitAddRmsNormBwd, AddRmsNormBwd, Bind().Attr<float>("eps"));

nanobind::dict FfiTargets() {
  nanobind::dict targets;
  auto add = [&](const char* name, XLA_FFI_Error* (*handler)(XLA_FFI_CallFrame*)) {
    targets[name] = nanobind::capsule(reinterpret_cast<void*>(handler));
  };
  add("ssmkit_selective_scan_fwd", SsmkitScanFwd);
  add("ssmkit_selective_scan_bwd", SsmkitScanBwd);
  add("ssmkit_ssd_fwd", SsmkitSsdFwd);
  add("ssmkit_ssd_bwd", SsmkitSsdBwd);
  add("ssmkit_selective_state_update", SsmkitStateUpdate);
  add("ssmkit_causal_conv1d_fwd", SsmkitConvFwd);
  add("ssmkit_causal_conv1d_bwd", SsmkitConvBwd);
  add("ssmkit_causal_conv1d_update", SsmkitConvUpdate);
  add("ssmkit_rmsnorm_fwd", SsmkitRmsNormFwd);
  add("ssmkit_rmsnorm_bwd", SsmkitRmsNormBwd);
  add("ssmkit_add_rmsnorm_fwd", SsmkitAddRmsNormFwd);
  add("ssmkit_add_rmsnorm_bwd", SsmkitAddRmsNormBwd);
  return targets;
}

}  // namespace ssmkit::python
