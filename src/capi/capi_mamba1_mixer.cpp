// The C ABI's fused Mamba-1 mixer forward (ssmkit_mamba1_mixer_fwd): descriptors to C++ views,
// then Mamba1MixerForward (include/ssmkit/mamba1_mixer.hpp), which checks every argument.
#include "capi/capi_internal.hpp"
#include "ssmkit/mamba1_mixer.hpp"
#include "ssmkit/op_tensors.hpp"

namespace ssmkit::capi {
namespace {

Status MixerArgs(const char* fn, const ssmkit_mamba1_mixer_args* a, Mamba1MixerInputs* in) {
  SSMKIT_RETURN_IF_ERROR(CheckStructPtr(fn, "args", a));
#define SSMKIT_CONVERT_MIXER_ARG_(name, role) \
  SSMKIT_RETURN_IF_ERROR(ToTensor(fn, "args." #name, &a->name, &in->name));
  SSMKIT_MAMBA1_MIXER_INPUTS(SSMKIT_CONVERT_MIXER_ARG_)
#undef SSMKIT_CONVERT_MIXER_ARG_
  return Status::Ok();
}

}  // namespace
}  // namespace ssmkit::capi

using namespace ssmkit;        // NOLINT: this file only forwards to the C++ API
using namespace ssmkit::capi;  // NOLINT

extern "C" {

ssmkit_status ssmkit_mamba1_mixer_fwd(const ssmkit_mamba1_mixer_args* args,
                                      const ssmkit_tensor* out) {
  constexpr const char* kFn = "ssmkit_mamba1_mixer_fwd";
  return Guarded(kFn, [&]() -> Status {
    Mamba1MixerInputs in;
    SSMKIT_RETURN_IF_ERROR(MixerArgs(kFn, args, &in));
    Tensor o;
    SSMKIT_RETURN_IF_ERROR(ToTensor(kFn, "out", out, &o));
    return Mamba1MixerForward(in, o);
  });
}

}  // extern "C"
