// general.architecture "mamba" (MambaForCausalLM) and "mamba2" (Mamba2ForCausalLM): llama.cpp's
// metadata keys, the sizes the tensors imply where the keys do not say (vocabulary, biases, a
// tied LM head); the tensors under the names model/gguf_names.cpp maps both ways (the exporter
// writes them too).
#include <string>

#include "model/gguf_arch.hpp"
#include "model/gguf_names.hpp"

namespace ssmkit::model {

Status ReadMambaGgufConfig(const GgufFile& f, ModelConfig* config) {
  std::string arch;
  SSMKIT_RETURN_IF_ERROR(f.GetString("general.architecture", &arch));
  const GgufKeys k(f, arch);
  ModelConfig c;
  c.family = arch;
  SSMKIT_RETURN_IF_ERROR(ReadGgufCommon(k, &c));
  if (arch == "mamba2") {
    SSMKIT_RETURN_IF_ERROR(ReadGgufMamba2(k, &c));
    *config = std::move(c);
    return Status::Ok();
  }
  SSMKIT_RETURN_IF_ERROR(ReadGgufMamba1(k, &c));
  bool dt_b_c_rms = false;
  SSMKIT_RETURN_IF_ERROR(k.OptBool("ssm.dt_b_c_rms", &dt_b_c_rms));
  if (dt_b_c_rms) {
    return Status::Unsupported(f.label() + ": " + arch +
                               ".ssm.dt_b_c_rms (Falcon-Mamba's weightless norms on dt, B "
                               "and C) is not supported yet");
  }
  *config = std::move(c);
  return Status::Ok();
}

GgufTensorName MapMambaGguf(const std::string& rest, int64_t layer, const ModelConfig& c) {
  const std::string name = layer < 0 ? rest : "blk." + std::to_string(layer) + "." + rest;
  GgufTensorName out;
  out.hf = GgufToHfName(name, c.arch);
  if (out.hf == name) out.hf.clear();
  return out;
}

}  // namespace ssmkit::model
