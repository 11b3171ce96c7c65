// Jinja parser: tokens to a Program with jinja2's grammar and operator precedence (filters and
// tests bind tightest, then **, * / // %, ~, + -, comparisons, not, and, or, the inline if).
#pragma once

#include <memory>
#include <string_view>

#include "runtime/text/jinja/ast.h"

namespace offgen::jinja {

struct ParseLimits {
  size_t max_source_bytes = size_t{16} << 20;
  int max_nesting = 128;  // brackets, parentheses, nested expressions and blocks
};

// Parses a template (trim_blocks and lstrip_blocks on, as Hugging Face's environment). Throws
// offgen::Error(kConfig) "line N: ..." for a syntax error, an unknown tag, a filter or test that
// does not exist (outside an if, where jinja2 defers the error to rendering), or nesting or size
// beyond `limits`.
std::unique_ptr<Program> parse(std::string_view source, const ParseLimits& limits = {});

}  // namespace offgen::jinja
