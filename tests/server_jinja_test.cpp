// The chat-template interpreter (src/server/jinja) on templates whose jinja2 3.1 renderings (in
// transformers' environment: trim_blocks, lstrip_blocks, loop controls) are written below,
// then its failures: syntax errors name the line, undefined values, raise_exception, and the
// bounds that keep a hostile template from exhausting the stack, memory or time.
// tests/server/test_chat_templates.py compares whole templates with jinja2 on random inputs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "server/chat_template.hpp"
#include "server/jinja/template.hpp"

namespace ssmkit::server::jinja {
namespace {

Status Render(const std::string& source, const nlohmann::ordered_json& context, std::string* out) {
  Template t;
  SSMKIT_RETURN_IF_ERROR(Template::Parse(source, &t));
  return t.Render(Value::FromJson(context), out);
}

std::string RenderOk(const std::string& source, const nlohmann::ordered_json& context = {}) {
  std::string out;
  const Status s =
      Render(source, context.is_null() ? nlohmann::ordered_json::object() : context, &out);
  EXPECT_TRUE(s.ok()) << source << ": " << s.message();
  return out;
}

std::string RenderError(const std::string& source,
                        const nlohmann::ordered_json& context = nlohmann::ordered_json::object()) {
  std::string out = "unchanged";
  const Status s = Render(source, context, &out);
  EXPECT_FALSE(s.ok()) << source << " rendered " << out;
  return s.message();
}

struct Golden {
  const char* source;
  const char* context;  // JSON
  const char* jinja2;   // what jinja2 3.1.6 renders
};

// Outputs recorded from jinja2 3.1.6 configured as transformers configures it.
const Golden kGolden[] = {
    {"{% for m in messages %}\n  {{ m.role }}\n{% endfor %}",
     R"({"messages": [{"role": "a"}, {"role": "b"}]})", "  a\n  b\n"},
    {"  {%- if true %} x {% endif -%}  \n y", "{}", " x y"},
    {"{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", "{}",
     "231"},
    {"{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% endfor %}"
     "{{ ns.x }}",
     "{}", "4"},
    {"{% for i in [1, 2] %}{% continue %}{% else %}else{% endfor %}", "{}", "else"},
    {"{% for i in [] %}x{% else %}empty{% endfor %}", "{}", "empty"},
    {"{{ [1, 2, 3][1:] }}{{ 'hello'[::-1] }}{{ (1, 2) }}{{ (1,) }}", "{}", "[2, 3]olleh(1, 2)(1,)"},
    {"{{ 7 // -2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1 / 4 }} {{ 0.1 + 0.2 }} {{ 1e100 }}", "{}",
     "-4 2 1024 0.25 0.30000000000000004 1e+100"},
    {"{{ 'a' ~ none ~ true }} {{ none }} {{ undefined_thing }}|", "{}", "aNoneTrue None |"},
    {"{{ x | default('d') }} {{ '' | default('e', true) }} {{ [3,1,2] | sort | join(',') }}", "{}",
     "d e 1,2,3"},
    {"{{ {'b': 1, 'a': 'é\"'} | tojson }} {{ [1, [2, {}]] | tojson(indent=1) }}", "{}",
     "{\"b\": 1, \"a\": \"é\\\"\"} [\n 1,\n [\n  2,\n  {}\n ]\n]"},
    {"{{ '  Ünïcode TITLE  ' | trim | lower }} {{ 'straße' | upper }} {{ 'hello wORLD' | title }}",
     "{}", "ünïcode title STRASSE Hello World"},
    {"{%- macro greet(name, punct='!') -%}Hi {{ name }}{{ punct }}{%- endmacro -%}"
     "{{ greet('A') }} {{ greet('B', '?') }}",
     "{}", "Hi A! Hi B?"},
    {"{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(' ') "
     "}}",
     R"({"messages": [{"role": "user", "content": "a"}, {"role": "bot", "content": "b"},
                      {"role": "user", "content": "c"}]})",
     "a c"},
    {"{% for k, v in {'x': 1, 'y': 2}.items() %}{{ k }}={{ v }};{% endfor %}{{ loop }}", "{}",
     "x=1;y=2;"},
    {"{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'x'.startswith(('y', 'x')) }}", "{}",
     "['a', 'b', '', 'c'] ['a', 'b'] True"},
    {"{# comment #}\n  {# another -#}\n  text", "{}", "text"},
    {"{% if a is defined and a.b is none %}yes{% elif a %}elif{% else %}no{% endif %}",
     R"({"a": {"b": null}})", "yes"},
    {"line1\n  {% if true %}\n  inner\n  {% endif %}\nline2\n", "{}", "line1\n  inner\nline2"},
};

TEST(Jinja, RendersAsJinja2) {
  for (const Golden& g : kGolden) {
    EXPECT_EQ(RenderOk(g.source, nlohmann::ordered_json::parse(g.context)), g.jinja2) << g.source;
  }
}

TEST(Jinja, SyntaxErrorsNameTheLine) {
  const char* cases[][2] = {
      {"a\n{% if x %}\nb", "line 3"},             // no endif
      {"{{ 1 +", "line 1"},                       // no end of tag
      {"a\nb\n{% for %}{% endfor %}", "line 3"},  // no target
      {"{% include 'x' %}", "unsupported tag"},   // not in the subset
      {"{{ (1, 2 }}", "line 1"},                  // unbalanced
      {"{% set x = %}", "line 1"},                // no value
      {"{{ 'unterminated }}", "closing quote"},   // string
      {"{# never closed", "comment"},             // comment
      {"{{ a | }}", "filter name"},               // filter
  };
  for (const auto& c : cases) {
    Template t;
    const Status s = Template::Parse(c[0], &t);
    ASSERT_FALSE(s.ok()) << c[0];
    EXPECT_NE(s.message().find(c[1]), std::string::npos) << c[0] << ": " << s.message();
  }
}

