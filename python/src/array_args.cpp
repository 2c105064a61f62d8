#include "array_args.hpp"

#include <nanobind/stl/string.h>

#include <cstdint>
#include <stdexcept>

#ifdef SSMKIT_HAS_CUDA
#include "cuda_call.hpp"
#endif

namespace ssmkit::python {
namespace {

// One C++ type per Python exception class, for nanobind's translators.
struct InvalidArgumentError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct UnsupportedError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct OutOfMemoryError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct InternalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string DTypeString(nb::dlpack::dtype d) {
  const char* kind = "?";
  switch (static_cast<nb::dlpack::dtype_code>(d.code)) {
    case nb::dlpack::dtype_code::Int:
      kind = "int";
      break;
    case nb::dlpack::dtype_code::UInt:
      kind = "uint";
      break;
    case nb::dlpack::dtype_code::Float:
      kind = "float";
      break;
    case nb::dlpack::dtype_code::Bfloat:
      kind = "bfloat";
      break;
    case nb::dlpack::dtype_code::Complex:
      kind = "complex";
      break;
    case nb::dlpack::dtype_code::Bool:
      kind = "bool";
      break;
    default:
      break;
  }
  return std::string(kind) + std::to_string(d.bits);
}

// The ssmkit dtype of a numpy dtype. bfloat16 arrives as uint16: the Python layer views
// ml_dtypes.bfloat16 arrays as uint16 (numpy cannot export that dtype through DLPack).
bool ToDType(nb::dlpack::dtype d, DType* out) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(d.code);
  if (d.lanes != 1) return false;
  if (code == Code::Float && d.bits == 32)
    *out = DType::kF32;
  else if (code == Code::Float && d.bits == 16)
    *out = DType::kF16;
  else if ((code == Code::Bfloat || code == Code::UInt) && d.bits == 16)
    *out = DType::kBF16;
  else if (code == Code::Int && d.bits == 32)
    *out = DType::kI32;
  else if (code == Code::Int && d.bits == 64)
    *out = DType::kI64;
  else
    return false;
  return true;
}

// Where an empty array's view points when numpy gives it no buffer: present, never read.
const int kEmptyArrayData = 0;

// The ssmkit device of a DLPack device type: the CPU, or a CUDA device (its memory, or memory
// mapped for it: the kernels read both the same way).
bool ToDevice(int32_t device_type, Device* out) {
  if (device_type == nb::device::cpu::value) {
    *out = Device::kCpu;
  } else if (device_type == nb::device::cuda::value ||
             device_type == nb::device::cuda_managed::value) {
    *out = Device::kCuda;
  } else {
    return false;
  }
  return true;
}

template <class Array>
Tensor ViewOf(const char* op, const char* key, const Array& a) {
  Tensor t;
  if (!ToDevice(a.device_type(), &t.device)) {
    throw nb::type_error((std::string(op) + ": " + key +
                          ": expected a CPU or CUDA array, given DLPack device type " +
                          std::to_string(a.device_type()))
                             .c_str());
  }
  if (a.ndim() > static_cast<size_t>(kMaxRank)) {
    throw InvalidArgumentError(std::string(op) + ": " + key + ": expected at most " +
                               std::to_string(kMaxRank) + " dimensions, given " +
                               std::to_string(a.ndim()));
  }
  if (!ToDType(a.dtype(), &t.dtype)) {
    throw nb::type_error((std::string(op) + ": " + key +
                          ": expected float32 or bfloat16 (int32 for indices), given " +
                          DTypeString(a.dtype()))
                             .c_str());
  }
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));
  t.rank = static_cast<int>(a.ndim());
  for (int i = 0; i < t.rank; ++i) {
    t.shape[i] = static_cast<int64_t>(a.shape(i));
    t.strides[i] = a.stride(i);
  }
  // An empty array has a null pointer at times: it is still present (and the op refuses it).
  if (t.data == nullptr) t.data = const_cast<int*>(&kEmptyArrayData);
  return t;
}

}  // namespace

void ThrowIfError(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return;
    case StatusCode::kInvalidArgument:
      throw InvalidArgumentError(status.message());
    case StatusCode::kUnsupported:
      throw UnsupportedError(status.message());
    case StatusCode::kOutOfMemory:
      throw OutOfMemoryError(status.message());
    case StatusCode::kInternal:
      break;
  }
  throw InternalError(status.message());
}

ArrayArgs::ArrayArgs(const char* op, nb::dict args) : op_(op), args_(std::move(args)) {
  if (!args_.contains("cuda_stream")) return;
#ifdef SSMKIT_HAS_CUDA
  const auto stream = reinterpret_cast<cudaStream_t>(nb::cast<uintptr_t>(args_["cuda_stream"]));
  auto call = std::make_shared<ScopedCudaCall>(stream);
  const int device = args_.contains("cuda_device") ? nb::cast<int>(args_["cuda_device"]) : -1;
  const cudaError_t e = device >= 0 ? call->UseDevice(device) : call->UseStreamDevice(stream);
  if (e != cudaSuccess) {
    throw InternalError(CudaMessage(op_, "selecting the tensors' CUDA device", e));
  }
  cuda_call_ = std::move(call);
#endif
  // Without the CUDA backend the op itself refuses CUDA tensors (Unsupported, naming one).
}

ArrayArgs::~ArrayArgs() = default;

void RegisterErrors(nb::module_& m) {
  nb::exception<InvalidArgumentError>(m, "InvalidArgumentError", PyExc_ValueError);
  nb::exception<UnsupportedError>(m, "UnsupportedError", PyExc_NotImplementedError);
  nb::exception<OutOfMemoryError>(m, "OutOfMemoryError", PyExc_MemoryError);
  nb::exception<InternalError>(m, "InternalError", PyExc_RuntimeError);
}

nb::handle ArrayArgs::Get(const char* key) const {
  if (!args_.contains(key)) {
    throw InternalError(std::string(op_) + ": the binding passed no '" + key + "'");
  }
  return args_[key];
}

Tensor ArrayArgs::Input(const char* key) {
  nb::handle h = Get(key);
  if (h.is_none()) return {};
  nb::ndarray<nb::ro> a;
  if (!nb::try_cast(h, a)) {
    throw nb::type_error(
        (std::string(op_) + ": " + key + ": expected an array (numpy, or DLPack such as torch)")
            .c_str());
  }
  keep_.push_back(a);
  return ViewOf(op_, key, a);
}

Tensor ArrayArgs::Output(const char* key) {
  nb::handle h = Get(key);
  if (h.is_none()) return {};
  nb::ndarray<> a;
  if (!nb::try_cast(h, a)) {
    throw InvalidArgumentError(std::string(op_) + ": " + key +
                               ": expected a writable array (it is updated in place)");
  }
  keep_writable_.push_back(a);
  return ViewOf(op_, key, a);
}

std::vector<Tensor> ArrayArgs::Views(const char* const* keys, size_t n, bool writable) {
  std::vector<Tensor> views;
  views.reserve(n);
  for (size_t i = 0; i < n; ++i) views.push_back(writable ? Output(keys[i]) : Input(keys[i]));
  return views;
}

bool ArrayArgs::Flag(const char* key) const { return nb::cast<bool>(Get(key)); }
int64_t ArrayArgs::Integer(const char* key) const { return nb::cast<int64_t>(Get(key)); }
float ArrayArgs::Real(const char* key) const { return nb::cast<float>(Get(key)); }
std::string ArrayArgs::String(const char* key) const { return nb::cast<std::string>(Get(key)); }

}  // namespace ssmkit::python
