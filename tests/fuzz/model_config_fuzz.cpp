// libFuzzer target for config.json (src/model/config.cpp and the family readers
// src/model/family_*.cpp): any bytes as a checkpoint's config.json must parse or fail with a
// Status naming the problem, never crash. A config that parses and describes a small model is
// then built with random weights and run: a session prefills two prompts of different lengths
// and decodes a step, so a config the reader accepts but the engine cannot run shows up as a
// crash, a sanitizer report or non-finite logits. Seeds: tests/fuzz/corpus/model_config/ and
// every fixture checkpoint's config.json (scripts/fuzz.sh passes them).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "ssmkit/model.hpp"

namespace {

// Small enough to build and run a thousand times a second, and no allocation the fuzzer's
// memory limit would stop. Every width the blocks multiply is bounded.
bool SmallModel(const ssmkit::ModelConfig& c) {
  const auto within = [](int64_t v, int64_t hi) { return v >= 0 && v <= hi; };
  const auto& a = c.attention;
  const auto& f = c.ffn;
  return within(c.d_model, 256) && within(c.n_layer, 8) && within(c.vocab_size, 1024) &&
         within(c.d_inner, 512) && within(c.d_state, 64) && within(c.d_conv, 8) &&
         within(c.dt_rank, 64) && within(c.nheads, 64) && within(c.headdim, 128) &&
         within(c.ngroups, 16) && within(a.num_heads, 16) && within(a.num_kv_heads, 16) &&
         within(a.head_dim, 128) && within(a.input_dim, 512) && within(f.intermediate, 512) &&
         within(f.num_experts, 8) && within(f.moe_intermediate, 512) &&
         within(f.shared_intermediate, 512) && within(c.num_shared_blocks, 4) &&
         within(c.adapter_rank, 32) && c.block_list().size() <= 16;
}

bool ModerateScalars(const ssmkit::ModelConfig& c) {
  const auto moderate = [](double v) { return std::isfinite(v) && std::abs(v) <= 1e3; };
  const auto& m = c.multipliers;
  for (float v : {m.embedding, m.residual, m.logits, m.attention_in, m.attention_out, m.ssm_in,
                  m.ssm_out, m.key, m.mlp_gate, m.mlp_down, m.ssm_z, m.ssm_x, m.ssm_b, m.ssm_c,
                  m.ssm_dt, c.attention.scale}) {
    if (!moderate(v)) return false;
  }
  return c.norm_eps > 1e-12f && c.norm_eps < 1.0f && c.gated_norm_eps >= 0.0f &&
         c.gated_norm_eps < 1.0f && c.attention.rope_theta >= 1.0 &&
         c.attention.rope_theta <= 1e7 && c.dt_min >= 0.0f && !std::isnan(c.dt_max);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ssmkit::ModelConfig config;
  const ssmkit::Status parsed = ssmkit::model::ParseModelConfig(text, "config.json", &config);
  if (!parsed.ok()) {
    if (parsed.message().empty()) std::abort();  // every error says what is wrong
    return 0;
  }
  if (!SmallModel(config)) return 0;
  std::unique_ptr<ssmkit::Model> model;
  if (!ssmkit::Model::Random(config, ssmkit::DType::kF32, 7, &model).ok()) return 0;
  ssmkit::SessionOptions options;
  options.max_batch = 2;
  options.max_context = 64;
  std::unique_ptr<ssmkit::Session> session;
  if (!ssmkit::Session::Create(*model, options, &session).ok()) return 0;
  const int64_t vocab = model->config().vocab_size;
  if (vocab <= 0) std::abort();  // Validate() lets no empty vocabulary through
  const auto token = [&](int64_t i) { return static_cast<int32_t>(i % vocab); };
  const std::vector<std::vector<int32_t>> prompts{{token(1), token(2), token(3)}, {token(4)}};
  std::vector<float> logits(static_cast<size_t>(2 * vocab));
  if (!session->Prefill(prompts, logits).ok()) return 0;
  const std::vector<int32_t> next{token(5), token(6)};
  if (!session->Decode(next, logits).ok()) return 0;
  // Random weights of std 0.02 through a few blocks give finite logits when the config's
  // scalars are moderate; a config may state any float (a multiplier of 1e38 overflows to
  // inf and inf - inf to NaN, which is the config's doing), so only then is NaN a defect.
  if (ModerateScalars(config)) {
    for (float x : logits) {
      if (std::isnan(x)) std::abort();
    }
  }
  return 0;
}
