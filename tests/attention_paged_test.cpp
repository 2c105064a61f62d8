// The paged KV cache: PagedKvAppend writes exactly the rows it should (shuffled block tables,
// block sizes that do not divide the lengths, left-padded chunks of different lengths per
// sequence, f32 and bf16 caches); AttentionPagedForward against the fp64 oracle and bit for bit
// against the dense forward on the same keys; decode steps; a long decode (S = 8192) split over
// key blocks, the same bits for any thread count.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention_fixture.hpp"
#include "ssmkit/attention.hpp"

namespace ssmkit::testing {
namespace {

struct PagedCase {
  const char* label;
  int64_t H, Hk, E, Ev, block_size;
  std::vector<int64_t> lens;  // tokens per sequence after the prefill chunk
  int64_t window = 0;
  DType cache_dtype = DType::kF32;
  DType io_dtype = DType::kF32;

  std::string Name() const {
    std::string s = std::string(label) + ": H=" + std::to_string(H) + " Hk=" + std::to_string(Hk) +
                    " E=" + std::to_string(E) + " Ev=" + std::to_string(Ev) +
                    " block_size=" + std::to_string(block_size) + " lens=";
    for (int64_t l : lens) s += std::to_string(l) + ",";
    return s + " window=" + std::to_string(window) + " cache " + DTypeName(cache_dtype) + " io " +
           DTypeName(io_dtype);
  }
  int64_t B() const { return static_cast<int64_t>(lens.size()); }
};

const PagedCase kCases[] = {
    {"granite-4.0-h-350m serving", 12, 4, 64, 64, 16, {40, 7, 100}},
    {"granite-4.0-h-350m serving, bf16 cache", 12, 4, 64, 64, 16, {33, 64, 1}, 0, DType::kBF16},
    {"odd block size, GQA 8, bf16 in/out", 8, 1, 64, 64, 5, {23, 11}, 0, DType::kF32, DType::kBF16},
    {"odd head dims 40 / 24, window 9", 6, 2, 40, 24, 7, {30, 18, 45, 3}, 9},
    {"MHA E=128", 4, 4, 128, 128, 32, {70, 129}},
};

// A cache with room for `capacity` tokens per sequence, block ids shuffled over the pool, and
// the double values of every token's keys and values as stored (for the oracle and the dense
// comparison).
class PagedCache {
 public:
  PagedCache(const PagedCase& c, int64_t capacity, uint64_t seed) : c_(c) {
    max_blocks_ = (capacity + c.block_size - 1) / c.block_size;
    num_blocks_ = c.B() * max_blocks_ + 3;  // spare blocks no one uses
    k_blocks_ = View::Dense({num_blocks_, c.block_size, c.Hk, c.E}, c.cache_dtype);
    v_blocks_ = View::Dense({num_blocks_, c.block_size, c.Hk, c.Ev}, c.cache_dtype);
    std::vector<int32_t> ids(static_cast<size_t>(num_blocks_));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937_64(seed));
    table_ = View::Dense({1, 1, c.B(), max_blocks_}, DType::kI32, 2);
    std::vector<double> table(ids.begin(), ids.begin() + c.B() * max_blocks_);
    table_ids_.assign(ids.begin(), ids.begin() + c.B() * max_blocks_);
    table_.Fill(table);
    seq_lens_ = View::Dense({1, 1, 1, c.B()}, DType::kI32, 1);
    lens_.assign(static_cast<size_t>(c.B()), 0);
    keys_.resize(static_cast<size_t>(c.B()));
    values_.resize(static_cast<size_t>(c.B()));
  }

  PagedKv Kv() const {
    return {k_blocks_.tensor(), v_blocks_.tensor(), table_.tensor(), seq_lens_.tensor()};
  }

  // Appends new[b] tokens to each sequence (a left-padded (B, L) chunk, L = max new[b]).
  void Append(const std::vector<int64_t>& fresh, Rng& rng) {
    const int64_t L = *std::max_element(fresh.begin(), fresh.end());
    View k = View::Dense({c_.B(), L, c_.Hk, c_.E}, c_.io_dtype);
    View v = View::Dense({c_.B(), L, c_.Hk, c_.Ev}, c_.io_dtype);
    const std::vector<double> kd = k.Fill(rng.NormalVec(k.numel()));
    const std::vector<double> vd = v.Fill(rng.NormalVec(v.numel()));
    std::vector<double> lens;
    for (int64_t b = 0; b < c_.B(); ++b) lens.push_back(static_cast<double>(lens_[b] += fresh[b]));
    seq_lens_.Fill(lens);
    const std::vector<uint8_t> k_before = k_blocks_.bytes(), v_before = v_blocks_.bytes();
    const Status status = PagedKvAppend(k.tensor(), v.tensor(), Kv());
    ASSERT_TRUE(status.ok()) << status.message();
    for (int64_t b = 0; b < c_.B(); ++b) {
      for (int64_t i = L - fresh[b]; i < L; ++i) {  // the rows that are not left padding
        Push(kd, b, i, L, c_.Hk * c_.E, &keys_[b]);
        Push(vd, b, i, L, c_.Hk * c_.Ev, &values_[b]);
      }
    }
    if (check_pool) ExpectOnlyNewRowsWritten(k_before, v_before);
  }

