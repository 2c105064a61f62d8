// The C ABI's tokenizers: tokenizer.json byte-level BPE, raw bytes, or a model's own; encode and
// decode (include/ssmkit/tokenizer.hpp).
#include "capi/capi_handles.hpp"

using namespace ssmkit;        // NOLINT: this file only forwards to the C++ API
using namespace ssmkit::capi;  // NOLINT

namespace {

Status Wrap(std::unique_ptr<Tokenizer> t, ssmkit_tokenizer** tokenizer) {
  auto handle = std::make_unique<ssmkit_tokenizer>();
  handle->tokenizer = std::move(t);
  *tokenizer = handle.release();
  return Status::Ok();
}

Status CheckOut(const char* fn, ssmkit_tokenizer** tokenizer) {
  return NotNull(fn, "tokenizer", tokenizer, "a place for the tokenizer handle");
}

Status CheckTokenizer(const char* fn, const ssmkit_tokenizer* tokenizer) {
  return NotNull(fn, "tokenizer", tokenizer, "a tokenizer from ssmkit_tokenizer_load");
}

}  // namespace

extern "C" {

ssmkit_status ssmkit_tokenizer_load(const char* path, ssmkit_tokenizer** tokenizer) {
  constexpr const char* kFn = "ssmkit_tokenizer_load";
  return Guarded(kFn, [&]() -> Status {
    SSMKIT_RETURN_IF_ERROR(NotNull(kFn, "path", path, "the path of a tokenizer.json"));
    SSMKIT_RETURN_IF_ERROR(CheckOut(kFn, tokenizer));
    std::unique_ptr<Tokenizer> t;
    SSMKIT_RETURN_IF_ERROR(Tokenizer::FromFile(path, &t));
    return Wrap(std::move(t), tokenizer);
  });
}

ssmkit_status ssmkit_tokenizer_bytes(ssmkit_tokenizer** tokenizer) {
  constexpr const char* kFn = "ssmkit_tokenizer_bytes";
  return Guarded(kFn, [&]() -> Status {
    SSMKIT_RETURN_IF_ERROR(CheckOut(kFn, tokenizer));
    return Wrap(Tokenizer::Bytes(), tokenizer);
  });
}

ssmkit_status ssmkit_model_tokenizer(const ssmkit_model* model, ssmkit_tokenizer** tokenizer) {
  constexpr const char* kFn = "ssmkit_model_tokenizer";
  return Guarded(kFn, [&]() -> Status {
    SSMKIT_RETURN_IF_ERROR(NotNull(kFn, "model", model, "a model from ssmkit_model_load"));
    SSMKIT_RETURN_IF_ERROR(CheckOut(kFn, tokenizer));
    std::unique_ptr<Tokenizer> t;
    SSMKIT_RETURN_IF_ERROR(Tokenizer::ForModel(model->dir, model->model->config().vocab_size, &t));
    return Wrap(std::move(t), tokenizer);
  });
}

void ssmkit_tokenizer_free(ssmkit_tokenizer* tokenizer) { delete tokenizer; }

ssmkit_status ssmkit_tokenizer_encode(const ssmkit_tokenizer* tokenizer, const char* text,
                                      size_t length, int32_t* ids, int64_t capacity,
                                      int64_t* n_ids) {
  constexpr const char* kFn = "ssmkit_tokenizer_encode";
  return Guarded(kFn, [&]() -> Status {
    SSMKIT_RETURN_IF_ERROR(CheckTokenizer(kFn, tokenizer));
    if (length > 0) SSMKIT_RETURN_IF_ERROR(NotNull(kFn, "text", text, "length bytes of UTF-8"));
    SSMKIT_RETURN_IF_ERROR(NotNull(kFn, "n_ids", n_ids, "a place for the number of ids"));
    if (capacity < 0) {
      return Status::InvalidArgument(std::string(kFn) + ": capacity: expected >= 0, given " +
                                     std::to_string(capacity));
    }
    std::vector<int32_t> encoded;
    SSMKIT_RETURN_IF_ERROR(
        tokenizer->tokenizer->Encode(std::string_view(text ? text : "", length), &encoded));
    const int64_t n = static_cast<int64_t>(encoded.size());
    if (ids != nullptr && capacity < n) {
      return Status::InvalidArgument(std::string(kFn) + ": ids: expected room for " +
                                     std::to_string(n) + " ids (capacity), given " +
                                     std::to_string(capacity));
    }
    if (ids != nullptr) std::copy(encoded.begin(), encoded.end(), ids);
    *n_ids = n;
    return Status::Ok();
  });
}

ssmkit_status ssmkit_tokenizer_decode(const ssmkit_tokenizer* tokenizer, const int32_t* ids,
                                      int64_t n_ids, int32_t skip_special, char* text,
                                      size_t capacity, size_t* length) {
  constexpr const char* kFn = "ssmkit_tokenizer_decode";
  return Guarded(kFn, [&]() -> Status {
    SSMKIT_RETURN_IF_ERROR(CheckTokenizer(kFn, tokenizer));
    if (n_ids < 0) {
      return Status::InvalidArgument(std::string(kFn) + ": n_ids: expected >= 0, given " +
                                     std::to_string(n_ids));
    }
    if (n_ids > 0) SSMKIT_RETURN_IF_ERROR(NotNull(kFn, "ids", ids, "n_ids token ids"));
    const std::string decoded = tokenizer->tokenizer->Decode(
        std::span<const int32_t>(ids, static_cast<size_t>(n_ids)), skip_special != 0);
    return CopyString(kFn, "text", decoded, text, capacity, length);
  });
}

}  // extern "C"
