#include "server/completion_request.hpp"

#include <cmath>
#include <limits>

namespace ssmkit::server {
namespace {

using nlohmann::json;

std::string TypeName(const json& v) {
  if (v.is_number_integer()) return "integer";
  if (v.is_number_float()) return "number";
  return v.type_name();
}

// Reads the known fields of one request object, the first problem found kept as the answer.
class Fields {
 public:
  explicit Fields(const json& body) : body_(body) {}

  std::optional<ApiError>& error() { return error_; }

  // The field's value, or nullptr when it is absent or null (both mean "the default").
  const json* Get(const char* name) const {
    auto it = body_.find(name);
    if (it == body_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  void Fail(const std::string& param, const std::string& message) {
    if (!error_) error_ = ApiError::BadRequest(param, message);
  }
  void WrongType(const char* name, const char* expected, const json& v) {
    Fail(name, std::string("'") + name + "': expected " + expected + ", given " + TypeName(v));
  }

  std::optional<std::string> String(const char* name) {
    const json* v = Get(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) {
      WrongType(name, "a string", *v);
      return std::nullopt;
    }
    return v->get<std::string>();
  }
  std::optional<bool> Bool(const char* name) {
    const json* v = Get(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) {
      WrongType(name, "a boolean", *v);
      return std::nullopt;
    }
    return v->get<bool>();
  }
  // An integer in [lo, hi].
  std::optional<int64_t> Int(const char* name, int64_t lo, int64_t hi) {
    const json* v = Get(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number_integer()) {
      WrongType(name, "an integer", *v);
      return std::nullopt;
    }
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
      Fail(name, std::string("'") + name + "': expected at most " + std::to_string(hi) +
                     ", given " + v->dump());
      return std::nullopt;
    }
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) {
      Fail(name, std::string("'") + name + "': expected " + std::to_string(lo) + " to " +
                     std::to_string(hi) + ", given " + std::to_string(x));
      return std::nullopt;
    }
    return x;
  }
  // A number in [lo, hi] (lo excluded when lo_open).
  std::optional<double> Number(const char* name, double lo, double hi, bool lo_open = false) {
    const json* v = Get(name);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) {
      WrongType(name, "a number", *v);
      return std::nullopt;
    }
    const double x = v->get<double>();
    if (!(lo_open ? x > lo : x >= lo) || !(x <= hi)) {
      Fail(name, std::string("'") + name + "': expected " + (lo_open ? "(" : "[") +
                     json(lo).dump() + ", " + json(hi).dump() + "], given " + v->dump());
      return std::nullopt;
    }
    return x;
  }
  // A feature we leave out: accepted only at the value that means "off".
  void OnlyDefault(const char* name, const json& off, const char* what) {
    const json* v = Get(name);
    if (v == nullptr || *v == off) return;
    if (off.is_number() && v->is_number() && v->get<double>() == off.get<double>()) return;
    Fail(name, std::string("'") + name + "': " + what + " is not supported by this server");
  }

 private:
  const json& body_;
  std::optional<ApiError> error_;
};

void ReadStop(Fields& f, CompletionRequest* r) {
  const json* v = f.Get("stop");
  if (v == nullptr) return;
  if (v->is_string()) {
    r->stop.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    if (v->size() > static_cast<size_t>(kMaxStopStrings)) {
      f.Fail("stop", "'stop': expected at most " + std::to_string(kMaxStopStrings) +
                         " strings, given " + std::to_string(v->size()));
      return;
    }
    for (const json& s : *v) {
      if (!s.is_string()) {
        f.WrongType("stop", "a string or an array of strings", s);
        return;
      }
      r->stop.push_back(s.get<std::string>());
    }
  } else {
    f.WrongType("stop", "a string or an array of strings", *v);
    return;
  }
  for (const std::string& s : r->stop) {
    if (s.empty()) f.Fail("stop", "'stop': the stop strings must not be empty");
  }
}

// A list of token ids: [1, 2, 3].
bool ReadIds(Fields& f, const json& v, std::vector<int32_t>* ids) {
  for (const json& t : v) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
        t.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      f.Fail("prompt", "'prompt': a token id must be an integer >= 0, given " + t.dump());
      return false;
    }
    ids->push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return true;
}