  // Whether Append checks the whole pool afterwards (the small cases; the long decode's pool
  // is 4 M elements, and the small cases test the same code).
  bool check_pool = true;

  // Every cached token of every sequence equals what was appended (rounded to the cache's
  // dtype), and nothing else of the pool changed.
  void ExpectOnlyNewRowsWritten(const std::vector<uint8_t>& k_before,
                                const std::vector<uint8_t>& v_before) const {
    ExpectRows(k_blocks_, c_.E, k_before, [&](int64_t b) { return Keys(b); });
    ExpectRows(v_blocks_, c_.Ev, v_before, [&](int64_t b) { return Values(b); });
  }

  template <class Stored>
  void ExpectRows(const View& blocks, int64_t D, const std::vector<uint8_t>& before,
                  Stored&& stored) const {
    const std::vector<double> pool = blocks.Values();
    const int64_t width = c_.Hk * D;  // elements per token
    std::vector<bool> used(pool.size(), false);
    for (int64_t b = 0; b < c_.B(); ++b) {
      const std::vector<double> want = stored(b);
      for (int64_t t = 0; t < lens_[b]; ++t) {
        const int64_t row =
            table_ids_[b * max_blocks_ + t / c_.block_size] * c_.block_size + t % c_.block_size;
        for (int64_t e = 0; e < width; ++e) {
          used[row * width + e] = true;
          ASSERT_EQ(pool[row * width + e], want[t * width + e]) << "b " << b << " token " << t;
        }
      }
    }
    const int64_t size = DTypeSize(c_.cache_dtype);
    for (size_t i = 0; i < used.size(); ++i) {
      if (used[i]) continue;
      for (int64_t byte = 0; byte < size; ++byte) {
        ASSERT_EQ(blocks.bytes()[i * size + byte], before[i * size + byte]) << "pool element " << i;
      }
    }
  }

  // The cache's keys / values of sequence b as stored, (len, Hk, E | Ev).
  std::vector<double> Keys(int64_t b) const { return RoundedTo(keys_[b], c_.cache_dtype); }
  std::vector<double> Values(int64_t b) const { return RoundedTo(values_[b], c_.cache_dtype); }
  int64_t Len(int64_t b) const { return lens_[b]; }

  // The oracle over the whole pool (its double copy).
  std::vector<double> Oracle(const std::vector<double>& q, int64_t L) const {
    std::vector<double> out(static_cast<size_t>(c_.B() * L * c_.H * c_.Ev));
    std::vector<int32_t> lens(lens_.begin(), lens_.end());
    const ref::AttentionShape s{c_.B(),   L,    0,     c_.H,
                                c_.Hk,    c_.E, c_.Ev, 1.0 / std::sqrt(static_cast<double>(c_.E)),
                                c_.window};
    ref::AttentionPagedForward(s, {c_.block_size, max_blocks_}, q.data(), k_blocks_.Values().data(),
                               v_blocks_.Values().data(), table_ids_.data(), lens.data(),
                               out.data());
    return out;
  }

 private:
  static void Push(const std::vector<double>& src, int64_t b, int64_t i, int64_t L, int64_t width,
                   std::vector<double>* dst) {
    const int64_t row = (b * L + i) * width;  // width = Hk * D elements per token
    dst->insert(dst->end(), src.begin() + row, src.begin() + row + width);
  }

