// PickVariant (cuda/variant.hpp): reads the variant's environment variable at every call, so a
// test or benchmark can switch variants between calls with setenv.
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/variant.hpp"

namespace ssmkit::cuda {

Status PickVariant(const char* op, const char* env, std::initializer_list<const char*> names,
                   int* index) {
  *index = 0;
  const char* value = std::getenv(env);
  if (!value || !*value) return Status::Ok();
  std::string accepted;
  int i = 0;
  for (const char* name : names) {
    if (std::strcmp(value, name) == 0) {
      *index = i;
      return Status::Ok();
    }
    accepted += (i ? ", " : "") + std::string(name);
    ++i;
  }
  return Status::InvalidArgument(std::string(op) + ": " + env + ": expected one of " + accepted +
                                 ", given '" + value + "'");
}

}  // namespace ssmkit::cuda
