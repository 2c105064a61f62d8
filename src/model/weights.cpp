#include "model/weights.hpp"

#include <cmath>
#include <functional>
#include <set>

#include "core/dtype.hpp"

namespace ssmkit::model {
namespace {

// How a checkpoint tensor becomes a model parameter.
enum class Kind {
  kMatrix,  // kept as a view in the checkpoint's dtype
  kVector,  // copied to f32
  kNegExp,  // copied to f32 as -exp(v): A from A_log (the view of A_log is kept too)
};

// One expected tensor: its name, shape, and where the bound view goes.
struct Slot {
  std::string name;
  std::vector<int64_t> shape;
  Kind kind;
  Tensor* target;
  Tensor* raw = nullptr;  // kNegExp: receives the stored A_log view
  // A shape the model uses instead of the stored one (conv weights (C, 1, K) -> (C, K)).
  std::vector<int64_t> view_shape = {};
};

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
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

// The slots of a model: every tensor name the config calls for.
std::vector<Slot> ExpectedSlots(const ModelConfig& c, ModelWeights* w, bool lm_head_slot) {
  const int64_t d = c.d_model, V = c.vocab_size, D = c.d_inner, N = c.d_state, K = c.d_conv;
  const int64_t C = c.conv_dim();
  std::vector<Slot> slots;
  const std::string embedding_name =
      c.format == "state-spaces" ? "backbone.embedding.weight" : "backbone.embeddings.weight";
  slots.push_back({embedding_name, {V, d}, Kind::kMatrix, &w->embedding});
  auto add_common = [&](const std::string& p, Tensor* norm, Tensor* in_proj, Tensor* in_bias,
                        Tensor* conv_w, Tensor* conv_b, Tensor* out_proj, Tensor* out_bias) {
    slots.push_back({p + "norm.weight", {d}, Kind::kVector, norm});
    slots.push_back({p + "mixer.in_proj.weight", {c.in_proj_dim(), d}, Kind::kMatrix, in_proj});
    if (c.proj_bias)
      slots.push_back({p + "mixer.in_proj.bias", {c.in_proj_dim()}, Kind::kVector, in_bias});
    slots.push_back({p + "mixer.conv1d.weight", {C, 1, K}, Kind::kVector, conv_w, nullptr, {C, K}});
    if (c.conv_bias) slots.push_back({p + "mixer.conv1d.bias", {C}, Kind::kVector, conv_b});
    slots.push_back({p + "mixer.out_proj.weight", {d, D}, Kind::kMatrix, out_proj});
    if (c.proj_bias) slots.push_back({p + "mixer.out_proj.bias", {d}, Kind::kVector, out_bias});
  };
  if (c.arch == ModelArch::kMamba1) {
    w->mamba1.resize(static_cast<size_t>(c.n_layer));
    for (int64_t i = 0; i < c.n_layer; ++i) {
      Mamba1Layer& l = w->mamba1[static_cast<size_t>(i)];
      const std::string p = "backbone.layers." + std::to_string(i) + ".";
      add_common(p, &l.norm, &l.in_proj, &l.in_proj_bias, &l.conv_weight, &l.conv_bias, &l.out_proj,
                 &l.out_proj_bias);
      const int64_t R = c.dt_rank;
      slots.push_back({p + "mixer.x_proj.weight", {R + 2 * N, D}, Kind::kMatrix, &l.x_proj});
      slots.push_back({p + "mixer.dt_proj.weight", {D, R}, Kind::kMatrix, &l.dt_proj});
      slots.push_back({p + "mixer.dt_proj.bias", {D}, Kind::kVector, &l.dt_bias});
      slots.push_back({p + "mixer.A_log", {D, N}, Kind::kNegExp, &l.A, &l.A_log});
      slots.push_back({p + "mixer.D", {D}, Kind::kVector, &l.D});
    }
  } else {
    const int64_t H = c.nheads;
    w->mamba2.resize(static_cast<size_t>(c.n_layer));
    for (int64_t i = 0; i < c.n_layer; ++i) {
      Mamba2Layer& l = w->mamba2[static_cast<size_t>(i)];
      const std::string p = "backbone.layers." + std::to_string(i) + ".";
      add_common(p, &l.norm, &l.in_proj, &l.in_proj_bias, &l.conv_weight, &l.conv_bias, &l.out_proj,
                 &l.out_proj_bias);
      slots.push_back({p + "mixer.dt_bias", {H}, Kind::kVector, &l.dt_bias});
      slots.push_back({p + "mixer.A_log", {H}, Kind::kNegExp, &l.A, &l.A_log});
      if (c.d_per_channel) {
        slots.push_back({p + "mixer.D", {D}, Kind::kVector, &l.D, nullptr, {H, c.headdim}});
      } else {
        slots.push_back({p + "mixer.D", {H}, Kind::kVector, &l.D});
      }
      slots.push_back({p + "mixer.norm.weight", {D}, Kind::kVector, &l.gated_norm});
    }
  }
  slots.push_back({"backbone.norm_f.weight", {d}, Kind::kVector, &w->norm_f});
  if (lm_head_slot) slots.push_back({"lm_head.weight", {V, d}, Kind::kMatrix, &w->lm_head});
  return slots;
}

// Fills a slot's target from f32 values (a checkpoint tensor read element by element, or
// random values), converting or transforming as its kind says.
void BindVector(const Slot& s, const std::function<float(int64_t)>& value, ModelWeights* w) {
  const int64_t n = Numel(s.shape);
  float* data = reinterpret_cast<float*>(Allocate(w, n * 4));
  for (int64_t i = 0; i < n; ++i) {
    const float v = value(i);
    data[i] = s.kind == Kind::kNegExp ? -std::exp(v) : v;
  }
  *s.target = ContiguousView(data, DType::kF32, s.view_shape.empty() ? s.shape : s.view_shape);
}

}  // namespace

Status BindWeights(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint,
                   ModelWeights* weights) {
  ModelWeights w;
  // A tied model may still carry lm_head.weight (mamba_ssm saves both names of the one
  // tensor); it is checked and then unused, as transformers does.
  const bool lm_head_stored = checkpoint.Find("lm_head.weight") != nullptr;
  const std::vector<Slot> slots =
      ExpectedSlots(config, &w, !config.tie_embeddings || lm_head_stored);
  std::set<std::string> used;
  const std::string files = checkpoint.description();
  for (const Slot& s : slots) {
    const SafetensorsTensor* t = checkpoint.Find(s.name);
    if (t == nullptr) {
      return Status::InvalidArgument(files + ": missing tensor '" + s.name + "' " +
                                     ShapeString(s.shape) + " (a " + ModelArchName(config.arch) +
                                     " model with " + std::to_string(config.n_layer) +
                                     " layers, from config.json)");
    }
    const std::string where = t->file + ": tensor '" + s.name + "': ";
    if (!t->float_dtype) {
      return Status::InvalidArgument(where + "dtype " + t->dtype_name +
                                     ", expected F32, BF16 or F16");
    }
    if (t->shape != s.shape) {
      return Status::InvalidArgument(where + "shape " + t->shape_string() + ", expected " +
                                     ShapeString(s.shape) + " (from config.json)");
    }
    used.insert(s.name);
    w.parameter_count += t->numel();
    if (s.kind == Kind::kMatrix) {
      *s.target = t->view();
      continue;
    }
    if (s.raw != nullptr) *s.raw = t->view();
    BindVector(
        s, [t](int64_t i) { return LoadAsF32(t->data, t->dtype, i); }, &w);
  }
  for (const auto& [name, t] : checkpoint.tensors()) {
    if (!used.count(name)) {
      return Status::InvalidArgument(t.file + ": unexpected tensor '" + name + "' " +
                                     t.shape_string() + ": not part of a " +
                                     ModelArchName(config.arch) + " model with " +
                                     std::to_string(config.n_layer) + " layers (config.json)");
    }
  }
  if (config.tie_embeddings) {
    if (lm_head_stored) w.parameter_count -= checkpoint.Find("lm_head.weight")->numel();
    w.lm_head = w.embedding;
  }
  *weights = std::move(w);
  return Status::Ok();
}

Status RandomWeights(const ModelConfig& config, DType dtype, uint64_t seed, ModelWeights* weights) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return Status::InvalidArgument(std::string("random weights: dtype ") + DTypeName(dtype) +
                                   ", expected f32, bf16 or f16");
  }
  SSMKIT_RETURN_IF_ERROR(config.Validate());
  ModelWeights w;
  const std::vector<Slot> slots = ExpectedSlots(config, &w, !config.tie_embeddings);
  UnitRandom unit(seed);
  // Uniform with the variance of N(0, 0.02^2).
  const float bound = 0.02f * std::sqrt(3.0f);
  const float conv_bound = 1.0f / std::sqrt(static_cast<float>(config.d_conv));
  for (const Slot& s : slots) {
    const int64_t n = Numel(s.shape);
    w.parameter_count += n;
    if (s.kind == Kind::kMatrix) {
      uint8_t* data = Allocate(&w, n * DTypeSize(dtype));
      for (int64_t i = 0; i < n; ++i) StoreFromF32(data, dtype, i, (2.0f * unit() - 1.0f) * bound);
      *s.target = ContiguousView(data, dtype, s.shape);
      continue;
    }
    const bool is_a = s.kind == Kind::kNegExp;
    const bool is_conv = s.name.find("conv1d.weight") != std::string::npos;
    const bool is_dt_bias = s.name.find("dt_bias") != std::string::npos ||
                            s.name.find("dt_proj.bias") != std::string::npos;
    const bool is_bias = s.name.find(".bias") != std::string::npos && !is_dt_bias;
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
  *weights = std::move(w);
  return Status::Ok();
}

int64_t DecodeWeightBytes(const ModelConfig& config, const ModelWeights& w) {
  auto bytes = [](const Tensor& t) { return t.defined() ? t.numel() * DTypeSize(t.dtype) : 0; };
  int64_t total = bytes(w.lm_head) + config.d_model * DTypeSize(w.embedding.dtype);
  for (const Mamba1Layer& l : w.mamba1) {
    total += bytes(l.in_proj) + bytes(l.x_proj) + bytes(l.dt_proj) + bytes(l.out_proj);
    total += bytes(l.A) + bytes(l.conv_weight) + bytes(l.norm) + bytes(l.D) + bytes(l.dt_bias);
  }
  for (const Mamba2Layer& l : w.mamba2) {
    total += bytes(l.in_proj) + bytes(l.out_proj) + bytes(l.conv_weight) + bytes(l.norm) +
             bytes(l.gated_norm);
  }
  return total;
}

}  // namespace ssmkit::model