// A string, [string], [id, ...] or [[id, ...]]: one prompt (n = 1, no batches of prompts).
void ReadPrompt(Fields& f, CompletionRequest* r) {
  const json* v = f.Get("prompt");
  if (v == nullptr) {
    f.Fail("prompt", "'prompt' is required");
    return;
  }
  if (v->is_string()) {
    r->prompt_text = v->get<std::string>();
    return;
  }
  if (!v->is_array()) {
    f.WrongType("prompt", "a string, an array of token ids, or an array of one of those", *v);
    return;
  }
  if (v->empty()) {
    f.Fail("prompt", "'prompt': the array is empty");
    return;
  }
  if ((*v)[0].is_number()) {
    r->prompt_is_ids = ReadIds(f, *v, &r->prompt_ids);
    return;
  }
  if (v->size() != 1) {
    f.Fail("prompt",
           "'prompt': one prompt per request is supported, given " + std::to_string(v->size()));
    return;
  }
  const json& one = (*v)[0];
  if (one.is_string()) {
    r->prompt_text = one.get<std::string>();
  } else if (one.is_array() && !one.empty()) {
    r->prompt_is_ids = ReadIds(f, one, &r->prompt_ids);
  } else {
    f.WrongType("prompt", "a string, an array of token ids, or an array of one of those", one);
  }
}

// Text parts ([{"type": "text", "text": ...}]) become one string: the chat templates of the
// families we serve read `content` as a string.
std::optional<std::string> MessageContent(Fields& f, const json& content, size_t i) {
  const std::string where = "'messages[" + std::to_string(i) + "].content'";
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    f.Fail("messages",
           where + ": expected a string or an array of text parts, given " + TypeName(content));
    return std::nullopt;
  }
  std::string text;
  for (const json& part : content) {
    auto type = part.is_object() ? part.find("type") : part.end();
    auto t = part.is_object() ? part.find("text") : part.end();
    if (type == part.end() || *type != "text" || t == part.end() || !t->is_string()) {
      f.Fail("messages", where +
                             ": only parts {\"type\": \"text\", \"text\": string} are "
                             "supported");
      return std::nullopt;
    }
    text += t->get<std::string>();
  }
  return text;
}

void ReadMessages(Fields& f, CompletionRequest* r) {
  const json* v = f.Get("messages");
  if (v == nullptr) {
    f.Fail("messages", "'messages' is required");
    return;
  }
  if (!v->is_array() || v->empty()) {
    f.Fail("messages", "'messages': expected a non-empty array of messages");
    return;
  }
  r->messages = nlohmann::ordered_json::array();
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string where = "'messages[" + std::to_string(i) + "]'";
    if (!m.is_object()) {
      f.Fail("messages", where + ": expected an object, given " + TypeName(m));
      return;
    }
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      f.Fail("messages", where + ": 'role' must be a string");
      return;
    }
    if (m.contains("tool_calls") || m.contains("function_call")) {
      f.Fail("messages", where + ": tool calls are not supported by this server");
      return;
    }
    auto content = m.find("content");
    std::optional<std::string> text = MessageContent(f, content == m.end() ? json() : *content, i);
    if (!text) return;
    nlohmann::ordered_json out = {{"role", *role}, {"content", *text}};
    if (auto name = m.find("name"); name != m.end() && name->is_string()) out["name"] = *name;
    r->messages.push_back(std::move(out));
  }
}

