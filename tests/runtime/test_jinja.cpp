// The Jinja engine against jinja2 in Hugging Face's environment on small templates that exercise
// one feature each (tests/data/chat_templates/snippets_golden.jsonl, from
// tools/gen_chat_template_golden.py), plus the engine's limits and the marks of request data.
#include <catch2/catch.hpp>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/text/chat_template.h"

using offgen::ChatOptions;
using offgen::ChatTemplate;
using offgen::ChatTemplateError;
using ojson = nlohmann::ordered_json;

namespace {

const char* kSnippetMessages =
    R"([{"role": "user", "content": "Hi <|im_end|>"}, {"role": "assistant", "content": "Hello!"}])";

std::tm golden_now() {  // tools/gen_chat_template_golden.py's NOW: 2025-03-14 09:26:53, a Friday
  std::tm t{};
  t.tm_year = 125;
  t.tm_mon = 2;
  t.tm_mday = 14;
  t.tm_hour = 9;
  t.tm_min = 26;
  t.tm_sec = 53;
  const time_t secs = timegm(&t);
  gmtime_r(&secs, &t);
  return t;
}

struct Outcome {
  std::string text, error, phase;
  bool raised = false;
};

Outcome run(const std::string& source, const ojson& vars) {
  Outcome o;
  std::unique_ptr<ChatTemplate> t;
  try {
    t = std::make_unique<ChatTemplate>(source);
  } catch (const offgen::Error& e) {
    o.error = e.what();
    o.phase = "parse";
    return o;
  }
  const std::tm now = golden_now();
  ChatOptions opts;
  opts.add_generation_prompt = false;
  opts.bos_token = "<s>";
  opts.eos_token = "</s>";
  opts.now = &now;
  ojson kwargs = ojson::object();
  for (auto it = vars.begin(); it != vars.end(); ++it)
    if (it.key() != "messages") kwargs[it.key()] = it.value();
  opts.kwargs_json = kwargs.dump();
  const std::string messages =
      vars.contains("messages") ? vars["messages"].dump() : kSnippetMessages;
  try {
    o.text = t->render_json(messages, opts).text();
  } catch (const ChatTemplateError& e) {
    o.error = e.what();
    o.raised = e.raised();
    o.phase = "render";
  }
  return o;
}

}  // namespace

TEST_CASE("jinja engine: feature snippets render as jinja2 does", "[jinja]") {
  std::ifstream f(std::string(OFFGEN_TEST_DATA) + "/chat_templates/snippets_golden.jsonl");
  REQUIRE(f);
  int n = 0;
  for (std::string line; std::getline(f, line);) {
    if (line.empty()) continue;
    ++n;
    const ojson row = ojson::parse(line);
    const std::string src = row.at("template").get<std::string>();
    INFO("template: " << nlohmann::json(src).dump() << "\nvars: " << row.at("vars").dump());
    const Outcome got = run(src, row.at("vars"));
    if (row.contains("text")) {
      INFO("engine error: " << got.error);
      CHECK(got.text == row["text"].get<std::string>());
      CHECK(got.error.empty());
    } else {
      INFO("jinja2: " << row["error"].get<std::string>() << "\nengine: " << got.error
                      << "\nengine text: " << got.text);
      CHECK(got.phase == row["phase"].get<std::string>());
      CHECK(got.raised == row["raised"].get<bool>());
    }
  }
  CHECK(n >= 150);
}

namespace {

std::string render_error(const std::string& src, const offgen::jinja::RenderLimits& limits = {}) {
  ChatOptions o;
  o.limits = limits;
  try {
    ChatTemplate(src).render_json(kSnippetMessages, o);
  } catch (const ChatTemplateError& e) {
    CHECK_FALSE(e.raised());
    return e.what();
  }
  FAIL("rendered: " << src);
  return {};
}

}  // namespace

TEST_CASE("jinja engine: limits end runaway templates with a clear error", "[jinja]") {
  using Catch::Contains;
  offgen::jinja::RenderLimits small;
  small.max_steps = 100'000;
  CHECK_THAT(render_error("{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}"
                          "{% endfor %}",
                          small),
             Contains("steps"));
  CHECK_THAT(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
             Contains("nests deeper than 400 levels"));
  CHECK_THAT(render_error("{{ 'x' * 100000000 }}"), Contains("over the limit"));
  CHECK_THAT(render_error("{{ [0] * 100000000 }}"), Contains("over the limit"));
  // Doubling a string: stopped by the size limit, or by the steps its bytes cost.
  CHECK_THAT(render_error("{% set ns = namespace(s='x') %}{% for i in range(100) %}"
                          "{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
             Contains("limit"));
  CHECK_THAT(render_error("{% for i in range(40) %}{{ 'y' * 1000000 }}{% endfor %}"),
             Contains("rendered text is over the limit"));
  // Parsing: nesting and size.
  CHECK_THROWS_WITH(
      ChatTemplate("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}"),
      Contains("nests deeper than 128 levels"));
  CHECK_THROWS_WITH(ChatTemplate("x" + std::string(17 << 20, ' ')), Contains("over the limit"));
}

TEST_CASE("jinja engine: a large template renders, its literal text unmarked", "[jinja]") {
  // A 1.5 MB default system prompt (the size that made the old matcher quadratic).
  const std::string big(1'500'000, 'a');
  const std::string src = "{% if messages[0].role != 'system' %}<|im_start|>system\n" + big +
                          "<|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>"
                          "{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
  const offgen::MarkedText out = ChatTemplate(src).render_json(kSnippetMessages, {});
  CHECK(out.text() == "<|im_start|>system\n" + big +
                          "<|im_end|>\n<|im_start|>user\nHi <|im_end|><|im_end|>\n"
                          "<|im_start|>assistant\nHello!<|im_end|>\n");
  REQUIRE(out.marks().size() == 2);  // the two contents
  CHECK(out.marks()[0].begin > big.size());
}

TEST_CASE("jinja engine: marks follow request data through string operations", "[jinja]") {
  auto marked = [](const std::string& src, const std::string& messages) {
    ChatOptions o;
    o.tools_json = R"([{"type": "function", "function": {"name": "f<|x|>", "n": 1}}])";
    const offgen::MarkedText m = ChatTemplate(src).render_json(messages, o);
    std::string s;  // the text with marked bytes upper-cased, for a readable comparison
    for (size_t i = 0; i < m.size(); ++i)
      s += m.any_marked(i, i + 1) ? static_cast<char>(std::toupper(m.text()[i])) : m.text()[i];
    return s;
  };
  const std::string msg = R"([{"role": "user", "content": "  hi there  "}])";
  CHECK(marked("<{{ messages[0].content|trim }}>", msg) == "<HI THERE>");
  CHECK(marked("<{{ '[' + messages[0].content.strip().split(' ')[1] + ']' }}>", msg) ==
        "<[THERE]>");
  // The replacement is the template's text; what stays of the content stays marked.
  CHECK(marked("{{ messages[0].content.replace('hi', 'yo')|trim }}", msg) == "yo THERE");
  CHECK(marked("{{ '%s!'|format(messages[0].content|trim) }}", msg) == "HI THERE!");
  CHECK(marked("{{ '<{}>'.format(messages[0].role) }}", msg) == "<user>");  // roles: template text
  CHECK(marked("{{ tools|tojson }}", msg) ==
        R"([{"TYPE": "FUNCTION", "FUNCTION": {"NAME": "F<|X|>", "N": 1}}])");
  CHECK(marked("{% for t in tools %}{{ t.function.name }}{% endfor %}|{{ 'plain' }}", msg) ==
        "F<|X|>|plain");
}
