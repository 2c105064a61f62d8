#include "model/tokenizer_pipeline.hpp"

#include <cctype>
#include <cstdlib>
#include <unordered_map>

namespace ssmkit::model {
namespace {

using Json = nlohmann::json;

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other 68 (controls,
// space, DEL, NBSP, soft hyphen, ...) for U+0100 onwards, so every byte is a visible character.
struct ByteMap {
  std::string byte_to_utf8[256];                       // byte -> UTF-8 of its character
  std::unordered_map<uint32_t, uint8_t> char_to_byte;  // code point -> byte
  ByteMap() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      const uint32_t cp = printable ? b : next++;
      char_to_byte[cp] = static_cast<uint8_t>(b);
      std::string& s = byte_to_utf8[b];
      if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
      } else {  // cp < 0x800: two bytes
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
    }
  }
};

const ByteMap& TheByteMap() {
  static const ByteMap map;
  return map;
}

void ReplaceAll(std::string* s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  std::string out;
  size_t i = 0;
  for (size_t hit; (hit = s->find(from, i)) != std::string::npos; i = hit + from.size()) {
    out.append(*s, i, hit - i);
    out += to;
  }
  out.append(*s, i, std::string::npos);
  *s = std::move(out);
}

Status Unsupported(const std::string& what) {
  return Status::Unsupported(what + " (docs/model.md lists what is supported)");
}

std::string TypeOf(const Json& j) {
  return j.is_object() && j.contains("type") && j.at("type").is_string()
             ? j.at("type").get<std::string>()
             : "";
}

// {"String": s} patterns only (Replace); a Regex pattern is refused.
Status StringPattern(const Json& j, const char* where, std::string* s) {
  const Json& p = j.value("pattern", Json());
  if (p.is_object() && p.contains("String") && p.at("String").is_string()) {
    *s = p.at("String").get<std::string>();
    return Status::Ok();
  }
  return Unsupported(std::string(where) + " Replace with a pattern other than a String");
}

// The items of a Sequence (key `list`), or the one step itself.
std::vector<Json> Steps(const Json& j, const char* list) {
  if (TypeOf(j) == "Sequence" && j.contains(list) && j.at(list).is_array())
    return j.at(list).get<std::vector<Json>>();
  return {j};
}

// Metaspace's prepend_scheme (or the older add_prefix_space flag): 0 never, 1 first, 2 always.
int PrependScheme(const Json& j) {
  if (j.contains("prepend_scheme") && j.at("prepend_scheme").is_string()) {
    const std::string s = j.at("prepend_scheme").get<std::string>();
    return s == "first" ? 1 : s == "never" ? 0 : 2;
  }
  return j.value("add_prefix_space", true) ? 2 : 0;
}

std::string MetaspaceReplacement(const Json& j) {
  return j.contains("replacement") && j.at("replacement").is_string()
             ? j.at("replacement").get<std::string>()
             : "\xE2\x96\x81";  // U+2581
}

}  // namespace

Status TextPipeline::Load(const Json& root) {
  auto get = [&](const char* key) { return root.contains(key) ? root.at(key) : Json(); };
  SSMKIT_RETURN_IF_ERROR(LoadNormalizer(get("normalizer")));
  SSMKIT_RETURN_IF_ERROR(LoadPreTokenizer(get("pre_tokenizer")));
  SSMKIT_RETURN_IF_ERROR(LoadPostProcessor(get("post_processor")));
  bool fused = false;
  return LoadDecoder(get("decoder"), &fused);
}

Status TextPipeline::LoadNormalizer(const Json& j) {
  if (j.is_null()) return Status::Ok();
  for (const Json& step : Steps(j, "normalizers")) {
    const std::string type = TypeOf(step);
    if (type == "NFC") {
      normalizers_.push_back({NormalizerStep::kNfc, "", ""});
    } else if (type == "Prepend" && step.contains("prepend") && step.at("prepend").is_string()) {
      normalizers_.push_back({NormalizerStep::kPrepend, step.at("prepend").get<std::string>(), ""});
    } else if (type == "Replace") {
      std::string from;
      SSMKIT_RETURN_IF_ERROR(StringPattern(step, "normalizer", &from));
      normalizers_.push_back({NormalizerStep::kReplace, from, step.value("content", "")});
    } else {
      return Unsupported("normalizer \"" + type + "\" (NFC, Prepend, Replace or a Sequence)");
    }
  }
  return Status::Ok();
}

