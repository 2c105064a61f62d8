// The C ABI's versions, status messages, thread setting and tensor descriptors.
#include <string>

#include "capi/capi_internal.hpp"
#include "ssmkit/linear.hpp"
#include "ssmkit/threads.hpp"

namespace ssmkit::capi {
namespace {

thread_local std::string t_last_error;

// The C enums mirror the C++ ones value for value: the conversions below are casts.
static_assert(SSMKIT_F32 == static_cast<int>(DType::kF32) &&
              SSMKIT_BF16 == static_cast<int>(DType::kBF16) &&
              SSMKIT_F16 == static_cast<int>(DType::kF16) &&
              SSMKIT_I32 == static_cast<int>(DType::kI32) &&
              SSMKIT_I64 == static_cast<int>(DType::kI64));
static_assert(SSMKIT_CPU == static_cast<int>(Device::kCpu) &&
              SSMKIT_CUDA == static_cast<int>(Device::kCuda));
static_assert(SSMKIT_MAX_RANK == kMaxRank);
static_assert(SSMKIT_OK == static_cast<int>(StatusCode::kOk) &&
              SSMKIT_INVALID_ARGUMENT == static_cast<int>(StatusCode::kInvalidArgument) &&
              SSMKIT_UNSUPPORTED == static_cast<int>(StatusCode::kUnsupported) &&
              SSMKIT_OUT_OF_MEMORY == static_cast<int>(StatusCode::kOutOfMemory) &&
              SSMKIT_INTERNAL == static_cast<int>(StatusCode::kInternal));

std::string Field(const char* name, const char* field) { return std::string(name) + "." + field; }

Status OutOfRange(const char* fn, const std::string& what, const std::string& expected,
                  int64_t given) {
  return Status::InvalidArgument(std::string(fn) + ": " + what + ": expected " + expected +
                                 ", given " + std::to_string(given));
}

}  // namespace

ssmkit_status Finish(const Status& status) {
  if (status.ok()) {
    t_last_error.clear();
  } else {
    t_last_error = status.message();
  }
  return static_cast<ssmkit_status>(status.code());
}

Status ToTensor(const char* fn, const char* name, const ssmkit_tensor* t, Tensor* out) {
  *out = Tensor{};
  if (t == nullptr || t->data == nullptr) return Status::Ok();
  if (t->dtype < SSMKIT_F32 || t->dtype > SSMKIT_I64) {
    return OutOfRange(fn, Field(name, "dtype"), "an ssmkit_dtype 0..4", t->dtype);
  }
  if (t->device < SSMKIT_CPU || t->device > SSMKIT_CUDA) {
    return OutOfRange(fn, Field(name, "device"), "an ssmkit_device 0..1", t->device);
  }
  if (t->rank < 0 || t->rank > SSMKIT_MAX_RANK) {
    return OutOfRange(fn, Field(name, "rank"), "0..6", t->rank);
  }
  out->data = t->data;
  out->dtype = static_cast<DType>(t->dtype);
  out->device = static_cast<Device>(t->device);
  out->rank = t->rank;
  for (int i = 0; i < t->rank; ++i) {
    out->shape[i] = t->shape[i];
    out->strides[i] = t->strides[i];
  }
  return Status::Ok();
}

Status CheckStruct(const char* fn, const char* name, const void* s, size_t struct_size,
                   size_t known_size) {
  if (s == nullptr) {
    return Status::InvalidArgument(std::string(fn) + ": " + name +
                                   ": expected a struct, given NULL");
  }
  if (struct_size != known_size) {
    return Status::InvalidArgument(std::string(fn) + ": " + name + ".struct_size: expected " +
                                   std::to_string(known_size) + " (sizeof the struct), given " +
                                   std::to_string(struct_size));
  }
  return Status::Ok();
}

}  // namespace ssmkit::capi

using ssmkit::capi::Finish;

extern "C" {

uint32_t ssmkit_version(void) { return SSMKIT_VERSION; }

const char* ssmkit_version_string(void) {
#define SSMKIT_STR2(x) #x
#define SSMKIT_STR(x) SSMKIT_STR2(x)
  return SSMKIT_STR(SSMKIT_VERSION_MAJOR) "." SSMKIT_STR(SSMKIT_VERSION_MINOR) "." SSMKIT_STR(
      SSMKIT_VERSION_PATCH);
#undef SSMKIT_STR
#undef SSMKIT_STR2
}

uint32_t ssmkit_abi_version(void) { return SSMKIT_ABI_VERSION; }

const char* ssmkit_last_error(void) { return ssmkit::capi::t_last_error.c_str(); }

const char* ssmkit_status_name(ssmkit_status status) {
  switch (status) {
    case SSMKIT_OK:
      return "ok";
    case SSMKIT_INVALID_ARGUMENT:
      return "invalid argument";
    case SSMKIT_UNSUPPORTED:
      return "unsupported";
    case SSMKIT_OUT_OF_MEMORY:
      return "out of memory";
    case SSMKIT_INTERNAL:
      return "internal";
  }
  return "unknown";
}

void ssmkit_set_num_threads(int32_t n) { ssmkit::SetNumThreads(n); }

int32_t ssmkit_num_threads(void) { return ssmkit::NumThreads(); }

int32_t ssmkit_set_bf16_products(int32_t enable) {
  return ssmkit::SetBf16Products(enable != 0) ? 1 : 0;
}

int32_t ssmkit_bf16_products(void) { return ssmkit::Bf16Products() ? 1 : 0; }

ssmkit_status ssmkit_tensor_contiguous(ssmkit_tensor* t, void* data, ssmkit_dtype dtype,
                                       int32_t rank, const int64_t* shape) {
  constexpr const char* kFn = "ssmkit_tensor_contiguous";
  return ssmkit::capi::Guarded(kFn, [&]() -> ssmkit::Status {
    if (t == nullptr)
      return ssmkit::Status::InvalidArgument(std::string(kFn) +
                                             ": t: expected a tensor to fill, given NULL");
    if (rank < 0 || rank > SSMKIT_MAX_RANK) {
      return ssmkit::capi::OutOfRange(kFn, "rank", "0..6", rank);
    }
    if (rank > 0 && shape == nullptr) {
      return ssmkit::Status::InvalidArgument(std::string(kFn) + ": shape: expected " +
                                             std::to_string(rank) + " sizes, given NULL");
    }
    for (int i = 0; i < rank; ++i) {
      if (shape[i] < 0)
        return ssmkit::capi::OutOfRange(kFn, "shape[" + std::to_string(i) + "]", ">= 0", shape[i]);
    }
    *t = ssmkit_tensor{};
    t->data = data;
    t->dtype = dtype;
    t->device = SSMKIT_CPU;
    t->rank = rank;
    int64_t stride = 1;
    for (int i = rank - 1; i >= 0; --i) {
      t->shape[i] = shape[i];
      t->strides[i] = stride;
      stride *= shape[i];
    }
    return ssmkit::Status::Ok();
  });
}

}  // extern "C"
