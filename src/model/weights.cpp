#include "model/weights.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "core/dtype.hpp"
#include "core/quant.hpp"
#include "ssmkit/quant.hpp"
#include "model/tensor_names.hpp"

namespace ssmkit::model {
namespace {

// "'a'" or "'a' (or 'b')".
std::string NameList(const std::vector<std::string>& names) {
  std::string s = "'" + names[0] + "'";
  for (size_t i = 1; i < names.size(); ++i) s += (i == 1 ? " (or '" : ", '") + names[i] + "'";
  return names.size() > 1 ? s + ")" : s;
}

// What the config describes, for messages: "a mamba1 model with 2 layers".
std::string ModelDescription(const ModelConfig& c) {
  const std::string kind = c.family.empty() ? ModelArchName(c.arch) : c.family;
  return "a " + kind + " model with " + std::to_string(c.n_layer) + " layers";
}

// Uniform floats in [0, 1) from splitmix64: several times faster than std::mt19937 with
// uniform_real_distribution, which dominated the set-up of a 130m benchmark model; the values
// of random weights do not matter to its speed.
class UnitRandom {
 public:
  explicit UnitRandom(uint64_t seed) : state_(seed) {}
  float operator()() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return static_cast<float>((z ^ (z >> 31)) >> 40) * 0x1.0p-24f;
  }

 private:
  uint64_t state_;
};

uint8_t* Allocate(ModelWeights* w, int64_t bytes) {
  w->owned.emplace_back(new uint8_t[static_cast<size_t>(std::max<int64_t>(bytes, 1))]);
  return w->owned.back().get();
}

// Fills a slot's target from f32 values (a checkpoint tensor read element by element, or
// random values), converting or transforming as its kind says.
void BindVector(const TensorSlot& s, const std::function<float(int64_t)>& value, ModelWeights* w) {
  const int64_t n = Numel(s.shape);
  float* data = reinterpret_cast<float*>(Allocate(w, n * 4));
  for (int64_t i = 0; i < n; ++i) {
    const float v = value(i);
    data[i] = s.kind == SlotKind::kNegExp ? -std::exp(v) : v;
  }
  *s.target = ContiguousView(data, DType::kF32, s.view_shape.empty() ? s.shape : s.view_shape);
}

Status Finish(const TensorPlan& plan) {
  for (const auto& f : plan.finish) SSMKIT_RETURN_IF_ERROR(f());
  return Status::Ok();
}

}  // namespace

Status BindWeights(const ModelConfig& config, const WeightSource& source, ModelWeights* weights) {
  SSMKIT_RETURN_IF_ERROR(config.Validate());
  ModelWeights w;
  TensorPlan plan;
  SSMKIT_RETURN_IF_ERROR(PlanTensors(config, &source, &w, &plan));
  std::set<std::string> used;
  const std::string files = source.description();
  for (const TensorSlot& s : plan.slots) {
    const WeightTensor* t = nullptr;
    for (const std::string& name : s.names) {
      if ((t = source.Find(name)) != nullptr) break;
    }
    if (t == nullptr) {
      return Status::InvalidArgument(files + ": missing tensor " + NameList(s.names) + " " +
                                     ShapeString(s.shape) + " (" + ModelDescription(config) +
                                     ", from config.json)");
    }
    const std::string where = t->file + ": tensor '" + t->name + "': ";
    const bool quantized_matrix = t->quantized && s.kind == SlotKind::kMatrix;
    if (!t->float_dtype && !quantized_matrix) {
      return Status::InvalidArgument(where + "dtype " + t->dtype_name +
                                     (s.kind == SlotKind::kMatrix
                                          ? ", expected F32, BF16, F16 or a quantized type (Q8_0, "
                                            "Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)"
                                          : ", expected F32, BF16 or F16"));
    }
    if (t->shape != s.shape) {
      return Status::InvalidArgument(where + "shape " + t->shape_string() + ", expected " +
                                     ShapeString(s.shape) + " (from config.json)");
    }
    // A tensor bound by several blocks (Zamba2's shared blocks) counts once.
    if (used.insert(t->name).second) w.parameter_count += t->numel();
    if (s.kind == SlotKind::kMatrix) {
      *s.target = t->view();
      continue;
    }
    if (s.raw != nullptr) *s.raw = t->view();
    BindVector(
        s, [t](int64_t i) { return LoadAsF32(t->data, t->dtype, i); }, &w);
  }
  for (const auto& [name, t] : source.tensors()) {
    if (used.count(name)) continue;
    const bool ignored = std::any_of(
        plan.ignored_prefixes.begin(), plan.ignored_prefixes.end(),
        [&name = name](const std::string& p) { return name.compare(0, p.size(), p) == 0; });
    if (ignored) continue;
    return Status::InvalidArgument(t.file + ": unexpected tensor '" + name + "' " +
                                   t.shape_string() + ": not part of " + ModelDescription(config) +
                                   " (config.json)");
  }
  if (config.tie_embeddings) {
    if (const WeightTensor* lm = source.Find("lm_head.weight"); lm && used.count(lm->name))
      w.parameter_count -= lm->numel();
    w.lm_head = w.embedding;
  }
  SSMKIT_RETURN_IF_ERROR(Finish(plan));
  *weights = std::move(w);
  return Status::Ok();
}

