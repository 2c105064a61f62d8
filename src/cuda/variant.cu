// PickVariant (cuda/variant.hpp): reads the variant's environment variable at every call, so a
// test or benchmark can switch variants between calls with setenv.
#include <cstdlib>
#include <string>

#include "cuda/variant.hpp"

namespace ssmkit::cuda {

Status PickVariant(const OpVariants& op, Variant* variant) {
  *variant = Variant{op.default_index, false};
  const char* value = std::getenv(op.env);
  if (!value || !*value) return Status::Ok();
  std::string name = value;
  const bool required = name.back() == '!';
  if (required) name.pop_back();
  std::string accepted;
  for (int i = 0; i < op.count; ++i) {
    if (name == op.names[i]) {
      *variant = Variant{i, required};
      return Status::Ok();
    }
    accepted += (i ? ", " : "") + std::string(op.names[i]);
  }
  return Status::InvalidArgument(std::string(op.op) + ": " + op.env + ": expected one of " +
                                 accepted + " (optionally followed by '!'), given '" + value + "'");
}

Status VariantDoesNotApply(const OpVariants& op, int index) {
  return Status::Unsupported(std::string(op.op) + ": " + op.env + "=" + op.names[index] +
                             "! requires that variant, and it does not cover these arguments");
}

}  // namespace ssmkit::cuda
