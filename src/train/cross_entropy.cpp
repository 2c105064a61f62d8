#include "train/cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.hpp"

namespace ssmkit::train {

double SoftmaxCrossEntropy(const float* logits, const int32_t* targets, int64_t rows,
                           int64_t vocab, float scale, float* dlogits) {
  std::vector<double> partial(static_cast<size_t>(ParallelBlocks(rows)), 0.0);
  ParallelFor(rows, [&](int64_t begin, int64_t end, int block) {
    double sum = 0.0;
    for (int64_t m = begin; m < end; ++m) {
      const float* z = logits + m * vocab;
      const float max = *std::max_element(z, z + vocab);
      double denom = 0.0;
      for (int64_t v = 0; v < vocab; ++v) denom += std::exp(static_cast<double>(z[v] - max));
      const double lse = static_cast<double>(max) + std::log(denom);
      const int32_t t = targets[m];
      sum += lse - static_cast<double>(z[t]);
      if (dlogits != nullptr) {
        float* dz = dlogits + m * vocab;
        const double inv = 1.0 / denom;
        for (int64_t v = 0; v < vocab; ++v) {
          dz[v] = static_cast<float>(scale * std::exp(static_cast<double>(z[v] - max)) * inv);
        }
        dz[t] -= scale;
      }
    }
    partial[block] = sum;
  });
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace ssmkit::train
