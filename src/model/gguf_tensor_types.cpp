// llama-quantize's K-quant mixes, as model/gguf_tensor_types.hpp states them. The rules, for the
// four mixes (M: Q4_K_M, Q5_K_M; default type q4_k for Q4_K_*, q5_k for Q5_K_*):
//
//   output.weight, and token_embd.weight when there is no output.weight   q6_k (q8_0 when its
//                                                                          rows are not whole
//                                                                          blocks of the default)
//   attn_v kind, the i-th of n                    M: q6_k where MoreBits(i, n); Q4_K_S: q5_k for
//                                                 i < 4; q8_0 in a model of exactly 8 experts
//   attn_k                                        q8_0 in a model of exactly 8 experts
//   attn_output                                   Q4_K_*: q5_k in a model of exactly 8 experts
//   ffn_down kind, layer i of n = block_count     M: q6_k where MoreBits(i, n); Q4_K_S: q5_k for
//                                                 i < n / 8
//
// where MoreBits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2: the first and last eighth of
// the layers and every third one between them. The "layer" of an ffn_down is its position among
// the file's ffn_down tensors, not the layer in its name, unless the model has more than one
// expert: llama-quantize counts them, so a hybrid whose MLPs sit in some layers only has them
// measured against all of its layers.
#include "model/gguf_tensor_types.hpp"

#include <algorithm>
#include <numeric>

#include "model/gguf_arch.hpp"
#include "model/gguf_names.hpp"
#include "ssmkit/quant.hpp"

