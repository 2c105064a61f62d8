// What the C ABI's opaque engine handles hold (include/ssmkit/ssmkit.h: ssmkit_model,
// ssmkit_session, ssmkit_tokenizer), and the checks shared by their functions.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "capi/capi_internal.hpp"
#include "ssmkit/model.hpp"
#include "ssmkit/tokenizer.hpp"

struct ssmkit_model {
  // Shared with the sessions made from it: freeing the handle first leaves them working.
  std::shared_ptr<const ssmkit::Model> model;
  std::string dir;  // where it was loaded from (for its tokenizer.json)
};

struct ssmkit_session {
  std::shared_ptr<const ssmkit::Model> model;
  std::unique_ptr<ssmkit::Session> session;
  // (max_batch, V): a prefill's last-position logits land here first, and reach the caller's
  // tensor only once the whole prefill has succeeded.
  std::vector<float> prefill_logits;
};

struct ssmkit_tokenizer {
  std::unique_ptr<ssmkit::Tokenizer> tokenizer;
};

namespace ssmkit::capi {

// "fn: name: expected <what>, given NULL" when p is NULL.
Status NotNull(const char* fn, const char* name, const void* p, const char* what);

// `t` is a dense row-major f32 CPU tensor of exactly `shape` (its dims named by `dims`, e.g.
// "(B, V)"); *data is its pointer.
Status DenseF32(const char* fn, const char* name, const ssmkit_tensor& t,
                std::span<const int64_t> shape, const char* dims, float** data);

// Writes `s` and a NUL into buf (capacity bytes) and its length into *length (optional); buf
// NULL with capacity 0 asks for the length only. Nothing is written when it fails.
Status CopyString(const char* fn, const char* name, const std::string& s, char* buf,
                  size_t capacity, size_t* length);

}  // namespace ssmkit::capi
