// A parsed Jinja template (jinja2 with trim_blocks and lstrip_blocks, as Hugging Face renders chat
// templates): parse once, render any number of times, from any number of threads.
#pragma once

#include <ctime>
#include <memory>
#include <string_view>

#include "runtime/text/jinja/interp.h"
#include "runtime/text/jinja/parser.h"
#include "runtime/text/jinja/value.h"

namespace offgen::jinja {

class Template {
 public:
  // Throws offgen::Error(kConfig) "line N: ..." when the source does not parse (parser.h).
  explicit Template(std::string_view source, const ParseLimits& limits = {});

  // Renders with `vars` as the template's variables and `now` as strftime_now's clock. Throws
  // offgen::Error(kInput) "line N: ..." when the template fails on these variables (a
  // RaisedError for raise_exception) or exceeds `limits`. Thread-safe.
  MarkedText render(const Dict& vars, const std::tm& now, const RenderLimits& limits = {}) const;

 private:
  std::unique_ptr<Program> program_;
};

}  // namespace offgen::jinja
