// The server's pieces that need no engine: the request parser (every field's type and range,
// what is refused, OpenAI's error shape), the text a request receives (stop strings held back
// across tokens, UTF-8 characters split over byte tokens), and the prefix cache (longest
// prefix, LRU within the byte capacity).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/completion_request.hpp"
#include "server/prefix_cache.hpp"
#include "server/text_output.hpp"

namespace ssmkit::server {
namespace {

std::optional<ApiError> Parse(const std::string& body, Endpoint e, CompletionRequest* r) {
  return ParseCompletionRequest(body, e, r);
}

TEST(CompletionRequest, ReadsEveryField) {
  CompletionRequest r;
  ASSERT_FALSE(Parse(R"({"model": "m", "prompt": "hi", "max_tokens": 7, "temperature": 0.5,
                         "top_p": 0.9, "top_k": 4, "seed": -3, "stop": ["a", "b"], "logprobs": 2,
                         "stream": true, "stream_options": {"include_usage": true}, "n": 1,
                         "echo": false, "presence_penalty": 0, "user": "u", "unknown": [1]})",
                     Endpoint::kCompletions, &r));
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt_text, "hi");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.top_p, 0.9f);
  EXPECT_EQ(r.top_k, 4);
  EXPECT_EQ(r.seed, static_cast<uint64_t>(-3));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_TRUE(r.stream && r.include_usage);

  ASSERT_FALSE(Parse(R"({"prompt": [[1, 2, 3]]})", Endpoint::kCompletions, &r));
  EXPECT_TRUE(r.prompt_is_ids);
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r.temperature, 1.0f);  // OpenAI's default

  ASSERT_FALSE(Parse(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                         {"type": "text", "text": "b"}]}, {"role": "assistant", "content": null}],
                         "logprobs": true, "top_logprobs": 3, "max_completion_tokens": 9})",
                     Endpoint::kChatCompletions, &r));
  EXPECT_EQ(r.messages.dump(),
            R"([{"role":"user","content":"ab"},{"role":"assistant","content":""}])");
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_EQ(r.max_tokens, 9);
}

TEST(CompletionRequest, RefusesWithTheFieldNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"prompt": "x", "max_tokens": "5"})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "x", "max_tokens": 18446744073709551615})", "max_tokens"},
      {R"({"prompt": "x", "temperature": -0.1})", "temperature"},
      {R"({"prompt": "x", "temperature": true})", "temperature"},
      {R"({"prompt": "x", "top_p": 1.5})", "top_p"},
      {R"({"prompt": "x", "stop": [1]})", "stop"},
      {R"({"prompt": "x", "n": 3})", "n"},
      {R"({"prompt": "x", "logprobs": 9})", "logprobs"},
      {R"({"prompt": "x", "echo": true})", "echo"},
      {R"({"prompt": "x", "best_of": 2})", "best_of"},
      {R"({"prompt": "x", "frequency_penalty": 1})", "frequency_penalty"},
      {R"({"prompt": [1, 2.5]})", "prompt"},
      {R"({"prompt": [[1], [2]]})", "prompt"},
      {R"({"prompt": {"a": 1}})", "prompt"},
      {R"({"max_tokens": 3})", "prompt"},
  };
  for (const auto& [body, param] : cases) {
    CompletionRequest r;
    const std::optional<ApiError> e = Parse(body, Endpoint::kCompletions, &r);
    ASSERT_TRUE(e.has_value()) << body;
    EXPECT_EQ(e->http_status, 400) << body;
    EXPECT_EQ(e->param, param) << body << ": " << e->message;
    // OpenAI's error shape, whatever the message holds.
    const nlohmann::json j = nlohmann::json::parse(e->ToJson());
    EXPECT_EQ(j["error"]["param"], param);
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    EXPECT_TRUE(j["error"]["code"].is_null());
  }
}

TEST(CompletionRequest, MalformedBodies) {
  for (const std::string body : {std::string("{"), std::string("[]"), std::string("null"),
                                 std::string("\"x\""), std::string("{\"prompt\": \"\xff\"}"),
                                 std::string("{\"prompt\": \"a\"} x"), std::string("\0{}", 3),
                                 // a number past double's range (found by the fuzzer)
                                 std::string("{\"prompt\": \"a\", \"top_p\": 1E999}")}) {
    CompletionRequest r;
    const std::optional<ApiError> e = Parse(body, Endpoint::kCompletions, &r);
    ASSERT_TRUE(e.has_value()) << body;
    EXPECT_EQ(e->http_status, 400);
    EXPECT_NO_THROW(nlohmann::json::parse(e->ToJson())) << "the error body is valid JSON";
  }
}

// The text of byte tokens (the byte tokenizer: token i is byte i).
std::vector<int32_t> Bytes(const std::string& s) {
  std::vector<int32_t> ids;
  for (unsigned char c : s) ids.push_back(c);
  return ids;
}

struct Streamed {
  std::string text;
  bool stopped = false;
  std::vector<std::string> pieces;
};

Streamed StreamText(const std::string& generated, std::vector<std::string> stop) {
  auto tokenizer = Tokenizer::Bytes();
  TextOutput out(*tokenizer, std::move(stop));
  Streamed s;
  for (int32_t id : Bytes(generated)) {
    std::string piece = out.Push(id, &s.stopped);
    s.pieces.push_back(piece);
    s.text += piece;
    if (s.stopped) return s;
  }
  s.text += out.Finish();
  return s;
}