  PagedCase c_;
  int64_t max_blocks_ = 0, num_blocks_ = 0;
  View k_blocks_, v_blocks_, table_, seq_lens_;
  std::vector<int32_t> table_ids_;
  std::vector<int64_t> lens_;
  std::vector<std::vector<double>> keys_, values_;
};

// Paged forward of L queries per sequence vs the oracle, and (when every sequence has >= L
// tokens) bit for bit vs the dense forward of each sequence alone.
void CheckForward(const PagedCase& c, const PagedCache& cache, int64_t L, Rng& rng) {
  View q = View::Dense({c.B(), L, c.H, c.E}, c.io_dtype);
  const std::vector<double> qd = q.Fill(rng.NormalVec(q.numel()));
  View out = PaddedOutput(c.B(), L, c.H, c.Ev, c.io_dtype);
  const std::vector<uint8_t> before = out.bytes();
  const Status status =
      AttentionPagedForward(q.tensor(), cache.Kv(), out.tensor(), {0.0f, c.window});
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(out.UntouchedOutside(before));
  const std::vector<double> got = out.Values();
  const double tolerance = c.io_dtype == DType::kF32 ? 5e-6 : 8e-3;
  EXPECT_LT(RelativeError(got, RoundedTo(cache.Oracle(qd, L), c.io_dtype)), tolerance);
  const int64_t row = L * c.H * c.Ev;
  for (int64_t b = 0; b < c.B(); ++b) {
    const int64_t S = cache.Len(b);
    if (S < L) continue;
    View qb = View::Dense({1, L, c.H, c.E}, c.io_dtype);
    qb.Fill(
        std::vector<double>(qd.begin() + b * L * c.H * c.E, qd.begin() + (b + 1) * L * c.H * c.E));
    View kb = View::Dense({1, S, c.Hk, c.E}, c.cache_dtype);
    View vb = View::Dense({1, S, c.Hk, c.Ev}, c.cache_dtype);
    kb.Fill(cache.Keys(b));
    vb.Fill(cache.Values(b));
    View dense = View::Dense({1, L, c.H, c.Ev}, c.io_dtype);
    ASSERT_TRUE(AttentionForward({qb.tensor(), kb.tensor(), vb.tensor(), Tensor{}}, dense.tensor(),
                                 Tensor{}, {0.0f, c.window})
                    .ok());
    const std::vector<double> want = dense.Values();
    EXPECT_TRUE(std::equal(want.begin(), want.end(), got.begin() + b * row))
        << "sequence " << b << " differs from the dense forward";
  }
}

TEST(AttentionPaged, PrefillChunkThenDecodeSteps) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (const PagedCase& c : kCases) {
    SCOPED_TRACE(c.Name());
    Rng rng(seed);
    PagedCache cache(c, 160, seed);
    cache.Append(c.lens, rng);  // a left-padded prefill chunk: lengths differ
    const int64_t chunk = *std::max_element(c.lens.begin(), c.lens.end());
    CheckForward(c, cache, chunk, rng);  // the chunk's own queries (pad rows give 0)
    for (int step = 0; step < 3; ++step) {
      cache.Append(std::vector<int64_t>(static_cast<size_t>(c.B()), 1), rng);
      CheckForward(c, cache, 1, rng);
    }
    cache.Append(std::vector<int64_t>(static_cast<size_t>(c.B()), 4), rng);  // a short chunk
    CheckForward(c, cache, 4, rng);
  }
}

// One sequence at 8192 tokens and one at 3000 (granite-4.0-h-350m's attention): the
// flash-decoding split, against the oracle and with the same bits on 1, 2 and 3 threads.
TEST(AttentionPaged, LongDecode) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  for (DType cache_dtype : {DType::kF32, DType::kBF16}) {
    const PagedCase c{
        "granite-4.0-h-350m long decode", 12, 4, 64, 64, 16, {8191, 2999}, 0, cache_dtype};
    SCOPED_TRACE(c.Name());
    Rng rng(seed);
    PagedCache cache(c, 8192, seed);
    cache.check_pool = false;
    cache.Append(c.lens, rng);
    cache.Append({1, 1}, rng);
    View q = View::Dense({c.B(), 1, c.H, c.E}, DType::kF32);
    const std::vector<double> qd = q.Fill(rng.NormalVec(q.numel()));
    std::vector<std::vector<uint8_t>> bits;
    for (int threads : {1, 2, 3}) {
      ScopedThreads scoped(threads);
      View out = View::Dense({c.B(), 1, c.H, c.Ev}, DType::kF32);
      ASSERT_TRUE(AttentionPagedForward(q.tensor(), cache.Kv(), out.tensor()).ok());
      bits.push_back(out.bytes());
      if (threads == 2) {
        const double error = RelativeError(out.Values(), cache.Oracle(qd, 1));
        EXPECT_LT(error, 5e-6);
        std::printf("  %s: relative error %.3g\n", c.Name().c_str(), error);
      }
    }
    EXPECT_EQ(bits[0], bits[1]);
    EXPECT_EQ(bits[0], bits[2]);
  }
}

}  // namespace
}  // namespace ssmkit::testing
