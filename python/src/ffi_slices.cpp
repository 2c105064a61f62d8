#include "ffi_slices.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "ssmkit/executor.hpp"

namespace ssmkit::python {
namespace {

// XLA's intra-op thread pool as an ssmkit Executor.
class XlaPool : public Executor {
 public:
  explicit XlaPool(ffi::ThreadPool& pool) : pool_(pool) {}
  void Schedule(std::function<void()> task) override { pool_.Schedule(std::move(task)); }

 private:
  ffi::ThreadPool& pool_;
};

struct Operand {
  char* data = nullptr;
  DType dtype = DType::kF32;
  std::vector<int64_t> dims;
  int64_t base_rank = 0;  // -1: absent
  int64_t count = 0;      // elements
  bool absent() const { return count == 0 || base_rank < 0; }
};

bool ToDType(ffi::DataType t, DType* out) {
  switch (t) {
    case ffi::DataType::F32:
      *out = DType::kF32;
      return true;
    case ffi::DataType::BF16:
      *out = DType::kBF16;
      return true;
    case ffi::DataType::F16:
      *out = DType::kF16;
      return true;
    case ffi::DataType::S32:
      *out = DType::kI32;
      return true;
    case ffi::DataType::S64:
      *out = DType::kI64;
      return true;
    default:
      return false;
  }
}

ffi::Error Decoded(const char* op, const char* kind, size_t i, ffi::AnyBuffer b, int64_t base,
                   Operand* out) {
  if (!ToDType(b.element_type(), &out->dtype)) {
    return ffi::Error::InvalidArgument(std::string(op) + ": " + kind + " " + std::to_string(i) +
                                       ": expected float32, bfloat16, float16, int32 or int64");
  }
  out->data = static_cast<char*>(b.untyped_data());
  out->dims.assign(b.dimensions().begin(), b.dimensions().end());
  out->base_rank = base;
  out->count = static_cast<int64_t>(b.element_count());
  return ffi::Error::Success();
}

ffi::ErrorCode ToErrorCode(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return ffi::ErrorCode::kOk;
    case StatusCode::kInvalidArgument:
      return ffi::ErrorCode::kInvalidArgument;
    case StatusCode::kUnsupported:
      return ffi::ErrorCode::kUnimplemented;
    case StatusCode::kOutOfMemory:
      return ffi::ErrorCode::kResourceExhausted;
    case StatusCode::kInternal:
      break;
  }
  return ffi::ErrorCode::kInternal;
}

// The view of slice `index` (a position in the leading dims `batch`) of one operand.
Tensor SliceView(const Operand& o, Device device, const std::vector<int64_t>& batch,
                 const std::vector<int64_t>& index) {
  if (o.absent()) return {};
  const size_t lead = batch.size();
  Tensor t;
  t.device = device;
  t.dtype = o.dtype;
  t.rank = static_cast<int>(o.base_rank);
  int64_t stride = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.shape[d] = o.dims[lead + d];
    t.strides[d] = stride;
    stride *= t.shape[d];
  }
  int64_t offset = 0;
  for (size_t k = lead; k-- > 0;) {  // leading dims, innermost first; size 1 broadcasts
    if (o.dims[k] != 1) offset += index[k] * stride;
    stride *= o.dims[k];
  }
  t.data = o.data + offset * DTypeSize(o.dtype);
  return t;
}

}  // namespace

