// The SentencePiece-style tokenizer of GGUF "llama" vocabularies (src/model/spm_tokenizer.hpp)
// on a small hand-made vocabulary: the highest-scoring pair merged first and the leftmost among
// equal scores, a pair merged only when it spells a token, byte fallback (and the unknown token
// without byte tokens), the special-token cut (control, user-defined, unknown; longest first)
// with a space put after each, the space prefix and its decoding, bos / eos, every token type's
// text; the vocabulary read from a GGUF file's metadata (Tokenizer::ForModel) with llama.cpp's
// defaults; and the errors for unusable vocabularies.
#include "model/spm_tokenizer.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/gguf_writer.hpp"
#include "test_util.hpp"

namespace ssmkit::testing {
namespace {

using model::SpmVocab;

const std::string kSp = "\xE2\x96\x81";  // U+2581

// Ids: 0 <unk>, 1 <s>, 2 </s>, 3 + b the byte token <0xb>, then the named ones from 259.
struct TestVocab {
  SpmVocab v;
  int32_t Add(const std::string& text, float score, int32_t type = model::kSpmNormal) {
    v.tokens.push_back(text);
    v.scores.push_back(score);
    v.types.push_back(type);
    return static_cast<int32_t>(v.tokens.size() - 1);
  }
  TestVocab() {
    Add("<unk>", 0, model::kSpmUnknown);
    Add("<s>", 0, model::kSpmControl);
    Add("</s>", 0, model::kSpmControl);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      Add(name, 0, model::kSpmByte);
    }
    v.bos = 1;
    v.eos = 2;
    v.unk = 0;
  }
};

// The vocabulary the cases below use, and its ids by text.
struct Fixture {
  TestVocab t;
  int32_t sp, a, b, c, x, y, z, ab, bc, abc, sp_a, sp_b, xy, yz, sp_sp, tool, unused;
  Fixture() {
    sp = t.Add(kSp, -10);
    a = t.Add("a", -10);
    b = t.Add("b", -10);
    c = t.Add("c", -10);
    x = t.Add("x", -10);
    y = t.Add("y", -10);
    z = t.Add("z", -10);
    ab = t.Add("ab", -3);
    bc = t.Add("bc", -1);  // outranks ab
    abc = t.Add("abc", -4);
    sp_a = t.Add(kSp + "a", -2);
    sp_b = t.Add(kSp + "b", -2);
    xy = t.Add("xy", -5);
    yz = t.Add("yz", -5);  // ties with xy
    sp_sp = t.Add(kSp + kSp, -6);
    tool = t.Add("<tool>", 0, model::kSpmUserDefined);
    unused = t.Add("<unused0>", 0, model::kSpmUnused);
  }
  std::unique_ptr<Tokenizer> Make(bool add_space_prefix = true) const {
    SpmVocab v = t.v;
    v.add_space_prefix = add_space_prefix;
    std::unique_ptr<Tokenizer> tok;
    const Status s = model::MakeSpmTokenizer(v, "test vocab", &tok);
    EXPECT_TRUE(s.ok()) << s.message();
    return tok;
  }
};

std::vector<int32_t> Encode(const Tokenizer& t, const std::string& text) {
  std::vector<int32_t> ids;
  const Status s = t.Encode(text, &ids);
  EXPECT_TRUE(s.ok()) << s.message();
  return ids;
}

int32_t Byte(uint8_t b) { return 3 + b; }

TEST(SpmTokenizer, MergesByScoreThenLeftmost) {
  const Fixture f;
  const auto t = f.Make(/*add_space_prefix=*/false);
  ASSERT_NE(t, nullptr);
  // bc (-1) before ab (-3); then a + bc spells abc (-4).
  EXPECT_EQ(Encode(*t, "abc"), (std::vector<int32_t>{f.abc}));
  // Without abc in reach: "abb" -> ab, b.
  EXPECT_EQ(Encode(*t, "abb"), (std::vector<int32_t>{f.ab, f.b}));
  // xy and yz score alike: the leftmost pair is merged.
  EXPECT_EQ(Encode(*t, "xyz"), (std::vector<int32_t>{f.xy, f.z}));
  // bc outranks ab wherever they stand: "zabc" -> z, abc; "babc" -> b, abc.
  EXPECT_EQ(Encode(*t, "babc"), (std::vector<int32_t>{f.b, f.abc}));
  // Spaces are U+2581 and merge like any character; no prefix here.
  EXPECT_EQ(Encode(*t, "a b"), (std::vector<int32_t>{f.a, f.sp_b}));
  // ▁a (-2) outranks ▁▁ (-6).
  EXPECT_EQ(Encode(*t, "  a"), (std::vector<int32_t>{f.sp, f.sp_a}));
  EXPECT_EQ(Encode(*t, ""), (std::vector<int32_t>{}));
}

TEST(SpmTokenizer, SpacePrefixAtTheStartAndAfterSpecialTokens) {
  const Fixture f;
  const auto t = f.Make();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, "a b"), (std::vector<int32_t>{f.sp_a, f.sp_b}));
  EXPECT_EQ(Encode(*t, " a"), (std::vector<int32_t>{f.sp, f.sp_a}));
  EXPECT_EQ(Encode(*t, " "), (std::vector<int32_t>{f.sp_sp}));
  // Control, user-defined and unknown tokens are cut out of the text; the text after one gets
  // its own space, the one before it none.
  EXPECT_EQ(Encode(*t, "a<s>b"), (std::vector<int32_t>{f.sp_a, 1, f.sp_b}));
  EXPECT_EQ(Encode(*t, "<s>a</s>"), (std::vector<int32_t>{1, f.sp_a, 2}));
  EXPECT_EQ(Encode(*t, "b<tool><unk>a"), (std::vector<int32_t>{f.sp_b, f.tool, 0, f.sp_a}));
  // Unused tokens are not special: their text is encoded as text.
  EXPECT_EQ(Encode(*t, "<unused0>")[0], f.sp);
  EXPECT_EQ(Encode(*t, ""), (std::vector<int32_t>{}));
}

