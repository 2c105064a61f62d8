#include "server/prefix_cache.hpp"

#include <algorithm>

namespace ssmkit::server {

int64_t PrefixCache::Entry::bytes() const {
  return static_cast<int64_t>(tokens.size() * sizeof(int32_t) + state.size() +
                              logits.size() * sizeof(float));
}

uint64_t PrefixCache::HashStep(uint64_t h, int32_t token) {
  const uint32_t t = static_cast<uint32_t>(token);
  for (int i = 0; i < 4; ++i) {
    h ^= (t >> (8 * i)) & 0xffu;
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t PrefixCache::Hash(std::span<const int32_t> tokens) {
  uint64_t h = kHashSeed;
  for (int32_t t : tokens) h = HashStep(h, t);
  return h;
}

const PrefixCache::Entry* PrefixCache::Lookup(std::span<const int32_t> tokens) {
  List::iterator best = entries_.end();
  uint64_t h = kHashSeed;
  for (size_t n = 1; n <= tokens.size() && !index_.empty(); ++n) {
    h = HashStep(h, tokens[n - 1]);
    auto it = index_.find(h);
    if (it == index_.end()) continue;
    const Entry& e = *it->second;
    if (e.tokens.size() == n && std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin())) {
      best = it->second;
    }
  }
  if (best == entries_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  stats_.reused_tokens += static_cast<int64_t>(best->tokens.size());
  entries_.splice(entries_.begin(), entries_, best);
  return &entries_.front();
}

bool PrefixCache::Contains(std::span<const int32_t> prefix) const {
  auto it = index_.find(Hash(prefix));
  return it != index_.end() && std::equal(it->second->tokens.begin(), it->second->tokens.end(),
                                          prefix.begin(), prefix.end());
}

bool PrefixCache::Insert(Entry entry) {
  entry.hash = Hash(entry.tokens);
  const int64_t bytes = entry.bytes();
  if (bytes > capacity_ || entry.tokens.empty()) return false;
  // The same hash: the same prefix again, or (rarely) another one; either way the new one wins.
  if (auto it = index_.find(entry.hash); it != index_.end()) {
    stats_.bytes -= it->second->bytes();
    entries_.erase(it->second);
    index_.erase(it);
    --stats_.entries;
  }
  while (stats_.bytes + bytes > capacity_ && !entries_.empty()) {
    const Entry& old = entries_.back();
    stats_.bytes -= old.bytes();
    index_.erase(old.hash);
    entries_.pop_back();
    --stats_.entries;
    ++stats_.evictions;
  }
  entries_.push_front(std::move(entry));
  index_[entries_.front().hash] = entries_.begin();
  stats_.bytes += bytes;
  ++stats_.entries;
  ++stats_.inserts;
  return true;
}

}  // namespace ssmkit::server
