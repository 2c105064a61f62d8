#include "default_model.hpp"

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace ssmkit::cli {
namespace {

namespace fs = std::filesystem;

bool IsModelDir(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "config.json", ec) &&
         fs::is_regular_file(dir / "model.safetensors", ec);
}

}  // namespace

Status FindDefaultModel(std::string* dir) {
  if (const char* env = std::getenv("SSMKIT_DEFAULT_MODEL"); env != nullptr && *env != '\0') {
    if (IsModelDir(env)) {
      *dir = env;
      return Status::Ok();
    }
    return Status::InvalidArgument(std::string("SSMKIT_DEFAULT_MODEL=") + env +
                                   ": expected a directory with config.json and model.safetensors");
  }
  std::vector<fs::path> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path bin = exe.parent_path();
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
      *dir = fs::weakly_canonical(c, ec).string();
      if (ec) *dir = c.string();
      return Status::Ok();
    }
    looked += (looked.empty() ? "" : ", ") + c.lexically_normal().string();
  }
  return Status::InvalidArgument(
      "no --model given and the built-in model was not found (looked in " + looked +
      "; set SSMKIT_DEFAULT_MODEL=DIR)");
}

}  // namespace ssmkit::cli