namespace ssmkit::model {
namespace {

// llama-quantize's tensor categories (tensor_get_category), those the four mixes treat apart;
// tested in its order, so that a name is of the first kind it matches.
enum class Kind { kOutput, kTokenEmbd, kAttnV, kAttnK, kAttnOutput, kFfnDown, kOther };

Kind KindOf(const std::string& name) {
  auto has = [&](const char* part) { return name.find(part) != std::string::npos; };
  if (name == "output.weight") return Kind::kOutput;
  if (name == "token_embd.weight" || name == "per_layer_token_embd.weight") return Kind::kTokenEmbd;
  if (has("attn_qkv.weight") || has("attn_kv_b.weight") || has("attn_v.weight"))
    return Kind::kAttnV;
  if (has("attn_k.weight")) return Kind::kAttnK;
  if (has("attn_q.weight")) return Kind::kOther;
  if (has("attn_output.weight")) return Kind::kAttnOutput;
  if (has("ffn_up") || has("ffn_gate")) return Kind::kOther;
  if (has("ffn_down")) return Kind::kFfnDown;
  return Kind::kOther;
}

bool MoreBits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

constexpr struct {
  const char* name;
  QuantizeType type;
  uint32_t file_type;  // llama_ftype
} kMixes[] = {
    {"q4_k_s", {DType::kQ4_K, QuantMix::kQ4_K_S}, 14},
    {"q4_k_m", {DType::kQ4_K, QuantMix::kQ4_K_M}, 15},
    {"q5_k_s", {DType::kQ5_K, QuantMix::kQ5_K_S}, 16},
    {"q5_k_m", {DType::kQ5_K, QuantMix::kQ5_K_M}, 17},
};

}  // namespace

bool QuantizeTypeFromName(const std::string& name, QuantizeType* type) {
  for (const auto& m : kMixes) {
    if (name == m.name) {
      *type = m.type;
      return true;
    }
  }
  DType dtype;
  if (!DTypeFromName(name, &dtype) || dtype == DType::kI32 || dtype == DType::kI64) return false;
  *type = {dtype, QuantMix::kNone};
  return true;
}

uint32_t GgufFileType(QuantizeType type) {
  for (const auto& m : kMixes) {
    if (type.mix == m.type.mix && type.mix != QuantMix::kNone) return m.file_type;
  }
  switch (type.matrices) {
    case DType::kF16:
      return 1;
    case DType::kQ4_0:
      return 2;
    case DType::kQ4_1:
      return 3;
    case DType::kQ5_0:
      return 8;
    case DType::kQ5_1:
      return 9;
    case DType::kQ8_0:
      return 7;
    case DType::kQ4_K:
      return 14;
    case DType::kQ5_K:
      return 16;
    case DType::kQ6_K:
      return 18;
    case DType::kBF16:
      return 32;
    default:
      return 0;  // ALL_F32
  }
}

DType MixedMatrixType(QuantMix mix, DType base, const std::string& name, int64_t cols,
                      int64_t kind_index, const MixCounts& counts) {
  const bool m = mix == QuantMix::kQ4_K_M || mix == QuantMix::kQ5_K_M;
  const bool q4 = mix == QuantMix::kQ4_K_S || mix == QuantMix::kQ4_K_M;
  const bool eight_experts = counts.n_expert == 8;
  const Kind kind = KindOf(name);
  if (kind == Kind::kOutput || (kind == Kind::kTokenEmbd && counts.tied_output))
    return cols % DTypeBlockElements(base) != 0 ? DType::kQ8_0 : DType::kQ6_K;
  switch (kind) {
    case Kind::kAttnV: {
      DType t = base;
      if (m && MoreBits(kind_index, counts.n_attn_v)) {
        t = DType::kQ6_K;
      } else if (mix == QuantMix::kQ4_K_S && kind_index < 4) {
        t = DType::kQ5_K;
      }
      return eight_experts ? DType::kQ8_0 : t;
    }
    case Kind::kAttnK:
      return eight_experts ? DType::kQ8_0 : base;
    case Kind::kAttnOutput:
      return eight_experts && q4 ? DType::kQ5_K : base;
    case Kind::kFfnDown: {
      std::string rest;
      const int64_t in_name = counts.n_expert > 1 ? SplitGgufLayer(name, &rest) : -1;
      const int64_t layer = in_name >= 0 ? in_name : kind_index;
      if (m && MoreBits(layer, counts.n_layer)) return DType::kQ6_K;
      if (mix == QuantMix::kQ4_K_S && layer < counts.n_layer / 8) return DType::kQ5_K;
      return base;
    }
    default:
      return base;
  }
}

std::vector<DType> ChooseTensorTypes(
    QuantizeType type, const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
    int64_t n_layer, int64_t n_expert) {
  MixCounts counts{n_layer, n_expert, 0, true};
  for (const auto& [name, shape] : tensors) {
    counts.n_attn_v += KindOf(name) == Kind::kAttnV;
    if (name == "output.weight") counts.tied_output = false;
  }
  // llama-quantize visits the tensors by layer (-1 before blk.0), then by name, counting the
  // attn_v and ffn_down kinds as it goes.
  std::vector<int64_t> layer(tensors.size());
  std::string rest;
  for (size_t i = 0; i < tensors.size(); ++i) layer[i] = SplitGgufLayer(tensors[i].first, &rest);
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return layer[a] != layer[b] ? layer[a] < layer[b] : tensors[a].first < tensors[b].first;
  });
  std::vector<DType> out(tensors.size(), DType::kF32);
  int64_t seen_attn_v = 0, seen_ffn_down = 0;
  for (size_t i : order) {
    const auto& [name, shape] = tensors[i];
    if (!IsGgufMatrixName(name) || shape.size() < 2) continue;
    if (type.mix == QuantMix::kNone) {
      out[i] = type.matrices;
      continue;
    }
    const Kind kind = KindOf(name);
    const int64_t kind_index = kind == Kind::kAttnV     ? seen_attn_v++
                               : kind == Kind::kFfnDown ? seen_ffn_down++
                                                        : 0;
    out[i] = MixedMatrixType(type.mix, type.matrices, name, shape.back(), kind_index, counts);
  }
  return out;
}

}  // namespace ssmkit::model
