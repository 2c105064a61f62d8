// XLA FFI handlers for every op direction, written against xla/ffi/api/ffi.h (jaxlib's, or
// EXLA's xla_extension: bindings/elixir/exla), for the CPU platform and, when the library has
// the CUDA backend, for CUDA. No Python here: ffi_capsules.cpp hands them to JAX. Operands and
// results come in the orders of op_tensors.hpp; python/ssmkit/jax.py is the other side of each call
// (output shapes, placeholders for absent optionals, the ranks attribute, jax.custom_vjp).
// One body per op serves both platforms: it is a template on the call's context, which is
// XLA's intra-op thread pool on the CPU (ffi::ThreadPool) and XLA's stream on CUDA
// (ffi::PlatformStream<cudaStream_t>); RunOverSlices (ffi_slices.hpp) does the rest.
#include "ffi_slices.hpp"
#include "ffi_targets.hpp"
#include "op_tensors.hpp"

namespace ssmkit::python {
namespace {

using Ranks = ffi::Span<const int64_t>;

// The binding every handler starts with: context (Platform: ffi::ThreadPool, or
// ffi::PlatformStream<cudaStream_t>, which hands the body a cudaStream_t), operands, results,
// ranks.
template <class Platform>
auto Bind() {
  return ffi::Ffi::Bind().Ctx<Platform>().RemainingArgs().RemainingRets().template Attr<Ranks>(
      "ranks");
}

template <class Platform>
auto ScanFwdBind() {
  return Bind<Platform>()
      .template Attr<bool>("delta_softplus")
      .template Attr<int64_t>("algorithm")
      .template Attr<int64_t>("chunk_length");
}
template <class Platform>
auto ScanBwdBind() {
  return Bind<Platform>()
      .template Attr<bool>("delta_softplus")
      .template Attr<int64_t>("chunk_length");
}
// The SSD's and the gated RMSNorm's attributes, the same for forward and backward.
template <class Platform>
auto SsdBind() {
  return Bind<Platform>()
      .template Attr<bool>("dt_softplus")
      .template Attr<float>("dt_min")
      .template Attr<float>("dt_max")
      .template Attr<int64_t>("algorithm")
      .template Attr<int64_t>("chunk_size");
}
template <class Platform>
auto RmsNormBind() {
  return Bind<Platform>()
      .template Attr<float>("eps")
      .template Attr<int64_t>("group_size")
      .template Attr<bool>("norm_before_gate");
}
template <class Platform>
auto DtSoftplusBind() {
  return Bind<Platform>().template Attr<bool>("dt_softplus");
}
template <class Platform>
auto SiluBind() {
  return Bind<Platform>().template Attr<bool>("silu");
}
template <class Platform>
auto EpsBind() {
  return Bind<Platform>().template Attr<float>("eps");
}

template <class Context>
ffi::Error ScanFwd(Context ctx, ffi::RemainingArgs args, ffi::RemainingRets rets, Ranks ranks,
                   bool delta_softplus, int64_t algorithm, int64_t chunk_length) {
  SelectiveScanOptions options;
  options.algorithm = static_cast<ScanAlgorithm>(algorithm);
  options.chunk_length = chunk_length;
  return RunOverSlices("selective_scan_fn", ctx, args, rets, ranks, kScanInputs.size(), 3,
                       [&](Tensors in, Tensors out) {
                         return SelectiveScanForward(ScanInputs(in, delta_softplus),
                                                     {out[0], out[1], Tensor{}, out[2]}, options);
                       });
}

// Operands: the inputs, dout, dfinal_state, dvarlen_states. Results: the gradients.
template <class Context>
ffi::Error ScanBwd(Context ctx, ffi::RemainingArgs args, ffi::RemainingRets rets, Ranks ranks,
                   bool delta_softplus, int64_t chunk_length) {
  SelectiveScanOptions options;
  options.chunk_length = chunk_length;
  constexpr size_t n = kScanInputs.size();
  return RunOverSlices("selective_scan_bwd", ctx, args, rets, ranks, n + 3, kScanGrads.size(),
                       [&](Tensors in, Tensors out) {
                         return SelectiveScanBackward(
                             ScanInputs(in, delta_softplus), {in[n], in[n + 1], in[n + 2]},
                             Tensor{}, StructFromList(SelectiveScanTensors::grads, out), options);
                       });
}

template <class Context>
ffi::Error SsdFwd(Context ctx, ffi::RemainingArgs args, ffi::RemainingRets rets, Ranks ranks,
                  bool dt_softplus, float dt_min, float dt_max, int64_t algorithm,
                  int64_t chunk_size) {
  SsdOptions options;
  options.algorithm = static_cast<SsdAlgorithm>(algorithm);
  options.chunk_size = chunk_size;
  return RunOverSlices("mamba_chunk_scan_combined", ctx, args, rets, ranks, kSsdInputs.size(), 3,
                       [&](Tensors in, Tensors out) {
                         return SsdForward(SsdInputsOf(in, dt_softplus, dt_min, dt_max),
                                           {out[0], out[1], out[2]}, options);
                       });
}

template <class Context>
ffi::Error SsdBwd(Context ctx, ffi::RemainingArgs args, ffi::RemainingRets rets, Ranks ranks,
                  bool dt_softplus, float dt_min, float dt_max, int64_t algorithm,
                  int64_t chunk_size) {
  SsdOptions options;
  options.algorithm = static_cast<SsdAlgorithm>(algorithm);
  options.chunk_size = chunk_size;
  constexpr size_t n = kSsdInputs.size();
  return RunOverSlices("mamba_chunk_scan_combined_bwd", ctx, args, rets, ranks, n + 3,
                       kSsdGrads.size(), [&](Tensors in, Tensors out) {
                         return SsdBackward(SsdInputsOf(in, dt_softplus, dt_min, dt_max),
                                            {in[n], in[n + 1], in[n + 2]},
                                            StructFromList(SsdTensors::grads, out), options);
                       });
}

// Operands: state, then the inputs. Results: out, the updated state.
template <class Context>
ffi::Error StateUpdate(Context ctx, ffi::RemainingArgs args, ffi::RemainingRets rets, Ranks ranks,
                       bool dt_softplus) {
  return RunOverSlices("selective_state_update", ctx, args, rets, ranks,
                       kStateUpdateInputs.size() + 1, 2, [&](Tensors in, Tensors out) {
                         SSMKIT_RETURN_IF_ERROR(CopyInto(in[0], out[1], "selective_state_update"));
                         return SelectiveStateUpdate(
                             StateUpdateInputsOf(in.subspan(1), dt_softplus), out[1], out[0]);
                       });
}

template <class Context>
ffi::Error ConvFwd(Context ctx, ffi::RemainingArgs args, ffi::RemainingRets rets, Ranks ranks,
                   bool silu) {
  return RunOverSlices("causal_conv1d_fn", ctx, args, rets, ranks, kConvInputs.size(), 2,
                       [&](Tensors in, Tensors out) {
                         return CausalConv1dForward(ConvInputs(in, silu), out[0], out[1]);
                       });
}

template <class Context>
ffi::Error ConvBwd(Context ctx, ffi::RemainingArgs args, ffi::RemainingRets rets, Ranks ranks,
                   bool silu) {
  constexpr size_t n = kConvInputs.size();
  return RunOverSlices("causal_conv1d_bwd", ctx, args, rets, ranks, n + 2, kConvGrads.size(),
                       [&](Tensors in, Tensors out) {
                         return CausalConv1dBackward(
                             ConvInputs(in, silu), in[n], in[n + 1],
                             StructFromList(CausalConv1dTensors::grads, out));
                       });
}

// Operands: conv_state, then the inputs. Results: out, the updated conv_state.
template <class Context>
ffi::Error ConvUpdate(Context ctx, ffi::RemainingArgs args, ffi::RemainingRets rets, Ranks ranks,
                      bool silu) {
  return RunOverSlices("causal_conv1d_update", ctx, args, rets, ranks, kConvUpdateInputs.size() + 1,
                       2, [&](Tensors in, Tensors out) {
                         SSMKIT_RETURN_IF_ERROR(CopyInto(in[0], out[1], "causal_conv1d_update"));
                         return CausalConv1dUpdate(ConvUpdateInputs(in.subspan(1), silu), out[1],
                                                   out[0]);
                       });
}

template <class Context>
ffi::Error RmsNormFwd(Context ctx, ffi::RemainingArgs args, ffi::RemainingRets rets, Ranks ranks,
                      float eps, int64_t group_size, bool norm_before_gate) {
  const RmsNormOptions options = RmsNormOptionsOf(eps, group_size, norm_before_gate);
  return RunOverSlices(
      "rmsnorm_fn", ctx, args, rets, ranks, kRmsNormInputs.size(), 1, [&](Tensors in, Tensors out) {
        return RmsNormForward(StructFromList(RmsNormTensors::inputs, in), out[0], options);
      });
}

template <class Context>
ffi::Error RmsNormBwd(Context ctx, ffi::RemainingArgs args, ffi::RemainingRets rets, Ranks ranks,
                      float eps, int64_t group_size, bool norm_before_gate) {
  const RmsNormOptions options = RmsNormOptionsOf(eps, group_size, norm_before_gate);
  constexpr size_t n = kRmsNormInputs.size();
  return RunOverSlices("rmsnorm_bwd", ctx, args, rets, ranks, n + 1, kRmsNormGrads.size(),
                       [&](Tensors in, Tensors out) {
                         return RmsNormBackward(StructFromList(RmsNormTensors::inputs, in), in[n],
                                                StructFromList(RmsNormTensors::grads, out),
                                                options);
                       });
}

template <class Context>
ffi::Error AddRmsNormFwd(Context ctx, ffi::RemainingArgs args, ffi::RemainingRets rets, Ranks ranks,
                         float eps) {
  AddRmsNormOptions options;
  options.eps = eps;
  return RunOverSlices("rms_norm_fn", ctx, args, rets, ranks, kAddRmsNormInputs.size(), 2,
                       [&](Tensors in, Tensors out) {
                         return AddRmsNormForward(StructFromList(AddRmsNormTensors::inputs, in),
                                                  out[0], out[1], options);
                       });
}

template <class Context>
ffi::Error AddRmsNormBwd(Context ctx, ffi::RemainingArgs args, ffi::RemainingRets rets, Ranks ranks,
                         float eps) {
  AddRmsNormOptions options;
  options.eps = eps;
  constexpr size_t n = kAddRmsNormInputs.size();
  return RunOverSlices("rms_norm_bwd", ctx, args, rets, ranks, n + 2, kAddRmsNormGrads.size(),
                       [&](Tensors in, Tensors out) {
                         return AddRmsNormBackward(
                             StructFromList(AddRmsNormTensors::inputs, in), in[n], in[n + 1],
                             StructFromList(AddRmsNormTensors::grads, out), options);
                       });
}

}  // namespace

#define SSMKIT_CPU_HANDLER(name, Body, Binding) \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(Ssmkit##Body, Body<ffi::ThreadPool>, Binding<ffi::ThreadPool>());
SSMKIT_FFI_TARGETS(SSMKIT_CPU_HANDLER)

#ifdef SSMKIT_HAS_CUDA
#define SSMKIT_CUDA_HANDLER(name, Body, Binding)                        \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(Ssmkit##Body##Cuda, Body<cudaStream_t>, \
                                Binding<ffi::PlatformStream<cudaStream_t>>());
SSMKIT_FFI_TARGETS(SSMKIT_CUDA_HANDLER)
#endif

}  // namespace ssmkit::python