ffi::Error RunSlices(const char* op, Device device, ffi::RemainingArgs args,
                     ffi::RemainingRets rets, ffi::Span<const int64_t> ranks, size_t n_in,
                     size_t n_out, const SliceFn& fn) {
  if (args.size() != n_in || rets.size() != n_out || ranks.size() != n_in + n_out) {
    return ffi::Error::Internal(
        std::string(op) + ": the JAX wrapper passed " + std::to_string(args.size()) +
        " operands, " + std::to_string(rets.size()) + " results and " +
        std::to_string(ranks.size()) + " ranks; expected " + std::to_string(n_in) + ", " +
        std::to_string(n_out) + ", " + std::to_string(n_in + n_out));
  }
  std::vector<Operand> operands(n_in + n_out);
  for (size_t i = 0; i < n_in; ++i) {
    auto b = args.get<ffi::AnyBuffer>(i);
    if (b.has_error()) return b.error();
    if (auto e = Decoded(op, "operand", i, *b, ranks[i], &operands[i]); e.failure()) return e;
  }
  for (size_t i = 0; i < n_out; ++i) {
    auto r = rets.get<ffi::AnyBuffer>(i);
    if (r.has_error()) return r.error();
    if (auto e = Decoded(op, "result", i, **r, ranks[n_in + i], &operands[n_in + i]); e.failure()) {
      return e;
    }
  }
  // The leading (vmap) dims: those of the first result, which has them in full.
  const Operand& first = operands[n_in];
  const int64_t lead = static_cast<int64_t>(first.dims.size()) - first.base_rank;
  if (lead < 0 || first.base_rank < 0) {
    return ffi::Error::Internal(std::string(op) + ": result 0 below its rank");
  }
  const std::vector<int64_t> batch(first.dims.begin(), first.dims.begin() + lead);
  for (size_t i = 0; i < operands.size(); ++i) {
    const Operand& o = operands[i];
    if (o.base_rank < 0) continue;  // absent, whatever its shape
    bool ok = static_cast<int64_t>(o.dims.size()) == o.base_rank + lead;
    for (int64_t k = 0; ok && k < lead; ++k) ok = o.dims[k] == 1 || o.dims[k] == batch[k];
    if (!ok) {
      return ffi::Error::Internal(std::string(op) + ": operand " + std::to_string(i) +
                                  " does not have the leading dims of a vmap over result 0");
    }
  }
  int64_t slices = 1;
  for (int64_t b : batch) slices *= b;

  std::vector<int64_t> index(batch.size(), 0);
  std::vector<Tensor> in(n_in), out(n_out);
  for (int64_t s = 0; s < slices; ++s) {
    for (int64_t k = lead, rest = s; k-- > 0;) {
      index[k] = rest % batch[k];
      rest /= batch[k];
    }
    for (size_t i = 0; i < n_in; ++i) in[i] = SliceView(operands[i], device, batch, index);
    for (size_t i = 0; i < n_out; ++i) out[i] = SliceView(operands[n_in + i], device, batch, index);
    const Status status = fn(in, out);
    if (!status.ok()) return ffi::Error(ToErrorCode(status.code()), status.message());
  }
  return ffi::Error::Success();
}

ffi::Error RunOverSlices(const char* op, ffi::ThreadPool pool, ffi::RemainingArgs args,
                         ffi::RemainingRets rets, ffi::Span<const int64_t> ranks, size_t n_in,
                         size_t n_out, const SliceFn& fn) {
  XlaPool xla_pool(pool);
  // Without an intra-op pool (num_threads 0) the ops run on the library's own worker pool.
  ScopedExecutor scope(pool.num_threads() > 0 ? &xla_pool : CurrentExecutor());
  return RunSlices(op, Device::kCpu, args, rets, ranks, n_in, n_out, fn);
}

Status CopyInto(const Tensor& src, const Tensor& dst, const char* what) {
  bool same = src.defined() && dst.defined() && src.rank == dst.rank && src.dtype == dst.dtype &&
              src.device == dst.device;
  for (int d = 0; same && d < src.rank; ++d) same = src.shape[d] == dst.shape[d];
  if (!same) {
    return Status::InvalidArgument(std::string(what) +
                                   ": expected the updated state to have the "
                                   "input state's shape, dtype and device, given " +
                                   src.shape_string() + " and " + dst.shape_string());
  }
  const int64_t bytes = src.numel() * DTypeSize(src.dtype);
  if (dst.device == Device::kCuda) {
#ifdef SSMKIT_HAS_CUDA
    return CopyOnCudaStream(src, dst, bytes, what);
#else
    return Status::Unsupported(std::string(what) +
                               ": CUDA buffers, but ssmkit was built "
                               "without the CUDA backend");
#endif
  }
  std::memcpy(dst.data, src.data, static_cast<size_t>(bytes));
  return Status::Ok();
}

}  // namespace ssmkit::python
