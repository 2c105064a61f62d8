#include "server/chat_template.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "server/jinja/evaluator.hpp"

namespace ssmkit::server {
namespace {

using ordered_json = nlohmann::ordered_json;

Status ReadFile(const std::string& path, std::string* text) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::InvalidArgument(path + ": cannot be read");
  std::ostringstream ss;
  ss << f.rdbuf();
  *text = ss.str();
  return Status::Ok();
}

// The special tokens transformers passes to the template: each *_token of
// tokenizer_config.json, as a string or an AddedToken ({"content": ...}).
nlohmann::json SpecialTokens(const ordered_json& config) {
  nlohmann::json tokens = nlohmann::json::object();
  for (const char* name : {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token",
                           "cls_token", "mask_token"}) {
    auto it = config.find(name);
    if (it == config.end()) continue;
    if (it->is_string()) {
      tokens[name] = it->get<std::string>();
    } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
      tokens[name] = (*it)["content"].get<std::string>();
    }
  }
  return tokens;
}

}  // namespace

Status ChatTemplate::Load(const std::string& model_dir, const std::string& template_file,
                          std::unique_ptr<ChatTemplate>* chat_template) {
  chat_template->reset();
  ordered_json config = ordered_json::object();
  const std::filesystem::path config_path =
      std::filesystem::path(model_dir) / "tokenizer_config.json";
  std::error_code ec;
  if (!model_dir.empty() && std::filesystem::exists(config_path, ec)) {
    std::string text;
    SSMKIT_RETURN_IF_ERROR(ReadFile(config_path.string(), &text));
    try {
      config = ordered_json::parse(text);
    } catch (const ordered_json::exception& e) {
      return Status::InvalidArgument(config_path.string() + ": " + e.what());
    }
    if (!config.is_object()) {
      return Status::InvalidArgument(config_path.string() + ": expected a JSON object");
    }
  }
  std::string source, origin;
  if (!template_file.empty()) {
    SSMKIT_RETURN_IF_ERROR(ReadFile(template_file, &source));
    origin = template_file;
  } else {
    auto it = config.find("chat_template");
    if (it == config.end() || it->is_null()) return Status::Ok();  // no template
    origin = config_path.string() + " (chat_template)";
    if (it->is_string()) {
      source = it->get<std::string>();
    } else if (it->is_array()) {
      // A list of named templates: transformers uses "default" when no name is asked for.
      for (const auto& t : *it) {
        if (t.is_object() && t.value("name", "") == "default" && t.contains("template") &&
            t["template"].is_string()) {
          source = t["template"].get<std::string>();
        }
      }
      if (source.empty()) {
        return Status::InvalidArgument(origin + ": a list of templates without a 'default' one");
      }
    } else {
      return Status::InvalidArgument(origin + ": expected a string or a list of templates");
    }
  }
  const Status s = FromSource(source, SpecialTokens(config), chat_template);
  if (!s.ok()) return Status(s.code(), origin + ": " + s.message());
  return Status::Ok();
}

Status ChatTemplate::FromSource(const std::string& source, const nlohmann::json& special_tokens,
                                std::unique_ptr<ChatTemplate>* chat_template) {
  auto t = std::unique_ptr<ChatTemplate>(new ChatTemplate());
  SSMKIT_RETURN_IF_ERROR(jinja::Template::Parse(source, &t->template_));
  t->special_tokens_ = special_tokens;
  *chat_template = std::move(t);
  return Status::Ok();
}

Status ChatTemplate::Render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                            std::string* text) const {
  jinja::Dict context;
  for (const auto& [k, v] : special_tokens_.items()) {
    context.Set(k, jinja::Value(v.get<std::string>()));
  }
  context.Set("messages", jinja::Value::FromJson(messages));
  context.Set("add_generation_prompt", jinja::Value(add_generation_prompt));
  const Status s = template_.Render(jinja::Value(std::move(context)), text);
  if (!s.ok() && s.message().rfind(jinja::kRaisedPrefix, 0) == 0) {
    // The template's own message (e.g. "Conversation roles must alternate ...").
    return Status::InvalidArgument(s.message().substr(std::string(jinja::kRaisedPrefix).size()));
  }
  return s;
}

}  // namespace ssmkit::server