TEST(SpmTokenizer, LongestSpecialTokenFirst) {
  Fixture f;
  const int32_t long_one = f.t.Add("<s>a", 0, model::kSpmControl);
  const auto t = f.Make(/*add_space_prefix=*/false);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Encode(*t, "<s>a<s>b"), (std::vector<int32_t>{long_one, 1, f.b}));
}

TEST(SpmTokenizer, ByteFallback) {
  const Fixture f;
  const auto t = f.Make(/*add_space_prefix=*/false);
  ASSERT_NE(t, nullptr);
  // é (C3 A9) and 日 (E6 97 A5) are not tokens: their UTF-8 bytes are.
  EXPECT_EQ(Encode(*t, "a\xC3\xA9"), (std::vector<int32_t>{f.a, Byte(0xC3), Byte(0xA9)}));
  EXPECT_EQ(Encode(*t, "\xE6\x97\xA5z"),
            (std::vector<int32_t>{Byte(0xE6), Byte(0x97), Byte(0xA5), f.z}));
  // Invalid UTF-8: a lead byte cut short at the end, a lone continuation byte.
  EXPECT_EQ(Encode(*t, "a\xC3"), (std::vector<int32_t>{f.a, Byte(0xC3)}));
  EXPECT_EQ(Encode(*t,
                   "\x80"
                   "b"),
            (std::vector<int32_t>{Byte(0x80), f.b}));
  EXPECT_TRUE(t->IsByteToken(Byte(0xC3)));
  EXPECT_FALSE(t->IsByteToken(f.a));
}

TEST(SpmTokenizer, UnknownTokenWithoutByteTokens) {
  SpmVocab v;
  v.tokens = {"<unk>", "a"};
  v.scores = {0, 0};
  v.types = {model::kSpmUnknown, model::kSpmNormal};
  v.unk = 0;
  v.add_space_prefix = false;
  std::unique_ptr<Tokenizer> t;
  ASSERT_TRUE(model::MakeSpmTokenizer(v, "no bytes", &t).ok());
  EXPECT_EQ(Encode(*t, "a\xC3\xA9"), (std::vector<int32_t>{1, 0, 0}));
  v.unk = -1;
  ASSERT_TRUE(model::MakeSpmTokenizer(v, "no bytes", &t).ok());
  std::vector<int32_t> ids;
  const Status s = t->Encode("a\xC3\xA9", &ids);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("byte 0xC3"), std::string::npos) << s.message();
}

TEST(SpmTokenizer, DecodeEachTokenType) {
  const Fixture f;
  const auto t = f.Make();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->leading_spaces_stripped(), 1);
  const std::vector<int32_t> ids = {f.sp_a,   1,          f.sp_b,     f.tool, 0,
                                    f.unused, Byte(0xC3), Byte(0xA9), 2};
  EXPECT_EQ(t->Decode(ids), "a<s> b<tool><unk>\xC3\xA9</s>");
  EXPECT_EQ(t->Decode(ids, /*skip_special=*/true), "a b<tool>\xC3\xA9");
  EXPECT_EQ(t->Decode(std::vector<int32_t>{Byte(0xC3), f.a}),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(f.Make(false)->Decode(std::vector<int32_t>{f.sp_a}), " a");
  EXPECT_EQ(t->TokenId("<tool>"), f.tool);
  EXPECT_EQ(t->TokenId("nope"), -1);
  EXPECT_EQ(t->vocab_size(), static_cast<int64_t>(f.t.v.tokens.size()));
}

TEST(SpmTokenizer, BosAndEos) {
  Fixture f;
  auto t = f.Make();
  std::vector<int32_t> ids = {f.sp_a};
  t->AddSpecialTokens(&ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, f.sp_a}));
  f.t.v.add_bos = false;
  f.t.v.add_eos = true;
  t = f.Make();
  ids = {f.sp_a};
  t->AddSpecialTokens(&ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{f.sp_a, 2}));
}

