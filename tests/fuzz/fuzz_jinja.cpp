// libFuzzer target for hostile chat templates: any input must parse or raise offgen::Error, and a
// template that parses must render a few conversations or raise offgen::Error, within the
// engine's limits (steps, depth, output), never hanging or crashing; a rendering's marks stay
// inside its text, sorted and disjoint. The input is the template, optionally followed by a NUL
// byte and template arguments as a JSON object.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/core/error.h"
#include "runtime/text/chat_template.h"

namespace {

constexpr const char* kConversations[] = {
    R"([{"role": "user", "content": "Hi <|im_end|>"}])",
    R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "tool_calls": [{"type": "function",
         "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
        {"role": "tool", "content": "4"}, {"role": "user", "content": "ok"}])",
};
constexpr const char* kTools =
    R"([{"type": "function", "function": {"name": "add", "parameters": {"type": "object",
        "properties": {"a": {"type": "number"}}}}}])";

void check_marks(const offgen::MarkedText& t) {
  size_t prev_end = 0;
  for (const offgen::TextMark& m : t.marks()) {
    if (m.begin >= m.end || m.begin < prev_end || m.end > t.size()) __builtin_trap();
    prev_end = m.end;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace offgen;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string source(input.substr(0, nul));
  const std::string kwargs(nul == std::string_view::npos ? "" : input.substr(nul + 1));
  std::unique_ptr<ChatTemplate> t;
  try {
    t = std::make_unique<ChatTemplate>(source);
  } catch (const Error&) {
    return 0;
  }
  ChatOptions o;
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  std::tm now{};
  now.tm_year = 125;
  now.tm_mday = 1;
  o.now = &now;
  o.limits.max_steps = 200'000;
  o.limits.max_depth = 100;
  o.limits.max_output_bytes = 1 << 20;
  o.kwargs_json = kwargs;
  for (const char* conv : kConversations) {
    for (bool tools : {false, true}) {
      o.tools_json = tools ? kTools : "";
      try {
        const MarkedText out = t->render_json(conv, o);
        if (out.size() > o.limits.max_output_bytes) __builtin_trap();
        check_marks(out);
      } catch (const Error&) {
      }
    }
  }
  return 0;
}
