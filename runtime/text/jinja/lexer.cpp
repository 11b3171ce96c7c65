// Jinja lexer: one pass over the source; tags are found with find(), so lexing is linear.
#include "runtime/text/jinja/lexer.h"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/core/error.h"
#include "runtime/text/utf8.h"

namespace offgen::jinja {
namespace {

[[noreturn]] void syntax_error(int line, const std::string& msg) {
  throw Error(ErrorCategory::kConfig, fmt::format("line {}: {}", line, msg));
}

// "\r\n" and "\r" to "\n"; one trailing newline dropped.
std::string normalize(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out.push_back(src[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Length of the Python whitespace character at s[i], 0 when it is not one.
size_t space_at(std::string_view s, size_t i) {
  const utf8::Decoded d = utf8::decode(s, i);
  return d.valid && utf8::is_python_space(d.cp) ? d.len : 0;
}

size_t skip_spaces(std::string_view s, size_t i) {
  while (i < s.size()) {
    const size_t n = space_at(s, i);
    if (!n) break;
    i += n;
  }
  return i;
}

// Python str.rstrip(): the length without trailing whitespace.
size_t rstrip_len(std::string_view s) {
  size_t e = s.size();
  while (e > 0) {
    size_t b = e - 1;
    while (b > 0 && (static_cast<uint8_t>(s[b]) & 0xC0) == 0x80 && e - b < 4) --b;
    const utf8::Decoded d = utf8::decode(s, b);
    if (!d.valid || b + d.len != e || !utf8::is_python_space(d.cp)) break;
    e = b;
  }
  return e;
}

int count_lines(std::string_view s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's unicode-escape decoding of a string literal's body.
std::string unescape(std::string_view s, int line) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out.push_back(s[i]);
      continue;
    }
    const char c = s[++i];
    auto hex = [&](int n) {
      uint32_t v = 0;
      for (int k = 0; k < n; ++k) {
        const int h = i + 1 + k < s.size() ? hex_value(s[i + 1 + k]) : -1;
        if (h < 0) syntax_error(line, fmt::format("truncated \\{} escape in a string", c));
        v = v * 16 + h;
      }
      i += n;
      if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        syntax_error(line, fmt::format("escape \\{} gives no character (U+{:X})", c, v));
      utf8::append(out, v);
    };
    switch (c) {
      case '\n':
        break;
      case '\\':
      case '\'':
      case '"':
        out.push_back(c);
        break;
      case 'a':
        out.push_back('\a');
        break;
      case 'b':
        out.push_back('\b');
        break;
      case 'f':
        out.push_back('\f');
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'v':
        out.push_back('\v');
        break;
      case 'x':
        hex(2);
        break;
      case 'u':
        hex(4);
        break;
      case 'U':
        hex(8);
        break;
      default:
        if (c >= '0' && c <= '7') {
          uint32_t v = c - '0';
          for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k)
            v = v * 8 + (s[++i] - '0');
          utf8::append(out, v);
        } else {
          out.push_back('\\');
          out.push_back(c);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string src, const LexOptions& o) : s_(std::move(src)), o_(o) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < s_.size()) {
      const size_t tag = next_tag(pos_);
      std::string_view text(s_.data() + pos_, (tag == npos ? s_.size() : tag) - pos_);
      if (tag == npos) {
        emit_data(text);
        pos_ = s_.size();
        break;
      }
      const char kind = s_[tag + 1];  // '{', '%' or '#'
      const char sign =
          tag + 2 < s_.size() && (s_[tag + 2] == '-' || s_[tag + 2] == '+') ? s_[tag + 2] : 0;
      text = strip_before(text, sign, kind != '{', line_starting);
      emit_data(text);
      line_ += count_lines(std::string_view(s_.data() + pos_, tag - pos_));
      pos_ = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        line_starting = comment();
      } else if (kind == '%' && raw_begin()) {
        line_starting = raw();
      } else {
        line_starting = tag_body(kind == '{');
      }
    }
    out_.push_back({Tok::kEof, "", line_});
    return std::move(out_);
  }

 private:
  static constexpr size_t npos = std::string::npos;

  size_t next_tag(size_t from) const {
    for (size_t i = s_.find('{', from); i != npos; i = s_.find('{', i + 1))
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    return npos;
  }

  // The text before a tag after "-" (strip all trailing whitespace) or lstrip_blocks.
  std::string_view strip_before(std::string_view text, char sign, bool block_or_comment,
                                bool line_starting) const {
    if (sign == '-') return text.substr(0, rstrip_len(text));
    if (sign == '+' || !o_.lstrip_blocks || !block_or_comment) return text;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting) return text;
    if (l_pos < text.size() && skip_spaces(text, l_pos) == text.size())
      return text.substr(0, l_pos);
    return text;
  }

