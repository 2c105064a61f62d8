#include "train/init.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "train/random.hpp"

namespace ssmkit::train {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void FillUniform(SplitMix64& rng, double bound, float* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(rng.Uniform(-bound, bound));
}

// softplus^-1 of a log-uniform dt in [1e-3, 1e-1], floored at 1e-4 (mamba_ssm's defaults).
float InverseSoftplusDt(SplitMix64& rng) {
  constexpr double kDtMin = 1e-3, kDtMax = 1e-1, kDtFloor = 1e-4;
  double dt = std::exp(rng.Uniform() * (std::log(kDtMax) - std::log(kDtMin)) + std::log(kDtMin));
  dt = std::max(dt, kDtFloor);
  return static_cast<float>(dt + std::log(-std::expm1(-dt)));
}

}  // namespace

void InitParams(const ModelConfig& config, const ParamTable& table, uint64_t seed, float* params) {
  const bool m2 = config.arch == ModelArch::kMamba2;
  const int64_t residuals = static_cast<int64_t>(table.blocks().size());
  const auto& all = table.params();
  for (size_t t = 0; t < all.size(); ++t) {
    const ParamInfo& info = all[t];
    SplitMix64 rng(Mix(seed, t));  // one stream per tensor
    float* p = params + info.offset;
    const std::string& name = info.name;
    const int64_t fan_in = info.shape.back();  // (out, in) matrices; conv (C, 1, K)
    if (info.offset == table.embedding() || name == "lm_head.weight") {
      for (int64_t i = 0; i < info.numel; ++i) p[i] = static_cast<float>(0.02 * rng.Normal());
    } else if (EndsWith(name, "in_proj.weight") || EndsWith(name, "x_proj.weight") ||
               EndsWith(name, "q_proj.weight") || EndsWith(name, "k_proj.weight") ||
               EndsWith(name, "v_proj.weight") || EndsWith(name, "input_linear.weight")) {
      FillUniform(rng, 1.0 / std::sqrt(static_cast<double>(fan_in)), p, info.numel);
    } else if (EndsWith(name, "out_proj.weight") || EndsWith(name, "o_proj.weight") ||
               EndsWith(name, "output_linear.weight")) {
      FillUniform(rng, 1.0 / std::sqrt(static_cast<double>(fan_in)), p, info.numel);
      const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(residuals)));
      for (int64_t i = 0; i < info.numel; ++i) p[i] *= scale;
    } else if (EndsWith(name, "conv1d.weight") || EndsWith(name, "conv1d.bias")) {
      FillUniform(rng, 1.0 / std::sqrt(static_cast<double>(config.d_conv)), p, info.numel);
    } else if (EndsWith(name, "dt_proj.weight")) {
      FillUniform(rng, 1.0 / std::sqrt(static_cast<double>(config.dt_rank)), p, info.numel);
    } else if (EndsWith(name, "dt_proj.bias") || EndsWith(name, "dt_bias")) {
      for (int64_t i = 0; i < info.numel; ++i) p[i] = InverseSoftplusDt(rng);
    } else if (EndsWith(name, "A_log")) {
      if (m2) {
        for (int64_t i = 0; i < info.numel; ++i)
          p[i] = static_cast<float>(std::log(rng.Uniform(1.0, 16.0)));
      } else {
        const int64_t n_state = info.shape[1];
        for (int64_t i = 0; i < info.numel; ++i)
          p[i] = static_cast<float>(std::log(static_cast<double>(i % n_state + 1)));
      }
    } else {  // D and the norm weights
      std::fill(p, p + info.numel, 1.0f);
    }
  }
}

}  // namespace ssmkit::train