TEST(SpmTokenizer, RoundTripsFreshText) {
  const Fixture f;
  const auto t = f.Make();
  ASSERT_NE(t, nullptr);
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(SeedTrace(seed));
  Rng rng(seed);
  const std::vector<std::string> alphabet = {
      "a", "b", "c", "x", "y", "z", " ", "  ", "\n", "\xC3\xA9", "\xE6\x97\xA5", "\xF0\x9F\x99\x82",
      "!"};
  for (int n = 0; n < 300; ++n) {
    std::string text;
    const int len = static_cast<int>(rng.Uniform(0, 25));
    for (int i = 0; i < len; ++i)
      text += alphabet[static_cast<size_t>(rng.Uniform(0, alphabet.size()))];
    const std::vector<int32_t> ids = Encode(*t, text);
    EXPECT_EQ(t->Decode(ids), text) << "text: \"" << text << "\"";
    // Streaming gives the same text.
    TokenTextStream stream(*t, /*skip_special=*/false);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.Push(id);
    EXPECT_EQ(streamed + stream.Finish(), text);
  }
}

TEST(SpmTokenizer, VocabularyErrors) {
  Fixture f;
  SpmVocab v = f.t.v;
  v.scores.pop_back();
  std::unique_ptr<Tokenizer> t;
  Status s = model::MakeSpmTokenizer(v, "short", &t);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("scores"), std::string::npos) << s.message();
  v = f.t.v;
  v.types[f.a] = model::kSpmByte;
  s = model::MakeSpmTokenizer(v, "bad byte", &t);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("spelled 'a', expected <0xNN>"), std::string::npos) << s.message();
}

// A "llama" vocabulary in a GGUF file's metadata, read by Tokenizer::ForModel.
class GgufVocab : public ::testing::Test {
 protected:
  std::string Write(const std::function<void(GgufWriter*)>& edit) {
    GgufWriter w;
    w.AddString("general.architecture", "jamba");
    w.AddString("tokenizer.ggml.model", "llama");
    const Fixture f;
    w.AddStrings("tokenizer.ggml.tokens", f.t.v.tokens);
    GgufValue scores;
    scores.type = GgufType::kArray;
    scores.element_type = GgufType::kF32;
    scores.reals.assign(f.t.v.scores.begin(), f.t.v.scores.end());
    w.AddValue("tokenizer.ggml.scores", scores);
    w.AddI32s("tokenizer.ggml.token_type", f.t.v.types);
    edit(&w);
    const std::string path = ::testing::TempDir() + "spm_vocab.gguf";
    EXPECT_TRUE(w.Write(path).ok());
    return path;
  }
};

TEST_F(GgufVocab, ReadWithLlamaCppDefaults) {
  const Fixture f;
  // No add_space_prefix, add_bos_token or special ids: llama.cpp's defaults (prefix on, bos 1
  // put first, eos 2).
  std::unique_ptr<Tokenizer> t;
  Status s = Tokenizer::ForModel(Write([](GgufWriter*) {}), 0, &t);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(t->name().rfind("spm (", 0), 0u) << t->name();
  // "▁abc▁a": bc, then ▁a twice (-2, leftmost first) before a + bc, which is stale by then.
  std::vector<int32_t> ids = Encode(*t, "abc a");
  EXPECT_EQ(ids, (std::vector<int32_t>{f.sp_a, f.bc, f.sp_a}));
  t->AddSpecialTokens(&ids);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(t->Decode(ids, /*skip_special=*/true), "abc a");
  // The keys as a converter writes them.
  s = Tokenizer::ForModel(Write([](GgufWriter* w) {
                            w->AddBool("tokenizer.ggml.add_space_prefix", false);
                            w->AddBool("tokenizer.ggml.add_bos_token", false);
                            w->AddBool("tokenizer.ggml.add_eos_token", true);
                            w->AddU32("tokenizer.ggml.eos_token_id", 0);
                          }),
                          0, &t);
  ASSERT_TRUE(s.ok()) << s.message();
  ids = Encode(*t, "abc a");
  EXPECT_EQ(ids, (std::vector<int32_t>{f.abc, f.sp_a}));
  t->AddSpecialTokens(&ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{f.abc, f.sp_a, 0}));
}

TEST_F(GgufVocab, ErrorsNameTheKey) {
  std::unique_ptr<Tokenizer> t;
  GgufWriter w;
  w.AddString("tokenizer.ggml.model", "llama");
  w.AddStrings("tokenizer.ggml.tokens", {"a", "b", "c"});
  w.AddI32s("tokenizer.ggml.scores", {0, 0});
  const std::string path = ::testing::TempDir() + "spm_short.gguf";
  ASSERT_TRUE(w.Write(path).ok());
  Status s = Tokenizer::ForModel(path, 0, &t);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tokenizer.ggml.scores has 2 entries, expected one per token (3)"),
            std::string::npos)
      << s.message();
  GgufWriter other;
  other.AddString("tokenizer.ggml.model", "bert");
  const std::string bert = ::testing::TempDir() + "bert.gguf";
  ASSERT_TRUE(other.Write(bert).ok());
  s = Tokenizer::ForModel(bert, 0, &t);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("tokenizer.ggml.model 'bert'"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace ssmkit::testing