  void emit_data(std::string_view text) {
    if (!text.empty()) out_.push_back({Tok::kData, std::string(text), line_});
  }

  // After "%}" / "#}" (at pos_ just past it, `minus` when "-" preceded it): the whitespace
  // control of the tag's end. Returns whether the consumed text ended with a newline.
  bool after_block_end(bool minus, bool plus) {
    const size_t start = pos_;
    if (minus) {
      pos_ = skip_spaces(s_, pos_);
    } else if (!plus && o_.trim_blocks && pos_ < s_.size() && s_[pos_] == '\n') {
      ++pos_;
    }
    line_ += count_lines(std::string_view(s_.data() + start, pos_ - start));
    return pos_ > start ? s_[pos_ - 1] == '\n' : false;
  }

  bool comment() {
    const size_t end = s_.find("#}", pos_);
    if (end == npos) syntax_error(line_, "missing end of comment tag");
    const bool minus = end > pos_ && s_[end - 1] == '-';
    const bool plus = end > pos_ && s_[end - 1] == '+';
    line_ += count_lines(std::string_view(s_.data() + pos_, end - pos_));
    pos_ = end + 2;
    return after_block_end(minus, plus);
  }

  // At pos_ just past "{%" (and its sign): whether the tag is "raw"; if so pos_ moves past it.
  bool raw_begin() {
    size_t i = skip_spaces(s_, pos_);
    if (s_.compare(i, 3, "raw") != 0 || (i + 3 < s_.size() && is_name_char(s_[i + 3])))
      return false;
    i = skip_spaces(s_, i + 3);
    const bool minus = s_.compare(i, 3, "-%}") == 0;
    if (!minus && s_.compare(i, 2, "%}") != 0) return false;
    line_ += count_lines(std::string_view(s_.data() + pos_, i - pos_));
    pos_ = i + (minus ? 3 : 2);
    if (minus) after_block_end(true, false);
    return true;
  }

  bool raw() {
    for (size_t at = s_.find("{%", pos_); at != npos; at = s_.find("{%", at + 1)) {
      size_t i = at + 2;
      const char sign = i < s_.size() && (s_[i] == '-' || s_[i] == '+') ? s_[i] : 0;
      if (sign) ++i;
      i = skip_spaces(s_, i);
      if (s_.compare(i, 6, "endraw") != 0) continue;
      i = skip_spaces(s_, i + 6);
      const bool minus = s_.compare(i, 3, "-%}") == 0, plus = s_.compare(i, 3, "+%}") == 0;
      if (!minus && !plus && s_.compare(i, 2, "%}") != 0) continue;
      std::string_view text(s_.data() + pos_, at - pos_);
      text = strip_before(text, sign, true, false);
      emit_data(text);
      line_ += count_lines(std::string_view(s_.data() + pos_, i - pos_));
      pos_ = i + (minus || plus ? 3 : 2);
      return after_block_end(minus, plus);
    }
    syntax_error(line_, "missing end of raw directive");
  }

  // Tokens of a {{ }} or {% %} tag; pos_ is just past the opener.
  bool tag_body(bool variable) {
    out_.push_back({variable ? Tok::kVarBegin : Tok::kBlockBegin, "", line_});
    std::string brackets;
    while (true) {
      // Whitespace.
      const size_t ws = skip_spaces(s_, pos_);
      line_ += count_lines(std::string_view(s_.data() + pos_, ws - pos_));
      pos_ = ws;
      if (pos_ >= s_.size())
        syntax_error(line_, variable ? "unexpected end of template, expected '}}'"
                                     : "unexpected end of template, expected '%}'");
      if (brackets.empty()) {
        if (variable) {
          const bool minus = s_.compare(pos_, 3, "-}}") == 0;
          if (minus || s_.compare(pos_, 2, "}}") == 0) {
            pos_ += minus ? 3 : 2;
            out_.push_back({Tok::kVarEnd, "", line_});
            if (minus) return after_block_end(true, false);
            return false;
          }
        } else {
          const bool minus = s_.compare(pos_, 3, "-%}") == 0,
                     plus = s_.compare(pos_, 3, "+%}") == 0;
          if (minus || plus || s_.compare(pos_, 2, "%}") == 0) {
            pos_ += minus || plus ? 3 : 2;
            out_.push_back({Tok::kBlockEnd, "", line_});
            return after_block_end(minus, plus);
          }
        }
      }
      expression_token(brackets);
    }
  }