Status TextPipeline::LoadPreTokenizer(const Json& j) {
  if (j.is_null()) return Status::Ok();
  for (const Json& step : Steps(j, "pretokenizers")) {
    const std::string type = TypeOf(step);
    PreTokenizerStep p;
    if (type == "ByteLevel") {
      p.kind = PreTokenizerStep::kByteLevel;
      p.add_prefix_space = step.value("add_prefix_space", false);
      if (step.value("use_regex", true))
        p.regex = std::make_shared<RegexSplitter>(RegexSplitter::GptPattern());
      byte_level_ = true;
    } else if (type == "Split") {
      const Json& pattern = step.value("pattern", Json());
      if (!pattern.is_object() || !pattern.contains("Regex") || !pattern.at("Regex").is_string())
        return Unsupported("pre_tokenizer Split with a pattern other than a Regex");
      if (step.value("behavior", "") != "Isolated" || step.value("invert", false))
        return Unsupported("pre_tokenizer Split with behavior \"" + step.value("behavior", "") +
                           "\"" + (step.value("invert", false) ? " inverted" : "") +
                           " (Isolated, not inverted)");
      p.kind = PreTokenizerStep::kSplit;
      p.regex = std::make_shared<RegexSplitter>(pattern.at("Regex").get<std::string>());
    } else if (type == "Metaspace") {
      p.kind = PreTokenizerStep::kMetaspace;
      p.replacement = MetaspaceReplacement(step);
      p.prepend = PrependScheme(step);
      p.split = step.value("split", true);
    } else {
      return Unsupported("pre_tokenizer \"" + type +
                         "\" (ByteLevel, Split, Metaspace or a Sequence)");
    }
    if (p.regex) SSMKIT_RETURN_IF_ERROR(p.regex->status());
    pre_tokenizers_.push_back(std::move(p));
  }
  return Status::Ok();
}

Status TextPipeline::LoadPostProcessor(const Json& j) {
  if (j.is_null()) return Status::Ok();
  for (const Json& step : Steps(j, "processors")) {
    const std::string type = TypeOf(step);
    if (type == "ByteLevel") continue;  // offsets only
    if (type != "TemplateProcessing" || !step.contains("single") || !step.at("single").is_array())
      return Unsupported("post_processor \"" + type +
                         "\" (ByteLevel, TemplateProcessing or a Sequence)");
    const Json specials = step.value("special_tokens", Json::object());
    bool seen_sequence = false;
    for (const Json& item : step.at("single")) {
      if (item.contains("Sequence")) {
        seen_sequence = true;
        continue;
      }
      const Json& sp = item.value("SpecialToken", Json());
      const std::string name = sp.is_object() ? sp.value("id", "") : "";
      if (!specials.contains(name) || !specials.at(name).contains("ids"))
        return Status::InvalidArgument("post_processor: special token \"" + name +
                                       "\" of the template is not in its special_tokens");
      for (const Json& id : specials.at(name).at("ids")) {
        if (!id.is_number_integer())
          return Status::InvalidArgument("post_processor: ids of \"" + name + "\"");
        (seen_sequence ? after_ : before_).push_back(id.get<int32_t>());
      }
    }
  }
  return Status::Ok();
}

Status TextPipeline::LoadDecoder(const Json& j, bool* fused) {
  if (j.is_null()) return Unsupported("no decoder");
  for (const Json& step : Steps(j, "decoders")) {
    const std::string type = TypeOf(step);
    if (type == "ByteLevel") {
      decode_byte_level_ = true;
    } else if (type == "ByteFallback") {
      byte_fallback_ = true;
    } else if (type == "Fuse") {
      *fused = true;
    } else if (type == "Replace") {
      std::string from;
      SSMKIT_RETURN_IF_ERROR(StringPattern(step, "decoder", &from));
      decode_replaces_.push_back({from, step.value("content", "")});
    } else if (type == "Metaspace") {
      decode_replaces_.push_back({MetaspaceReplacement(step), " "});
      if (PrependScheme(step) != 0) strip_ = 1;
    } else if (type == "Strip" && *fused && step.value("content", "") == " " &&
               step.value("stop", 0) == 0 && step.value("start", 0) >= 0) {
      strip_ = step.value("start", 0);
    } else {
      return Unsupported("decoder \"" + type +
                         "\" (ByteLevel, Replace, ByteFallback, Fuse, Strip of leading spaces "
                         "after Fuse, Metaspace or a Sequence)");
    }
  }
  return Status::Ok();
}

