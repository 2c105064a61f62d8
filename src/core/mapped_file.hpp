// A read-only memory map of a whole file: checkpoints are mapped, not read, so loading costs
// page-table entries rather than copies, and the OS shares the pages between processes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ssmkit/status.hpp"

namespace ssmkit {

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Maps `path`; an empty file maps to size 0 and a null data pointer.
  static Status Open(const std::string& path, MappedFile* file);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void Reset();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

// Reads a whole (small) text file, e.g. config.json.
Status ReadTextFile(const std::string& path, std::string* text);

}  // namespace ssmkit