  void expression_token(std::string& brackets) {
    const char c = s_[pos_];
    if (is_digit(c)) {
      number();
      return;
    }
    if (is_name_start(c)) {
      const size_t b = pos_;
      while (pos_ < s_.size() && is_name_char(s_[pos_])) ++pos_;
      out_.push_back({Tok::kName, s_.substr(b, pos_ - b), line_});
      return;
    }
    if (c == '\'' || c == '"') {
      string_literal(c);
      return;
    }
    static constexpr std::string_view kOps2[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kOps2) {
      if (s_.compare(pos_, 2, op) == 0) {
        out_.push_back({Tok::kOp, std::string(op), line_});
        pos_ += 2;
        return;
      }
    }
    static constexpr std::string_view kOps1 = "+-/*%~[](){}|.:,;=<>";
    if (kOps1.find(c) == std::string_view::npos)
      syntax_error(line_, fmt::format("unexpected char '{}'", c));
    if (c == '(' || c == '[' || c == '{') {
      brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty()) syntax_error(line_, fmt::format("unexpected '{}'", c));
      if (brackets.back() != c)
        syntax_error(line_, fmt::format("unexpected '{}', expected '{}'", c, brackets.back()));
      brackets.pop_back();
    }
    out_.push_back({Tok::kOp, std::string(1, c), line_});
    ++pos_;
  }

  // Digits with single "_" separators; returns the digits without them.
  std::string digits(bool (*ok)(char)) {
    std::string d;
    while (pos_ < s_.size()) {
      if (ok(s_[pos_])) {
        d.push_back(s_[pos_++]);
      } else if (s_[pos_] == '_' && !d.empty() && pos_ + 1 < s_.size() && ok(s_[pos_ + 1])) {
        ++pos_;
      } else {
        break;
      }
    }
    return d;
  }

  void number() {
    const bool after_dot =
        !out_.empty() && out_.back().kind == Tok::kOp && out_.back().value == ".";
    if (s_[pos_] == '0' && pos_ + 1 < s_.size()) {
      const char p = static_cast<char>(s_[pos_ + 1] | 0x20);
      bool (*ok)(char) = nullptr;
      if (p == 'x') ok = [](char ch) { return hex_value(ch) >= 0; };
      if (p == 'o') ok = [](char ch) { return ch >= '0' && ch <= '7'; };
      if (p == 'b') ok = [](char ch) { return ch == '0' || ch == '1'; };
      if (ok) {
        pos_ += 2;
        if (pos_ < s_.size() && s_[pos_] == '_') ++pos_;
        const std::string d = digits(ok);
        if (d.empty()) syntax_error(line_, "invalid integer literal");
        out_.push_back({Tok::kInt, std::string("0") + p + d, line_});
        return;
      }
    }
    std::string lit = digits(is_digit);
    bool is_float = false;
    if (!after_dot && pos_ + 1 < s_.size() && s_[pos_] == '.' && is_digit(s_[pos_ + 1])) {
      ++pos_;
      lit += '.';
      lit += digits(is_digit);
      is_float = true;
    }
    if (!after_dot && pos_ < s_.size() && (s_[pos_] | 0x20) == 'e') {
      size_t j = pos_ + 1;
      if (j < s_.size() && (s_[j] == '+' || s_[j] == '-')) ++j;
      if (j < s_.size() && is_digit(s_[j])) {
        const size_t save = pos_;
        std::string e = s_.substr(pos_, j - pos_);
        pos_ = j;
        const std::string d = digits(is_digit);
        if (d.empty()) {
          pos_ = save;
        } else {
          lit += e + d;
          is_float = true;
        }
      }
    }
    out_.push_back({is_float ? Tok::kFloat : Tok::kInt, lit, line_});
  }

  void string_literal(char quote) {
    const size_t b = pos_ + 1;
    size_t i = b;
    while (i < s_.size() && s_[i] != quote) i += s_[i] == '\\' ? 2 : 1;
    if (i >= s_.size()) syntax_error(line_, "unexpected end of string");
    const std::string_view body(s_.data() + b, i - b);
    out_.push_back({Tok::kString, unescape(body, line_), line_});
    line_ += count_lines(body);
    pos_ = i + 1;
  }

  std::string s_;
  LexOptions o_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> out_;
};

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const utf8::Decoded d = utf8::decode(s, i);
    if (!d.valid) return false;
    i += d.len;
  }
  return true;
}

}  // namespace

std::vector<Token> lex(std::string_view source, const LexOptions& opts) {
  if (!valid_utf8(source)) {
    size_t i = 0;
    while (i < source.size() && utf8::decode(source, i).valid) i += utf8::decode(source, i).len;
    throw Error(ErrorCategory::kConfig,
                fmt::format("the template is not UTF-8 (invalid byte at offset {})", i));
  }
  return Lexer(normalize(source), opts).run();
}

}  // namespace offgen::jinja