Status RandomWeights(const ModelConfig& config, DType dtype, uint64_t seed, ModelWeights* weights) {
  if (dtype == DType::kI32 || dtype == DType::kI64) {
    return Status::InvalidArgument(
        std::string("random weights: dtype ") + DTypeName(dtype) +
        ", expected f32, bf16, f16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k or q6_k");
  }
  SSMKIT_RETURN_IF_ERROR(config.Validate());
  ModelWeights w;
  TensorPlan plan;
  SSMKIT_RETURN_IF_ERROR(PlanTensors(config, nullptr, &w, &plan));
  UnitRandom unit(seed);
  // Uniform with the variance of N(0, 0.02^2).
  const float bound = 0.02f * std::sqrt(3.0f);
  const float conv_bound = 1.0f / std::sqrt(static_cast<float>(config.d_conv));
  for (const TensorSlot& s : plan.slots) {
    const int64_t n = Numel(s.shape);
    const std::string& name = s.names[0];
    w.parameter_count += n;
    if (s.kind == SlotKind::kMatrix) {
      // A quantized dtype: each matrix in it where its rows are whole blocks, quantized from
      // the same uniform values (else q8_0 or f16, as `ssmkit quantize` falls back).
      const int64_t cols = s.shape.back(), rows = n / cols;
      const DType type = quant::MatrixTypeFor(dtype, cols);
      const int64_t row_bytes = DTypeRowBytes(type, cols);
      uint8_t* data = Allocate(&w, rows * row_bytes);
      // Chunks of ~1M values: the generator runs in order, the encoding over the threads (the
      // K-quants' scale searches dominate the set-up of a large model otherwise).
      const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 20) / cols);
      std::vector<float> values(static_cast<size_t>(std::min(rows, chunk) * cols));
      for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t nr = std::min(chunk, rows - r0);
        for (int64_t i = 0; i < nr * cols; ++i) values[i] = (2.0f * unit() - 1.0f) * bound;
        if (DTypeIsQuantized(type)) {
          SSMKIT_RETURN_IF_ERROR(
              QuantizeWeight(Tensor::Contiguous(values.data(), DType::kF32, {nr, cols}),
                             Tensor::Contiguous(data + r0 * row_bytes, type, {nr, cols})));
        } else {
          for (int64_t i = 0; i < nr * cols; ++i)
            StoreFromF32(data + r0 * row_bytes, type, i, values[i]);
        }
      }
      *s.target = ContiguousView(data, type, s.shape);
      continue;
    }
    const bool is_a = s.kind == SlotKind::kNegExp;
    const bool is_conv = name.find("conv1d.weight") != std::string::npos;
    const bool is_dt_bias =
        name.find("dt_bias") != std::string::npos || name.find("dt_proj.bias") != std::string::npos;
    const bool is_bias = name.find(".bias") != std::string::npos && !is_dt_bias;
    const int64_t inner = s.shape.back();
    BindVector(
        s,
        [&](int64_t i) -> float {
          if (is_a) return std::log(static_cast<float>(i % inner + 1));
          if (is_conv) return (2.0f * unit() - 1.0f) * conv_bound;
          if (is_dt_bias) {
            const float dt =
                std::exp(unit() * (std::log(0.1f) - std::log(1e-3f)) + std::log(1e-3f));
            return dt + std::log(-std::expm1(-dt));  // softplus^-1(dt)
          }
          return is_bias ? 0.0f : 1.0f;  // norms and D
        },
        &w);
  }
  if (config.tie_embeddings) w.lm_head = w.embedding;
  SSMKIT_RETURN_IF_ERROR(Finish(plan));
  *weights = std::move(w);
  return Status::Ok();
}

int64_t DecodeWeightBytes(const ModelConfig& config, const ModelWeights& w) {
  auto bytes = [](const Tensor& t) -> int64_t {
    if (!t.defined()) return 0;
    const int64_t row = t.shape[t.rank - 1];
    return t.numel() / row * DTypeRowBytes(t.dtype, row);
  };
  auto mlp = [&](const MlpWeights& m) {
    return bytes(m.gate) + bytes(m.up) + bytes(m.down) + bytes(m.gate_bias) + bytes(m.up_bias) +
           bytes(m.down_bias);
  };
  auto adapter = [&](const Adapter& a) { return bytes(a.a) + bytes(a.b); };
  int64_t total = bytes(w.lm_head) + DTypeRowBytes(w.embedding.dtype, config.d_model);
  for (const Block& b : w.blocks) {
    total += bytes(b.norm) + bytes(b.ffn_norm) + bytes(b.out_linear);
    const Mamba1Weights& m1 = b.mamba1;
    total += bytes(m1.in_proj) + bytes(m1.x_proj) + bytes(m1.dt_proj) + bytes(m1.out_proj) +
             bytes(m1.A) + bytes(m1.conv_weight) + bytes(m1.D) + bytes(m1.dt_bias);
    const Mamba2Weights& m2 = b.mamba2;
    total += bytes(m2.in_proj) + bytes(m2.out_proj) + bytes(m2.conv_weight) + bytes(m2.gated_norm);
    const AttentionWeights& a = b.attention;
    total += bytes(a.q) + bytes(a.k) + bytes(a.v) + bytes(a.o) + adapter(a.q_adapter) +
             adapter(a.k_adapter) + adapter(a.v_adapter);
    const FeedForwardWeights& f = b.ffn;
    total += mlp(f.mlp) + adapter(f.gate_up_adapter) + bytes(f.router) + mlp(f.shared_expert);
    for (const MlpWeights& e : f.experts) total += mlp(e);
  }
  return total;
}

}  // namespace ssmkit::model
