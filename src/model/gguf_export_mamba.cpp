// Writing general.architecture "mamba" (MambaForCausalLM, state-spaces Mamba-1) and "mamba2"
// (Mamba2ForCausalLM): the keys llama.cpp's converter writes (context_length 2^20, as it does:
// a recurrent model has no limit; feed_forward_length and attention.head_count 0), the tensors
// under the names model/gguf_names.cpp maps.
#include <string>

#include "model/gguf_export_arch.hpp"

namespace ssmkit::model {
namespace {

Status CheckMamba(const ModelConfig& c, const std::string& input) {
  if (c.dt_bc_norms || c.d_per_channel) {
    return Status::Unsupported(input + ": " + c.hf_architecture() +
                               ": RMSNorms on dt, B and C, or D per channel, which llama.cpp's "
                               "mamba and mamba2 files do not state");
  }
  return Status::Ok();
}

void AddMambaKeys(const ExportInput& in, GgufWriter* w) {
  const ModelConfig& c = in.config;
  const bool mamba2 = c.arch == ModelArch::kMamba2;
  const std::string a = mamba2 ? "mamba2" : "mamba";
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  AddGeneralKeys(in, a.c_str(), w);
  w->AddU32(a + ".context_length", 1u << 20);
  w->AddU32(a + ".embedding_length", u32(c.d_model));
  w->AddU32(a + ".feed_forward_length", 0);
  w->AddU32(a + ".attention.head_count", 0);
  w->AddU32(a + ".block_count", u32(c.n_layer));
  if (mamba2) {
    AddMamba2Keys(c, a, w);
  } else {
    w->AddU32(a + ".ssm.conv_kernel", u32(c.d_conv));
    w->AddU32(a + ".ssm.inner_size", u32(c.d_inner));
    w->AddU32(a + ".ssm.state_size", u32(c.d_state));
    w->AddU32(a + ".ssm.time_step_rank", u32(c.dt_rank));
  }
  w->AddF32(a + ".attention.layer_norm_rms_epsilon", c.norm_eps);
  if (!mamba2) w->AddBool(a + ".ssm.dt_b_c_rms", false);
}

// The state-spaces format's embedding has the name the reader gives the Hugging Face one.
void RespellMamba(ExportTensor t, const ModelConfig&, std::vector<ExportTensor>* out) {
  if (t.name == "backbone.embedding.weight") t.name = "backbone.embeddings.weight";
  out->push_back(std::move(t));
}

}  // namespace

const GgufExporter kMambaExporter = {"mamba", CheckMamba, AddMambaKeys, RespellMamba, nullptr};
const GgufExporter kMamba2Exporter = {"mamba2", CheckMamba, AddMambaKeys, RespellMamba, nullptr};

}  // namespace ssmkit::model
