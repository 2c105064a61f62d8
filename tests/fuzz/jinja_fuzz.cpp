// libFuzzer target for the chat-template interpreter (src/server/jinja): any bytes as a
// template must parse or fail with a Status, and a parsed one must render or fail with a Status,
// within the interpreter's bounds (nesting, loop iterations, output size), on a fixed context
// of messages. Seed corpus: tests/fuzz/corpus/jinja/ (the test templates of tests/server).
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/chat_template.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const nlohmann::ordered_json kMessages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi \u00e9 /think"},
    {"role": "assistant", "content": "Hello.", "tool_calls": [{"function": {"name": "f",
      "arguments": {"a": [1, 2.5, null, true]}}}]},
    {"role": "user", "content": ""}])");
  std::unique_ptr<ssmkit::server::ChatTemplate> t;
  const std::string source(reinterpret_cast<const char*>(data), size);
  if (!ssmkit::server::ChatTemplate::FromSource(source, {{"bos_token", "<s>"}}, &t).ok()) return 0;
  std::string text;
  (void)t->Render(kMessages, /*add_generation_prompt=*/true, &text);
  return 0;
}
