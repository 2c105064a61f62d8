// Fuzz inputs as files, for the loaders that take a path: the bytes go into an anonymous
// in-memory file (memfd) named by its /proc/self/fd path, so a run touches no disk and leaves
// nothing behind.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace ssmkit::fuzz {

class MemoryFile {
 public:
  MemoryFile(const uint8_t* data, size_t size) : fd_(memfd_create("ssmkit-fuzz", 0)) {
    if (fd_ < 0) std::abort();  // the harness itself is broken: no input can be judged
    for (size_t done = 0; done < size;) {
      const ssize_t n = write(fd_, data + done, size - done);
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
  }
  ~MemoryFile() { close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace ssmkit::fuzz