TEST(Jinja, EvaluationErrors) {
  // jinja2: an attribute of an undefined value is an error, the undefined value itself is not.
  EXPECT_NE(RenderError("{{ missing.attr }}").find("'missing' is undefined"), std::string::npos);
  EXPECT_NE(RenderError("{{ messages[5].role }}", {{"messages", nlohmann::ordered_json::array()}})
                .find("is undefined"),
            std::string::npos);
  EXPECT_NE(RenderError("{{ 1 + 'a' }}").find("unsupported operand"), std::string::npos);
  EXPECT_NE(RenderError("{{ 1 // 0 }}").find("division"), std::string::npos);
  EXPECT_NE(RenderError("{{ 5 | nosuchfilter }}").find("nosuchfilter"), std::string::npos);
  EXPECT_NE(RenderError("{{ 5 is nosuchtest }}").find("nosuchtest"), std::string::npos);
  EXPECT_NE(RenderError("{% for x in 5 %}{% endfor %}").find("not iterable"), std::string::npos);
  EXPECT_NE(RenderError("{% set x = 1 %}{% set x.y = 2 %}").find("not a namespace"),
            std::string::npos);
  // Mutating methods are absent, as in transformers' immutable sandbox.
  EXPECT_FALSE(RenderError("{% set l = [] %}{{ l.append(1) }}").empty());
}

TEST(Jinja, RaiseExceptionReachesTheCaller) {
  std::unique_ptr<ChatTemplate> t;
  ASSERT_TRUE(
      ChatTemplate::FromSource("{% if messages[0].role != 'user' %}{{ raise_exception('Roles must "
                               "alternate') }}{% endif %}{{ bos_token }}{{ messages[0].content }}",
                               {{"bos_token", "<s>"}}, &t)
          .ok());
  std::string text;
  const Status bad =
      t->Render(nlohmann::ordered_json::parse(R"([{"role": "bot", "content": "x"}])"), true, &text);
  EXPECT_EQ(bad.message(), "Roles must alternate");
  ASSERT_TRUE(t->Render(nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])"),
                        true, &text)
                  .ok());
  EXPECT_EQ(text, "<s>hi");
}

// A template from outside must not crash or hang the server: nesting, recursion, output and
// iteration are bounded and each bound is an error.
TEST(Jinja, BoundsAreErrorsNotCrashes) {
  const std::string deep_expr = std::string(100000, '(') + "1" + std::string(100000, ')');
  Template t;
  EXPECT_FALSE(Template::Parse("{{ " + deep_expr + " }}", &t).ok());
  std::string deep_blocks;
  for (int i = 0; i < 5000; ++i) deep_blocks += "{% if true %}";
  EXPECT_FALSE(Template::Parse(deep_blocks, &t).ok());
  std::string nots = "{{ ";
  for (int i = 0; i < 100000; ++i) nots += "not ";
  EXPECT_FALSE(Template::Parse(nots + "1 }}", &t).ok());
  EXPECT_NE(RenderError("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("nested"),
            std::string::npos);
  EXPECT_NE(RenderError("{{ range(1000000000) | length }}").find("range"), std::string::npos);
  EXPECT_NE(RenderError("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{{ s }}"
                        "{% endfor %}")
                .find("output"),
            std::string::npos);
  EXPECT_NE(RenderError("{% for i in range(2000) %}{% for j in range(1000) %}{% endfor %}"
                        "{% endfor %}")
                .find("iterations"),
            std::string::npos);
  EXPECT_NE(RenderError("{{ 'x' * 9223372036854775807 }}").find("too long"), std::string::npos);
  EXPECT_NE(RenderError("{{ 9223372036854775807 + 1 }}").find("overflow"), std::string::npos);
  EXPECT_EQ(RenderOk("{{ [1, 2, 3][::9223372036854775807] }}"), "[1]");
}

TEST(Jinja, ChatTemplateLoadsTokenizerConfig) {
  const std::string dir = ::testing::TempDir() + "/chat_template_model";
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir + "/tokenizer_config.json");
    f << R"({"bos_token": {"content": "<|s|>", "lstrip": false}, "eos_token": "</s>",
             "chat_template": [{"name": "tool_use", "template": "tools"},
                               {"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}{{ eos_token }}{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"}]})";
  }
  std::unique_ptr<ChatTemplate> t;
  ASSERT_TRUE(ChatTemplate::Load(dir, "", &t).ok());
  ASSERT_NE(t, nullptr);
  std::string text;
  ASSERT_TRUE(t->Render(nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])"),
                        true, &text)
                  .ok());
  EXPECT_EQ(text, "<|s|>user:hi</s>assistant:");
  // No chat_template: no template, and no error.
  std::ofstream(dir + "/tokenizer_config.json") << R"({"eos_token": "</s>"})";
  ASSERT_TRUE(ChatTemplate::Load(dir, "", &t).ok());
  EXPECT_EQ(t, nullptr);
  // A template that does not parse names its file.
  std::ofstream(dir + "/tokenizer_config.json") << R"({"chat_template": "{% if %}"})";
  const Status s = ChatTemplate::Load(dir, "", &t);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tokenizer_config.json"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace ssmkit::server::jinja
