#include "model/device_weights.hpp"

#include <algorithm>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/quant.hpp"
#include "core/round_up.hpp"

namespace ssmkit::model {
namespace {

// Every tensor's offset is a multiple of this: cuBLAS's fastest kernels want 16-byte aligned
// operands, and 256 is what cudaMalloc itself guarantees.
constexpr int64_t kAlignBytes = 256;

// A tensor of the device copy: its view (still the host's until uploaded) and whether it is a
// matrix the projections read (bf16 on the device) or an f32 tensor.
struct Item {
  Tensor* view;
  bool matrix;
  const void* host_data = nullptr;
  int64_t offset = 0;
};

void Collect(ModelWeights* w, std::vector<Item>* items) {
  auto add = [&](std::initializer_list<Tensor*> tensors, bool matrix) {
    for (Tensor* t : tensors) {
      if (t->defined()) items->push_back({t, matrix, t->data});
    }
  };
  add({&w->embedding, &w->lm_head}, true);
  add({&w->norm_f}, false);
  for (Block& b : w->blocks) {
    Mamba1Weights& m1 = b.mamba1;
    Mamba2Weights& m2 = b.mamba2;
    m1.A_log = Tensor{};
    m2.A_log = Tensor{};
    add({&m1.in_proj, &m1.x_proj, &m1.dt_proj, &m1.out_proj, &m2.in_proj, &m2.out_proj}, true);
    add({&b.norm,
         &m1.in_proj_bias,
         &m1.conv_weight,
         &m1.conv_bias,
         &m1.dt_norm,
         &m1.b_norm,
         &m1.c_norm,
         &m1.dt_bias,
         &m1.A,
         &m1.D,
         &m1.out_proj_bias,
         &m2.in_proj_bias,
         &m2.in_proj_scale,
         &m2.conv_weight,
         &m2.conv_bias,
         &m2.dt_bias,
         &m2.A,
         &m2.D,
         &m2.gated_norm,
         &m2.out_proj_bias},
        false);
  }
}

int64_t DeviceBytes(const Item& item) { return item.view->numel() * (item.matrix ? 2 : 4); }

// The host tensor as the device holds it: a matrix's rows widened (or decoded) to f32 and
// rounded to bf16, any other tensor as f32.
Status Stage(const Item& item, std::vector<uint8_t>* staging) {
  const Tensor& t = *item.view;
  if (!t.is_contiguous() && !DTypeIsQuantized(t.dtype)) {
    return Status::Internal("device weights: a non-contiguous weight " + t.shape_string());
  }
  staging->resize(static_cast<size_t>(DeviceBytes(item)));
  const int64_t cols = t.shape[t.rank - 1], rows = t.numel() / cols;
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    if (DTypeIsQuantized(t.dtype)) {
      quant::DequantizeRow(t.dtype,
                           static_cast<const uint8_t*>(t.data) + r * DTypeRowBytes(t.dtype, cols),
                           cols, row.data());
    } else {
      RowToF32(t.data, t.dtype, r * cols, cols, row.data());
    }
    if (item.matrix) {
      uint16_t* out = reinterpret_cast<uint16_t*>(staging->data()) + r * cols;
      for (int64_t k = 0; k < cols; ++k) out[k] = F32ToBf16(row[k]);
    } else {
      std::copy(row.begin(), row.end(), reinterpret_cast<float*>(staging->data()) + r * cols);
    }
  }
  return Status::Ok();
}

}  // namespace

Status DeviceWeights::Upload(const ModelWeights& host, std::unique_ptr<DeviceWeights>* out) {
  auto d = std::make_unique<DeviceWeights>();
  ModelWeights& w = d->weights_;
  w.embedding = host.embedding;
  w.blocks = host.blocks;
  w.norm_f = host.norm_f;
  w.lm_head = host.lm_head;
  w.ssm_caches = host.ssm_caches;
  w.kv_caches = host.kv_caches;
  w.parameter_count = host.parameter_count;
  std::vector<Item> items;
  Collect(&w, &items);
  // Offsets; a tensor seen before (a tied LM head) shares the first one's copy.
  std::map<std::pair<const void*, bool>, int64_t> placed;
  int64_t bytes = 0;
  for (Item& item : items) {
    const auto key = std::make_pair(item.host_data, item.matrix);
    const auto it = placed.find(key);
    if (it != placed.end()) {
      item.offset = -1 - it->second;  // a copy of the tensor at it->second
      continue;
    }
    item.offset = bytes;
    placed.emplace(key, bytes);
    bytes += RoundUp(DeviceBytes(item), kAlignBytes);
  }
  SSMKIT_RETURN_IF_ERROR(d->memory_.Allocate("device weights", bytes));
  char* base = static_cast<char*>(d->memory_.data());
  try {
    std::vector<uint8_t> staging;
    for (Item& item : items) {
      const bool shared = item.offset < 0;
      const int64_t offset = shared ? -1 - item.offset : item.offset;
      if (!shared) {
        SSMKIT_RETURN_IF_ERROR(Stage(item, &staging));
        // From pageable memory: returns once staging has been read, so it can be refilled.
        SSMKIT_RETURN_IF_ERROR(
            cuda::CopyToDevice(base + offset, staging.data(), DeviceBytes(item), nullptr));
      }
      Tensor& t = *item.view;
      if (item.matrix) {
        t = Tensor::Contiguous(base + offset, DType::kBF16, {t.shape[0], t.shape[1]},
                               Device::kCuda);
      } else {
        t.data = base + offset;
        t.dtype = DType::kF32;
        t.device = Device::kCuda;
      }
    }
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("device weights: out of host memory while converting them");
  }
  SSMKIT_RETURN_IF_ERROR(cuda::SynchronizeStream(nullptr));
  *out = std::move(d);
  return Status::Ok();
}

}  // namespace ssmkit::model
