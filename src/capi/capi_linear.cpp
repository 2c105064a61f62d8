// The C ABI's linear layer (ssmkit_linear_fwd / _bwd): descriptors to C++ views, then
// LinearForward / LinearBackward (include/ssmkit/linear.hpp), which check every argument.
#include "capi/capi_internal.hpp"
#include "ssmkit/linear.hpp"

namespace ssmkit::capi {
namespace {

Status LinearArgs(const char* fn, const ssmkit_linear_args* a, LinearInputs* in) {
  SSMKIT_RETURN_IF_ERROR(CheckStructPtr(fn, "args", a));
  SSMKIT_RETURN_IF_ERROR(ToTensor(fn, "args.x", &a->x, &in->x));
  SSMKIT_RETURN_IF_ERROR(ToTensor(fn, "args.weight", &a->weight, &in->weight));
  return ToTensor(fn, "args.bias", &a->bias, &in->bias);
}

}  // namespace
}  // namespace ssmkit::capi

using namespace ssmkit;        // NOLINT: this file only forwards to the C++ API
using namespace ssmkit::capi;  // NOLINT

extern "C" {

ssmkit_status ssmkit_linear_fwd(const ssmkit_linear_args* args, const ssmkit_tensor* out) {
  constexpr const char* kFn = "ssmkit_linear_fwd";
  return Guarded(kFn, [&]() -> Status {
    LinearInputs in;
    SSMKIT_RETURN_IF_ERROR(LinearArgs(kFn, args, &in));
    Tensor o;
    SSMKIT_RETURN_IF_ERROR(ToTensor(kFn, "out", out, &o));
    return LinearForward(in, o);
  });
}

ssmkit_status ssmkit_linear_bwd(const ssmkit_linear_args* args, const ssmkit_tensor* dout,
                                const ssmkit_linear_grads* grads) {
  constexpr const char* kFn = "ssmkit_linear_bwd";
  return Guarded(kFn, [&]() -> Status {
    LinearInputs in;
    SSMKIT_RETURN_IF_ERROR(LinearArgs(kFn, args, &in));
    SSMKIT_RETURN_IF_ERROR(CheckStructPtr(kFn, "grads", grads));
    Tensor d;
    LinearGrads g;
    SSMKIT_RETURN_IF_ERROR(ToTensor(kFn, "dout", dout, &d));
    SSMKIT_RETURN_IF_ERROR(ToTensor(kFn, "grads.dx", &grads->dx, &g.dx));
    SSMKIT_RETURN_IF_ERROR(ToTensor(kFn, "grads.dweight", &grads->dweight, &g.dweight));
    SSMKIT_RETURN_IF_ERROR(ToTensor(kFn, "grads.dbias", &grads->dbias, &g.dbias));
    return LinearBackward(in, d, g);
  });
}

}  // extern "C"
