// The prefix state cache: a slot's whole state (Session::SaveSlot: SSM and conv states, and KV
// rows for attention models) after a token prefix, with the logits of the prefix's last
// position, so that a request whose prompt starts with a cached prefix restores that state and
// prefills only the rest (or nothing, when the prompt is the prefix). An SSM's state has a
// fixed size whatever the prefix length: a 2,000-token prefix costs what a 20-token one does.
//
// Keyed by the token prefix itself (a 64-bit hash of the tokens, checked against the stored
// tokens on a hit); least recently used entries are evicted to stay within the byte capacity.
// Not thread-safe: the scheduler thread owns it.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace ssmkit::server {

class PrefixCache {
 public:
  struct Entry {
    std::vector<int32_t> tokens;  // the prefix
    std::vector<uint8_t> state;   // Session::SaveSlot's bytes
    std::vector<float> logits;    // (V) at the prefix's last position
    uint64_t hash = 0;
    int64_t bytes() const;
  };
  struct Stats {
    int64_t hits = 0, misses = 0, inserts = 0, evictions = 0;
    int64_t reused_tokens = 0;  // prompt tokens restored instead of prefilled
    int64_t entries = 0, bytes = 0;
  };

  explicit PrefixCache(int64_t capacity_bytes) : capacity_(capacity_bytes) {}

  // The entry of the longest cached prefix of `tokens` (at least one token), made the most
  // recently used; nullptr when none. Counts a hit or a miss.
  const Entry* Lookup(std::span<const int32_t> tokens);
  // True when exactly this prefix is cached (no effect on the order or the counts).
  bool Contains(std::span<const int32_t> prefix) const;
  // Stores an entry (replacing one for the same prefix), evicting the least recently used ones
  // to make room. An entry larger than the whole capacity is dropped: false.
  bool Insert(Entry entry);

  int64_t capacity_bytes() const { return capacity_; }
  const Stats& stats() const { return stats_; }

  // FNV-1a over the tokens' bytes, extendable one token at a time (Lookup hashes every prefix
  // of a prompt in one pass).
  static constexpr uint64_t kHashSeed = 14695981039346656037ull;
  static uint64_t HashStep(uint64_t h, int32_t token);
  static uint64_t Hash(std::span<const int32_t> tokens);

 private:
  using List = std::list<Entry>;  // most recently used first
  List entries_;
  std::unordered_map<uint64_t, List::iterator> index_;
  int64_t capacity_;
  Stats stats_;
};

}  // namespace ssmkit::server
