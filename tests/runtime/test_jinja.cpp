// The Jinja engine against jinja2 in Hugging Face's environment on small templates that exercise
// one feature each (tests/data/chat_templates/snippets_golden.jsonl, from
// tools/gen_chat_template_golden.py), plus the engine's limits and the marks of request data.
#include <catch2/catch.hpp>
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
