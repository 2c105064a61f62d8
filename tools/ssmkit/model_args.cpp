#include "model_args.hpp"

#include <cstdio>

namespace ssmkit::cli {

int Fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.message().c_str());
  return 1;
}

bool ResolveModel(const char* command, std::string* model) {
  if (!model->empty()) return true;
  const Status s = DefaultModelDir(model);
  if (s.ok()) return true;
  std::fprintf(stderr, "ssmkit %s: no --model given and %s\n", command, s.message().c_str());
  return false;
}

Status OpenTokenizer(const std::string& tokenizer, const std::string& model_path,
                     const Model& model, std::unique_ptr<Tokenizer>* t) {
  if (tokenizer == "bytes") {
    *t = Tokenizer::Bytes();
    return Status::Ok();
  }
  if (!tokenizer.empty()) return Tokenizer::FromFile(tokenizer, t);
  const Status s = Tokenizer::ForModel(model_path, model.config().vocab_size, t);
  if (s.ok()) return s;
  return Status(s.code(), s.message() + ": --tokenizer FILE, or --tokenizer bytes");
}

}  // namespace ssmkit::cli