Status TextPipeline::Normalize(std::string_view text, std::string* out) const {
  *out = std::string(text);
  for (const NormalizerStep& n : normalizers_) {
    switch (n.kind) {
      case NormalizerStep::kNfc: {
        std::string nfc;
        SSMKIT_RETURN_IF_ERROR(NormalizeNfc(*out, &nfc));
        *out = std::move(nfc);
        break;
      }
      case NormalizerStep::kPrepend:
        if (!out->empty()) *out = n.a + *out;
        break;
      case NormalizerStep::kReplace:
        ReplaceAll(out, n.a, n.b);
        break;
    }
  }
  return Status::Ok();
}

Status TextPipeline::PreTokenize(std::string_view text, bool at_start,
                                 std::vector<std::string>* words) const {
  words->assign(1, std::string(text));
  for (const PreTokenizerStep& p : pre_tokenizers_) {
    std::vector<std::string> next;
    for (size_t w = 0; w < words->size(); ++w) {
      std::string piece = (*words)[w];
      if (p.kind == PreTokenizerStep::kMetaspace) {
        ReplaceAll(&piece, " ", p.replacement);
        const bool first = at_start && w == 0;
        if ((p.prepend == 2 || (p.prepend == 1 && first)) &&
            piece.compare(0, p.replacement.size(), p.replacement) != 0)
          piece = p.replacement + piece;
        if (!p.split) {
          next.push_back(piece);
          continue;
        }
        // Cut before each replacement (its pieces begin with it).
        size_t begin = 0;
        for (size_t hit = piece.find(p.replacement, 1); hit != std::string::npos;
             hit = piece.find(p.replacement, hit + 1)) {
          next.push_back(piece.substr(begin, hit - begin));
          begin = hit;
        }
        next.push_back(piece.substr(begin));
        continue;
      }
      if (p.kind == PreTokenizerStep::kByteLevel && p.add_prefix_space && !piece.empty() &&
          piece[0] != ' ')
        piece = " " + piece;
      std::vector<std::string> parts;
      if (p.regex) {
        SSMKIT_RETURN_IF_ERROR(p.regex->Split(piece, &parts));
      } else {
        parts.push_back(piece);
      }
      for (std::string& part : parts) {
        if (p.kind == PreTokenizerStep::kByteLevel) {
          std::string mapped;
          for (char c : part) mapped += TheByteMap().byte_to_utf8[static_cast<uint8_t>(c)];
          part = std::move(mapped);
        }
        next.push_back(std::move(part));
      }
    }
    *words = std::move(next);
  }
  return Status::Ok();
}

void TextPipeline::DecodeToken(const std::string& token, std::string* bytes, int* byte) const {
  *byte = -1;
  if (byte_fallback_ && token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>' &&
      std::isxdigit(static_cast<unsigned char>(token[3])) &&
      std::isxdigit(static_cast<unsigned char>(token[4]))) {
    const int v = static_cast<int>(std::strtol(token.substr(3, 2).c_str(), nullptr, 16));
    *byte = v;
    return;
  }
  std::string s = token;
  for (const Replace& r : decode_replaces_) ReplaceAll(&s, r.from, r.to);
  if (!decode_byte_level_) {
    bytes->append(s);
    return;
  }
  // Every character mapped back to its byte; a token with any character outside the map
  // (e.g. an added token with a real space) contributes its own UTF-8 bytes.
  std::string out;
  const ByteMap& map = TheByteMap();
  for (size_t i = 0; i < s.size();) {
    const auto it = map.char_to_byte.find(NextCodePoint(s, &i));
    if (it == map.char_to_byte.end()) {
      bytes->append(s);
      return;
    }
    out.push_back(static_cast<char>(it->second));
  }
  bytes->append(out);
}

}  // namespace ssmkit::model
