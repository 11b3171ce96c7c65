// The parser's class, shared by parser.cpp (statements) and parser_expr.cpp (expressions):
// recursive descent over the lexer's tokens, following jinja2's parser.py rule for rule.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/text/jinja/ast.h"
#include "runtime/text/jinja/lexer.h"
#include "runtime/text/jinja/parser.h"

namespace offgen::jinja::detail {

class Parser {
 public:
  Parser(std::vector<Token> toks, const ParseLimits& l) : t_(std::move(toks)), limits_(l) {}

  std::unique_ptr<Program> run() {
    auto p = std::make_unique<Program>();
    p->body = subparse({});
    if (cur().kind != Tok::kEof) fail("unexpected tag");
    return p;
  }

 private:
  // ---- token stream -----------------------------------------------------------------------
  const Token& cur() const { return t_[i_]; }
  const Token& look() const { return t_[i_ + 1 < t_.size() ? i_ + 1 : i_]; }
  const Token& next() {
    const Token& t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }
  bool is_op(std::string_view op) const { return cur().kind == Tok::kOp && cur().value == op; }
  bool is_name(std::string_view n) const { return cur().kind == Tok::kName && cur().value == n; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(const std::string& msg) const { fail_at(cur().line, msg); }
  [[noreturn]] static void fail_at(int line, const std::string& msg) {
    throw Error(ErrorCategory::kConfig, fmt::format("line {}: {}", line, msg));
  }
  std::string describe(const Token& t) const {
    switch (t.kind) {
      case Tok::kData:
        return "template data";
      case Tok::kVarBegin:
        return "begin of print statement";
      case Tok::kVarEnd:
        return "end of print statement";
      case Tok::kBlockBegin:
        return "begin of statement block";
      case Tok::kBlockEnd:
        return "end of statement block";
      case Tok::kEof:
        return "end of template";
      case Tok::kName:
      case Tok::kString:
      case Tok::kInt:
      case Tok::kFloat:
      case Tok::kOp:
        break;
    }
    return "'" + t.value + "'";
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail(fmt::format("expected '{}', got {}", op, describe(cur())));
  }
  std::string expect_name() {
    if (cur().kind != Tok::kName) fail(fmt::format("expected a name, got {}", describe(cur())));
    return next().value;
  }
  void expect_name(std::string_view n) {
    if (!skip_name(n)) fail(fmt::format("expected '{}', got {}", n, describe(cur())));
  }
  void expect_block_end() {
    if (cur().kind != Tok::kBlockEnd)
      fail(fmt::format("expected end of statement block, got {}", describe(cur())));
    next();
  }

  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser) : p(parser) {
      if (++p.depth_ > p.limits_.max_nesting)
        p.fail(fmt::format("the template nests deeper than {} levels", p.limits_.max_nesting));
    }
    ~Nest() { --p.depth_; }
  };

  ExprPtr make(ExprKind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // ---- statements ---------------------------------------------------------------------------
  bool at_end_tag(std::initializer_list<std::string_view> ends) const;
  Body subparse(std::initializer_list<std::string_view> ends);

  // Parses statements up to one of `ends` and leaves the stream at that tag's name.
  Body parse_statements(std::initializer_list<std::string_view> ends, bool drop);
  StmtPtr parse_statement();
  void parse_for(Stmt& s);
  void parse_if(Stmt& s);
  void parse_set(Stmt& s);
  void parse_signature(MacroDef& m);
  void parse_macro(Stmt& s);
  void parse_call_block(Stmt& s);

  // name | ns.attr | a, b, (c, d)
  Target parse_assign_target(bool with_tuple, bool with_namespace,
                             std::initializer_list<std::string_view> extra_ends);
  Target parse_target_primary();

  // ---- expressions --------------------------------------------------------------------------
  bool tuple_end(std::initializer_list<std::string_view> extra) const;

  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parens,
                      std::initializer_list<std::string_view> extra_ends);
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_condexpr();
  ExprPtr binary(ExprKind k, ExprPtr l, ExprPtr r, int line, std::string op = {});
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  Value number(const Token& t) const;
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr obj);
  ExprPtr parse_subscribed();
  std::vector<CallArg> parse_call_args();
  ExprPtr parse_call(ExprPtr callee);
  ExprPtr parse_filter_expr(ExprPtr e);
  std::string dotted_name();

  // `| name(args) | ...`; with `inline_first` the first filter has no leading "|".
  ExprPtr parse_filter(ExprPtr input, bool inline_first);
  ExprPtr parse_test(ExprPtr input);
  std::vector<Token> t_;
  size_t i_ = 0;
  ParseLimits limits_;
  int depth_ = 0;
  int loops_ = 0;
  std::vector<MacroDef*> macros_;
};

}  // namespace offgen::jinja::detail