void ReadLogprobs(Fields& f, CompletionRequest* r) {
  if (r->endpoint == Endpoint::kCompletions) {
    // Completions: logprobs = n, the top n alternatives of each token.
    if (auto n = f.Int("logprobs", 0, kMaxTopLogprobs)) r->top_logprobs = static_cast<int>(*n);
    return;
  }
  // Chat: logprobs = true, and top_logprobs = n alternatives.
  const std::optional<bool> on = f.Bool("logprobs");
  const std::optional<int64_t> top = f.Int("top_logprobs", 0, kMaxTopLogprobs);
  if (top && !on.value_or(false)) {
    f.Fail("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    return;
  }
  if (on.value_or(false)) r->top_logprobs = static_cast<int>(top.value_or(0));
}

}  // namespace

std::optional<ApiError> ParseCompletionRequest(std::string_view body, Endpoint endpoint,
                                               CompletionRequest* request) {
  json parsed;
  try {
    parsed = json::parse(body);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers like 1E999
    return ApiError::BadRequest("", std::string("the body is not valid JSON: ") + e.what());
  }
  if (!parsed.is_object()) {
    return ApiError::BadRequest("", "the body must be a JSON object, given " + TypeName(parsed));
  }
  CompletionRequest r;
  r.endpoint = endpoint;
  Fields f(parsed);
  if (auto model = f.String("model")) r.model = *model;
  if (endpoint == Endpoint::kCompletions) {
    ReadPrompt(f, &r);
    f.OnlyDefault("echo", false, "echo");
    f.OnlyDefault("best_of", 1, "best_of other than 1");
    f.OnlyDefault("suffix", "", "suffix");
  } else {
    ReadMessages(f, &r);
    f.OnlyDefault("tools", json::array(), "tools");
    f.OnlyDefault("functions", json::array(), "functions");
    f.OnlyDefault("tool_choice", "none", "tool_choice");
    if (const json* rf = f.Get("response_format");
        rf != nullptr && !(rf->is_object() && rf->value("type", "") == "text")) {
      f.Fail("response_format", "'response_format': only {\"type\": \"text\"} is supported");
    }
  }
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  r.max_tokens = f.Int("max_tokens", 1, kIntMax);
  if (endpoint == Endpoint::kChatCompletions) {
    if (auto m = f.Int("max_completion_tokens", 1, kIntMax)) r.max_tokens = m;
  }
  if (auto t = f.Number("temperature", 0.0, 2.0)) r.temperature = static_cast<float>(*t);
  if (auto p = f.Number("top_p", 0.0, 1.0, /*lo_open=*/true)) r.top_p = static_cast<float>(*p);
  if (auto k = f.Int("top_k", 0, kIntMax)) r.top_k = *k;
  if (const json* seed = f.Get("seed")) {
    if (!seed->is_number_integer()) {
      f.WrongType("seed", "an integer", *seed);
    } else {
      // Negative seeds are accepted, as OpenAI does: their two's-complement bits seed.
      r.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                          : static_cast<uint64_t>(seed->get<int64_t>());
    }
  }
  ReadStop(f, &r);
  ReadLogprobs(f, &r);
  f.Int("n", 1, 1);
  f.OnlyDefault("presence_penalty", 0, "presence_penalty");
  f.OnlyDefault("frequency_penalty", 0, "frequency_penalty");
  f.OnlyDefault("logit_bias", json::object(), "logit_bias");
  f.String("user");
  if (auto s = f.Bool("stream")) r.stream = *s;
  if (auto e = f.Bool("ignore_eos")) r.ignore_eos = *e;
  if (const json* so = f.Get("stream_options")) {
    if (!so->is_object()) {
      f.WrongType("stream_options", "an object", *so);
    } else if (auto u = so->find("include_usage"); u != so->end() && !u->is_null()) {
      if (!u->is_boolean()) {
        f.WrongType("stream_options", "a boolean include_usage", *u);
      } else {
        r.include_usage = u->get<bool>();
      }
    }
  }
  if (f.error()) return f.error();
  *request = std::move(r);
  return std::nullopt;
}

}  // namespace ssmkit::server
