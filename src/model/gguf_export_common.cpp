// What the GGUF exporters share: the table of architectures, the general.* keys, the Mamba-2
// and per-layer attention keys, config.json values the converter reads, the size label, and
// the tensor edits (gate/up halves, scaling, experts stacked).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "model/gguf_export_arch.hpp"

namespace ssmkit::model {
namespace {

const GgufExporter* const kExporters[] = {
    &kMambaExporter,     &kMamba2Exporter,       &kGraniteHybridExporter, &kFalconH1Exporter,
    &kNemotronHExporter, &kNemotronHMoeExporter, &kJambaExporter};

// The Hugging Face classes each exporter writes, for messages.
constexpr const char* kWritten[][2] = {
    {"MambaForCausalLM", "mamba"},
    {"Mamba2ForCausalLM", "mamba2"},
    {"GraniteMoeHybridForCausalLM", "granitehybrid"},
    {"BambaForCausalLM", "granitehybrid"},
    {"FalconH1ForCausalLM", "falcon-h1"},
    {"NemotronHForCausalLM", "nemotron_h, nemotron_h_moe"},
    {"JambaForCausalLM", "jamba"},
};

// gguf-py's model_weight_count_rounded_notation: at least two significant digits before the
// point, "K" / "M" / "B" / "T".
std::string RoundedCount(int64_t n) {
  const double x = static_cast<double>(n);
  double scaled = x * 1e-3;
  const char* suffix = "K";
  if (x > 1e12) {
    scaled = x * 1e-12, suffix = "T";
  } else if (x > 1e9) {
    scaled = x * 1e-9, suffix = "B";
  } else if (x > 1e6) {
    scaled = x * 1e-6, suffix = "M";
  }
  // Python's round() (half to even) and len(str(...).lstrip('0')).
  std::string whole = std::to_string(static_cast<long long>(std::nearbyint(scaled)));
  whole.erase(0, whole.find_first_not_of('0') == std::string::npos ? whole.size()
                                                                   : whole.find_first_not_of('0'));
  const int fix = std::max(2 - static_cast<int>(whole.size()), 0);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f%s", fix, scaled, suffix);
  return buf;
}

}  // namespace

const GgufExporter* FindGgufExporter(const ModelConfig& c) {
  const std::string& f = c.family;
  const bool moe = HasMoeBlocks(c);  // Nemotron-H's MoE models: nemotron_h_moe
  const char* arch = f == "granitemoehybrid" || f == "bamba" ? "granitehybrid"
                     : f == "falcon_h1"                      ? "falcon-h1"
                     : f == "nemotron_h" && moe              ? "nemotron_h_moe"
                     : f == "nemotron_h"                     ? "nemotron_h"
                     : f == "jamba"                          ? "jamba"
                     : !c.blocks.empty()                     ? nullptr
                     : c.arch == ModelArch::kMamba2          ? "mamba2"
                                                             : "mamba";
  for (const GgufExporter* e : kExporters) {
    if (arch != nullptr && std::string(arch) == e->arch) return e;
  }
  return nullptr;
}

std::string GgufExporterList() {
  std::string s;
  for (const auto& [cls, arch] : kWritten) {
    s += (s.empty() ? "" : ", ") + std::string(cls) + " (" + arch + ")";
  }
  return s;
}

Status CheckSiluActivation(const ModelConfig& c, const std::string& input, const char* arch) {
  if (c.ffn.activation == "silu") return Status::Ok();
  return Status::Unsupported(input + ": " + c.hf_architecture() + ": hidden_act '" +
                             c.ffn.activation + "': llama.cpp's " + arch + " takes silu only");
}

bool HasMoeBlocks(const ModelConfig& c) {
  for (const BlockSpec& b : c.block_list()) {
    if (b.kind == BlockKind::kMoe) return true;
  }
  return false;
}

void AddGeneralKeys(const ExportInput& in, const char* arch, GgufWriter* w) {
  w->AddString("general.architecture", arch);
  w->AddString("general.type", "model");
  w->AddString("general.name", in.name);
  w->AddU32("general.file_type", GgufFileType(in.type));
}

void AddMamba2Keys(const ModelConfig& c, const std::string& arch, GgufWriter* w) {
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  w->AddU32(arch + ".ssm.conv_kernel", u32(c.d_conv));
  w->AddU32(arch + ".ssm.state_size", u32(c.d_state));
  w->AddU32(arch + ".ssm.group_count", u32(c.ngroups));
  w->AddU32(arch + ".ssm.inner_size", u32(c.d_inner));
  w->AddU32(arch + ".ssm.time_step_rank", u32(c.nheads));
}

void AddPerLayerKvHeads(const ModelConfig& c, const std::string& arch, GgufWriter* w) {
  std::vector<int32_t> kv(static_cast<size_t>(c.n_layer), 0);
  for (const BlockSpec& b : c.block_list()) {
    if (b.kind == BlockKind::kAttention)
      kv[static_cast<size_t>(b.layer)] = static_cast<int32_t>(c.attention.num_kv_heads);
  }
  w->AddI32s(arch + ".attention.head_count_kv", kv);
}

bool ConfigRopeTheta(const Reader& json, float* theta) {
  const Json& j = json.json();
  for (const char* group : {"rope_parameters", "rope_scaling"}) {
    if (j.contains(group) && j.at(group).is_object() && j.at(group).contains("rope_theta") &&
        j.at(group).at("rope_theta").is_number()) {
      *theta = j.at(group).at("rope_theta").get<float>();
      return true;
    }
  }
  if (!json.Has("rope_theta") || !json.json().at("rope_theta").is_number()) return false;
  *theta = json.json().at("rope_theta").get<float>();
  return true;
}

float ConfigFloat(const Reader& json, const char* key, float fallback) {
  float v = fallback;
  return json.Float(key, &v).ok() ? v : fallback;
}

std::string GgufSizeLabel(
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors) {
  // gguf-py's GGUFWriter.get_total_parameter_count and size_label: a stacked-expert tensor
  // ("_exps.", (E, ...)) counts one expert's share; the label is "<E>x<shared + one expert>"
  // when there are experts, else the total.
  int64_t total = 0, shared = 0, expert = 0, expert_sum = 0, expert_tensors = 0;
  for (const auto& [name, shape] : tensors) {
    int64_t size = 1;
    for (int64_t s : shape) size *= s;
    total += size;
    if (name.find("_exps.") != std::string::npos && shape.size() >= 3) {
      const int64_t e = shape[shape.size() - 3];
      expert += size / e;
      expert_sum += e;
      expert_tensors += 1;
    } else {
      shared += size;
    }
  }
  if (expert_tensors == 0) return RoundedCount(total);
  return std::to_string(expert_sum / expert_tensors) + "x" + RoundedCount(shared + expert);
}

void SplitHalves(const ExportTensor& t, const std::string& first, const std::string& second,
                 std::vector<ExportTensor>* out) {
  const size_t n = t.shape.size();
  const int64_t cols = n >= 2 ? t.shape[n - 1] : 1;
  const int64_t rows = n >= 2 ? t.shape[n - 2] : t.shape[0];
  const int64_t half = rows / 2;
  const int64_t outer = static_cast<int64_t>(t.values.size()) / (rows * cols);
  std::vector<int64_t> shape = t.shape;
  shape[n >= 2 ? n - 2 : 0] = half;
  for (int s = 0; s < 2; ++s) {
    ExportTensor part{s == 0 ? first : second, shape, {}};
    part.values.reserve(static_cast<size_t>(outer * half * cols));
    for (int64_t o = 0; o < outer; ++o) {
      const auto begin = t.values.begin() + (o * rows + s * half) * cols;
      part.values.insert(part.values.end(), begin, begin + half * cols);
    }
    out->push_back(std::move(part));
  }
}

void Scale(ExportTensor* t, float s) {
  for (float& v : t->values) v *= s;
}

Status ExpertStacks::Add(ExportTensor t, std::vector<ExportTensor>* out) {
  // "<p>experts.<e>.<w>.weight" -> p + "experts.", e, w
  const std::string key = "experts.", suffix = ".weight";
  const size_t at = t.name.rfind(key);
  const size_t digits = at == std::string::npos ? 0 : at + key.size();
  const size_t dot = at == std::string::npos ? std::string::npos : t.name.find('.', digits);
  const bool expert = dot != std::string::npos && dot > digits && dot - digits <= 9 &&
                      t.name.find_first_not_of("0123456789", digits) == dot &&
                      t.name.size() > suffix.size() &&
                      t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
                      t.name.size() > dot + 1 + suffix.size();
  if (!expert) {
    out->push_back(std::move(t));
    return Status::Ok();
  }
  const int64_t e = std::stoll(t.name.substr(digits, dot - digits));
  const std::string stacked =
      t.name.substr(0, digits) + t.name.substr(dot + 1, t.name.size() - dot - 1 - suffix.size());
  if (e >= experts_) {
    return Status::InvalidArgument(input_ + ": tensor '" + t.name + "': expert " +
                                   std::to_string(e) + ", expected one of the " +
                                   std::to_string(experts_) + " experts of the config");
  }
  Stack& s = stacks_[stacked];
  if (s.values.empty()) {
    s.values.resize(static_cast<size_t>(experts_));
    s.shape = t.shape;
  }
  if (t.shape != s.shape || !s.values[static_cast<size_t>(e)].empty()) {
    return Status::InvalidArgument(input_ + ": tensor '" + t.name +
                                   "': a second tensor of that expert, or a shape other than "
                                   "the other experts' of '" +
                                   stacked + "'");
  }
  s.values[static_cast<size_t>(e)] = std::move(t.values);
  if (++s.seen < experts_) return Status::Ok();
  ExportTensor whole{stacked, {experts_}, {}};
  whole.shape.insert(whole.shape.end(), s.shape.begin(), s.shape.end());
  for (std::vector<float>& v : s.values) {
    whole.values.insert(whole.values.end(), v.begin(), v.end());
    std::vector<float>().swap(v);
  }
  out->push_back(std::move(whole));
  return Status::Ok();
}

Status ExpertStacks::CheckComplete() const {
  for (const auto& [name, s] : stacks_) {
    if (s.seen < experts_) {
      return Status::InvalidArgument(input_ + ": '" + name + "' has tensors of " +
                                     std::to_string(s.seen) + " experts, expected " +
                                     std::to_string(experts_) + ", the config's expert count");
    }
  }
  return Status::Ok();
}

}  // namespace ssmkit::model
