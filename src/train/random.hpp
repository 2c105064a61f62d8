// Deterministic random numbers for training: initialisation and batch sampling depend only on
// the seed (and, for batches, the step), never on the platform's <random> distributions.
//
// SplitMix64 (Steele, Lea, Flood 2014) as the generator; Mix() is its output function, used
// as a counter-based hash so that batch k of step s is drawn from Mix(seed, s, k) alone: a
// resumed run reproduces the batches of an uninterrupted one without storing generator state.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace ssmkit::train {

inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A hash of up to three words, each step a SplitMix64 increment and mix.
inline uint64_t Mix(uint64_t seed, uint64_t a, uint64_t b = 0) {
  constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;
  uint64_t h = Mix64(seed + kGamma);
  h = Mix64(h + a + kGamma);
  return Mix64(h + b + kGamma);
}

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() { return Mix64(state_ += 0x9e3779b97f4a7c15ULL); }
  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Standard normal by Box-Muller (one draw per call, the partner discarded: simple, and
  // initialisation is not on any hot path).
  double Normal() {
    const double u1 = 1.0 - Uniform();  // (0, 1]: log(u1) is finite
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace ssmkit::train
