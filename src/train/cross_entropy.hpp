// Softmax cross-entropy over the vocabulary, forward and backward in one pass.
// Dimension legend: M rows (tokens), V vocab.
//
//   loss[m]      = logsumexp(logits[m, :]) - logits[m, target[m]]
//   dlogits[m,v] = scale * (softmax(logits[m, :])[v] - [v == target[m]])
#pragma once

#include <cstdint>

namespace ssmkit::train {

// Returns the sum of the M losses (accumulated in double; per-thread partials added in
// thread order, so the same inputs and thread count give the same bits). targets must lie in
// [0, V). dlogits: (M, V) or nullptr for the loss alone; it may be `logits` itself.
double SoftmaxCrossEntropy(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab,
                           float scale, float* dlogits);

}  // namespace ssmkit::train
