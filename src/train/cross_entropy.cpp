#include "train/cross_entropy.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.hpp"

namespace ssmkit::train {

double SoftmaxCrossEntropy(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                           float scale, float* dlogits) {
  std::vector<double> partial(static_cast<size_t>(ParallelBlocks(rows)), 0.0);
  ParallelFor(rows, [&](int64_t begin, int64_t end, int block) {
    double sum = 0.0;
    for (int64_t m = begin; m < end; ++m) {
      const float* z = logits + m * vocab;
      const float max = *std::max_element(z, z + vocab);
      const int32_t t = targets[m];
      const float z_target = z[t];  // read before dlogits (possibly z itself) is written
      // One f32 exp per logit, kept in dlogits when wanted and normalised afterwards; the sum
      // is accumulated in double.
      float* e = dlogits != nullptr ? dlogits + m * vocab : nullptr;
      double denom = 0.0;
      for (int64_t v = 0; v < vocab; ++v) {
        const float ev = std::exp(z[v] - max);
        denom += ev;
        if (e != nullptr) e[v] = ev;
      }
      sum += static_cast<double>(max) + std::log(denom) - static_cast<double>(z_target);
      if (e != nullptr) {
        const float norm = static_cast<float>(scale / denom);
        for (int64_t v = 0; v < vocab; ++v) e[v] *= norm;
        e[t] -= scale;
      }
    }
    partial[block] = sum;
  });
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace ssmkit::train
