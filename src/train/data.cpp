#include "train/data.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>

#include "train/random.hpp"

namespace ssmkit::train {

Status ByteCorpus::Load(const std::string& path, double val_fraction, int64_t min_part_bytes,
                        ByteCorpus* corpus) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::InvalidArgument("train: --data " + path + ": cannot open the file");
  ByteCorpus c;
  c.bytes_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) return Status::InvalidArgument("train: --data " + path + ": read error");
  if (!(val_fraction > 0.0 && val_fraction < 1.0)) {
    return Status::InvalidArgument("train: validation fraction: expected in (0, 1), given " +
                                   std::to_string(val_fraction));
  }
  const int64_t size = static_cast<int64_t>(c.bytes_.size());
  c.split_ = size - static_cast<int64_t>(static_cast<double>(size) * val_fraction);
  if (c.train_bytes() < min_part_bytes || c.val_bytes() < min_part_bytes) {
    return Status::InvalidArgument(
        "train: --data " + path + ": expected at least " + std::to_string(min_part_bytes) +
        " bytes in each of the training and validation parts, given " + std::to_string(size) +
        " bytes in all (" + std::to_string(c.train_bytes()) + " + " +
        std::to_string(c.val_bytes()) + ")");
  }
  uint64_t h = 0;
  for (uint8_t b : c.bytes_) h = Mix64(h ^ b);
  c.fingerprint_ = h;
  *corpus = std::move(c);
  return Status::Ok();
}

void ByteCorpus::TrainBatch(uint64_t seed, int64_t step, int64_t accum, int64_t micro,
                            int64_t batch, int64_t seqlen, std::vector<int32_t>* tokens) const {
  tokens->resize(static_cast<size_t>(batch * (seqlen + 1)));
  const uint64_t starts = static_cast<uint64_t>(split_ - seqlen);
  for (int64_t r = 0; r < batch; ++r) {
    const uint64_t start =
        Mix(seed, static_cast<uint64_t>(step * accum + micro), static_cast<uint64_t>(r)) % starts;
    for (int64_t l = 0; l <= seqlen; ++l) (*tokens)[r * (seqlen + 1) + l] = bytes_[start + l];
  }
}

int64_t ByteCorpus::ValBatch(int64_t first, int64_t batch, int64_t seqlen,
                             std::vector<int32_t>* tokens) const {
  const int64_t rows = std::max<int64_t>(0, std::min(batch, val_windows(seqlen) - first));
  tokens->resize(static_cast<size_t>(rows * (seqlen + 1)));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t start = split_ + (first + r) * seqlen;
    for (int64_t l = 0; l <= seqlen; ++l) (*tokens)[r * (seqlen + 1) + l] = bytes_[start + l];
  }
  return rows;
}

}  // namespace ssmkit::train
