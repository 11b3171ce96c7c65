// Jinja lexer with jinja2's rules for chat templates: {{ }}, {% %}, {# #}, raw blocks, whitespace
// control ("-" and "+"), trim_blocks and lstrip_blocks, newlines normalised to "\n" and one
// trailing newline dropped (keep_trailing_newline=False).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace offgen::jinja {

enum class Tok : uint8_t {
  kData,        // template text (value: the text)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,  // value: the decoded literal
  kInt,     // value: digits without "_" (with a 0x/0o/0b prefix)
  kFloat,   // value: the literal without "_"
  kOp,      // value: the operator text
  kEof,
};

struct Token {
  Tok kind;
  std::string value;
  int line = 1;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Splits a template into tokens. Throws offgen::Error(kConfig) with the line for an unterminated
// tag, comment, string or raw block, a character no token starts with, unbalanced brackets, or
// source that is not UTF-8.
std::vector<Token> lex(std::string_view source, const LexOptions& opts = {});

}  // namespace offgen::jinja
