// Where the built-in model (models/default, docs/default_model.md) is: DefaultModelDir.
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "ssmkit/model.hpp"

namespace ssmkit {
namespace {

namespace fs = std::filesystem;

bool IsModelDir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "config.json", ec) &&
         fs::is_regular_file(dir / "model.safetensors", ec);
}

// The directories of the binaries this code may sit in: the file the library's code was loaded
// from (libssmkit.so, the Python extension, or an executable linking the static library), then
// the running executable.
std::vector<fs::path> BinaryDirs() {
  std::vector<fs::path> dirs;
  std::error_code ec;
  Dl_info info;
  if (dladdr(reinterpret_cast<const void*>(&DefaultModelDir), &info) != 0 &&
      info.dli_fname != nullptr && fs::path(info.dli_fname).has_parent_path()) {
    const fs::path file = fs::weakly_canonical(fs::absolute(info.dli_fname, ec), ec);
    if (!ec) dirs.push_back(file.parent_path());
  }
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && (dirs.empty() || dirs.front() != exe.parent_path())) dirs.push_back(exe.parent_path());
  return dirs;
}

}  // namespace

Status DefaultModelDir(std::string* dir) {
  if (const char* env = std::getenv("SSMKIT_DEFAULT_MODEL"); env != nullptr && *env != '\0') {
    if (IsModelDir(env)) {
      *dir = env;
      return Status::Ok();
    }
    return Status::InvalidArgument(std::string("SSMKIT_DEFAULT_MODEL=") + env +
                                   ": expected a directory with config.json and model.safetensors");
  }
  std::vector<fs::path> candidates;
  for (const fs::path& bin : BinaryDirs()) {
    candidates.push_back(bin / ".." / ".." / "models" / "default");
    candidates.push_back(bin / ".." / "share" / "ssmkit" / "models" / "default");
    candidates.push_back(bin / "models" / "default");
  }
#ifdef SSMKIT_SOURCE_DIR
  candidates.push_back(fs::path(SSMKIT_SOURCE_DIR) / "models" / "default");
#endif
  std::string looked;
  for (const fs::path& c : candidates) {
    if (IsModelDir(c)) {
      std::error_code ec;
      *dir = fs::weakly_canonical(c, ec).string();
      if (ec) *dir = c.string();
      return Status::Ok();
    }
    looked += (looked.empty() ? "" : ", ") + c.lexically_normal().string();
  }
  return Status::InvalidArgument("the built-in model was not found (looked in " + looked +
                                 "; set SSMKIT_DEFAULT_MODEL=DIR)");
}

}  // namespace ssmkit
