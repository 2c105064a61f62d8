#include "server/text_output.hpp"

#include <algorithm>

namespace ssmkit::server {

TextOutput::TextOutput(const Tokenizer& tokenizer, std::vector<std::string> stop)
    : stream_(tokenizer, /*skip_special=*/true), stop_(std::move(stop)) {}

std::string TextOutput::Push(int32_t id, bool* stopped) {
  held_ += stream_.Push(id);
  return Release(stopped);
}

std::string TextOutput::Finish() {
  held_ += stream_.Finish();
  bool stopped = false;
  std::string out = Release(&stopped);
  if (!stopped) out += held_;
  held_.clear();
  return out;
}

std::string TextOutput::Release(bool* stopped) {
  *stopped = false;
  // The earliest stop string in what is held: everything before was released already or
  // is released now, and generation ends there.
  size_t first = std::string::npos;
  for (const std::string& s : stop_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    *stopped = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Hold the longest suffix that is a proper prefix of some stop string. Its first byte is
  // where a stop string starts, so the cut falls between UTF-8 characters.
  size_t keep = 0;
  for (const std::string& s : stop_) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

}  // namespace ssmkit::server
