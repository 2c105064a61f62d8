// A model's chat template: tokenizer_config.json's `chat_template` (Jinja2), rendered as
// transformers' apply_chat_template(messages, tokenize=False, add_generation_prompt=...) renders
// it: the Jinja environment's trim_blocks and lstrip_blocks, `messages`, `add_generation_prompt`,
// the special tokens (bos_token, eos_token, unk_token, pad_token, ...) from the same file,
// raise_exception and tojson; tools and documents absent (server/jinja/ has the subset of
// Jinja we implement).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "server/jinja/template.hpp"
#include "ssmkit/status.hpp"

namespace ssmkit::server {

class ChatTemplate {
 public:
  // The template of the checkpoint in `model_dir` (tokenizer_config.json's chat_template: a
  // string, or a list of {"name", "template"} of which "default" is taken), or, when
  // `template_file` is not empty, that file's text (with the special tokens still read from
  // model_dir's tokenizer_config.json, if it has one). *chat_template stays null when the model
  // has none. A template that does not parse is an error naming the file.
  static Status Load(const std::string& model_dir, const std::string& template_file,
                     std::unique_ptr<ChatTemplate>* chat_template);
  // From source text and the special tokens ({"bos_token": "<s>", ...}).
  static Status FromSource(const std::string& source, const nlohmann::json& special_tokens,
                           std::unique_ptr<ChatTemplate>* chat_template);

  // messages: [{"role": ..., "content": ...}, ...]. A template's raise_exception, or an error
  // of evaluation, is an error with its message.
  Status Render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                std::string* text) const;

 private:
  jinja::Template template_;
  nlohmann::json special_tokens_;
};

}  // namespace ssmkit::server