TEST(TextOutput, StopStrings) {
  EXPECT_EQ(StreamText("hello world", {"wor"}).text, "hello ");
  EXPECT_TRUE(StreamText("hello world", {"wor"}).stopped);
  EXPECT_EQ(StreamText("hello world", {"zz"}).text, "hello world");
  EXPECT_FALSE(StreamText("hello world", {"zz"}).stopped);
  // The earliest stop wins; a stop at the very start gives no text.
  EXPECT_EQ(StreamText("abcdef", {"de", "bc"}).text, "a");
  EXPECT_EQ(StreamText("abcdef", {"ab"}).text, "");
  // Overlapping candidates: "aab" inside "aaab".
  EXPECT_EQ(StreamText("xaaab", {"aab"}).text, "xa");
  // A held-back prefix that does not complete is released at the end.
  const Streamed partial = StreamText("the LOR", {"LORD"});
  EXPECT_EQ(partial.text, "the LOR");
  EXPECT_EQ(partial.pieces.back(), "") << "LOR is held until generation ends";
}

TEST(TextOutput, NeverSendsWhatAStopWouldCut) {
  const Streamed s = StreamText("see LORD", {"LORD"});
  for (const std::string& p : s.pieces) EXPECT_EQ(p.find('L'), std::string::npos);
  EXPECT_EQ(s.text, "see ");
}

TEST(TextOutput, CharactersSplitOverTokensArriveWhole) {
  const Streamed s = StreamText("é中🙂", {});
  EXPECT_EQ(s.text, "é中🙂");
  for (const std::string& p : s.pieces) {
    std::string check;
    EXPECT_EQ(Utf8Lossy(p, true, &check), p.size());
    EXPECT_EQ(check, p) << "every piece is valid UTF-8 on its own";
  }
  // A stop string made of multi-byte characters.
  EXPECT_EQ(StreamText("aé中b", {"中b"}).text, "aé");
  // An incomplete character at the end reads as U+FFFD, as Decode gives.
  EXPECT_EQ(StreamText(std::string("a\xe4\xb8"), {}).text, "a\xef\xbf\xbd");
}

PrefixCache::Entry Entry(std::vector<int32_t> tokens, size_t state_bytes) {
  PrefixCache::Entry e;
  e.tokens = std::move(tokens);
  e.state.assign(state_bytes, static_cast<uint8_t>(e.tokens.size()));
  e.logits = {1.0f, 2.0f};
  return e;
}

TEST(PrefixCache, LongestCachedPrefix) {
  PrefixCache cache(1 << 20);
  ASSERT_TRUE(cache.Insert(Entry({1, 2}, 100)));
  ASSERT_TRUE(cache.Insert(Entry({1, 2, 3, 4}, 100)));
  ASSERT_TRUE(cache.Insert(Entry({9}, 100)));
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  const PrefixCache::Entry* hit = cache.Lookup(prompt);
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(cache.Lookup(std::vector<int32_t>{1, 2, 7})->tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(cache.Lookup(std::vector<int32_t>{1, 2})->tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(cache.Lookup(std::vector<int32_t>{2, 1}), nullptr);
  EXPECT_EQ(cache.Lookup(std::vector<int32_t>{}), nullptr);
  EXPECT_EQ(cache.stats().hits, 3);
  EXPECT_EQ(cache.stats().misses, 2);
  EXPECT_EQ(cache.stats().reused_tokens, 4 + 2 + 2);
  EXPECT_TRUE(cache.Contains(std::vector<int32_t>{9}));
  EXPECT_FALSE(cache.Contains(std::vector<int32_t>{9, 9}));
}

TEST(PrefixCache, EvictsLeastRecentlyUsedWithinCapacity) {
  const int64_t one = Entry({0}, 1000).bytes();
  PrefixCache cache(3 * one + one / 2);  // room for three entries
  for (int32_t t = 1; t <= 3; ++t) ASSERT_TRUE(cache.Insert(Entry({t}, 1000)));
  ASSERT_NE(cache.Lookup(std::vector<int32_t>{1}), nullptr);  // 1 is now the most recent
  ASSERT_TRUE(cache.Insert(Entry({4}, 1000)));                // evicts 2, the least recent
  EXPECT_TRUE(cache.Contains(std::vector<int32_t>{1}));
  EXPECT_FALSE(cache.Contains(std::vector<int32_t>{2}));
  EXPECT_TRUE(cache.Contains(std::vector<int32_t>{3}));
  EXPECT_TRUE(cache.Contains(std::vector<int32_t>{4}));
  EXPECT_EQ(cache.stats().entries, 3);
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_LE(cache.stats().bytes, cache.capacity_bytes());
  // The same prefix again replaces its entry; one larger than the capacity is refused.
  ASSERT_TRUE(cache.Insert(Entry({4}, 1000)));
  EXPECT_EQ(cache.stats().entries, 3);
  EXPECT_FALSE(cache.Insert(Entry({5}, 10 * 1000)));
  EXPECT_FALSE(cache.Contains(std::vector<int32_t>{5}));
  EXPECT_EQ(cache.stats().entries, 3);
}

}  // namespace
}  // namespace ssmkit::server
