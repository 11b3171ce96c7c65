// Recursive-descent parser, statements: the template body, tags, assignment targets; and the
// check of filter and test names jinja2 makes when it compiles a template.
#include "runtime/text/jinja/parser_impl.h"

namespace offgen::jinja {
namespace detail {

bool Parser::at_end_tag(std::initializer_list<std::string_view> ends) const {
  if (cur().kind != Tok::kBlockBegin) return false;
  const Token& n = look();
  if (n.kind != Tok::kName) return false;
  for (std::string_view e : ends)
    if (n.value == e) return true;
  return false;
}

Body Parser::subparse(std::initializer_list<std::string_view> ends) {
  Body body;
  while (cur().kind != Tok::kEof) {
    const Token& t = cur();
    if (t.kind == Tok::kData) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kData;
      s->line = t.line;
      s->text = t.value;
      next();
      body.push_back(std::move(s));
    } else if (t.kind == Tok::kVarBegin) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kPrint;
      s->line = t.line;
      next();
      s->expr = parse_tuple(true, false, {});
      if (cur().kind != Tok::kVarEnd)
        fail(fmt::format("expected end of print statement, got {}", describe(cur())));
      next();
      body.push_back(std::move(s));
    } else if (t.kind == Tok::kBlockBegin) {
      if (at_end_tag(ends)) return body;
      next();
      if (cur().kind != Tok::kName) fail("tag name expected");
      body.push_back(parse_statement());
    } else {
      fail(fmt::format("unexpected {}", describe(t)));
    }
  }
  if (ends.size() > 0)
    fail(fmt::format("unexpected end of template, expected '{}'", *ends.begin()));
  return body;
}

Body Parser::parse_statements(std::initializer_list<std::string_view> ends, bool drop) {
  skip_op(":");
  expect_block_end();
  Body body = subparse(ends);
  if (cur().kind == Tok::kEof)
    fail(fmt::format("unexpected end of template, expected '{}'", *ends.begin()));
  next();  // block begin
  if (drop) {
    next();  // the end tag's name
  }
  return body;
}

StmtPtr Parser::parse_statement() {
  Nest nest(*this);
  const std::string tag = cur().value;
  const int line = cur().line;
  auto s = std::make_unique<Stmt>();
  s->line = line;
  if (tag == "for") {
    parse_for(*s);
  } else if (tag == "if") {
    parse_if(*s);
  } else if (tag == "set") {
    parse_set(*s);
  } else if (tag == "macro") {
    parse_macro(*s);
  } else if (tag == "call") {
    parse_call_block(*s);
  } else if (tag == "filter") {
    next();
    s->kind = StmtKind::kFilterBlock;
    s->filter = parse_filter(nullptr, true);
    s->body = parse_statements({"endfilter"}, true);
  } else if (tag == "with") {
    next();
    s->kind = StmtKind::kWith;
    while (cur().kind != Tok::kBlockEnd) {
      if (!s->assigns.empty()) expect_op(",");
      Target target = parse_assign_target(true, false, {});
      expect_op("=");
      s->assigns.emplace_back(std::move(target), parse_expression(true));
    }
    s->body = parse_statements({"endwith"}, true);
  } else if (tag == "break" || tag == "continue") {
    next();
    if (loops_ == 0) fail(fmt::format("'{}' outside of a loop", tag));
    s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
  } else if (tag == "generation") {
    next();
    s->kind = StmtKind::kScope;
    s->body = parse_statements({"endgeneration"}, true);
  } else {
    fail(
        fmt::format("encountered unknown tag '{}' (chat templates may use: for, if, set, "
                    "macro, call, filter, with, break, continue, generation, raw)",
                    tag));
  }
  expect_block_end();
  return s;
}

void Parser::parse_for(Stmt& s) {
  next();
  s.kind = StmtKind::kFor;
  s.target = parse_assign_target(true, false, {"in"});
  expect_name("in");
  s.expr = parse_tuple(false, false, {"recursive"});
  if (skip_name("if")) s.cond = parse_expression(true);
  s.recursive = skip_name("recursive");
  ++loops_;
  s.body = parse_statements({"endfor", "else"}, false);
  --loops_;
  if (next().value == "else") s.else_body = parse_statements({"endfor"}, true);
}

void Parser::parse_if(Stmt& s) {
  next();
  s.kind = StmtKind::kIf;
  while (true) {
    Branch b;
    b.cond = parse_tuple(false, false, {});
    b.body = parse_statements({"elif", "else", "endif"}, false);
    s.branches.push_back(std::move(b));
    const std::string t = next().value;
    if (t == "elif") continue;
    if (t == "else") s.else_body = parse_statements({"endif"}, true);
    break;
  }
}

void Parser::parse_set(Stmt& s) {
  next();
  s.target = parse_assign_target(true, true, {});
  if (skip_op("=")) {
    s.kind = StmtKind::kSet;
    s.expr = parse_tuple(true, false, {});
    return;
  }
  s.kind = StmtKind::kSetBlock;
  s.filter = parse_filter(nullptr, false);
  s.body = parse_statements({"endset"}, true);
}

void Parser::parse_signature(MacroDef& m) {
  expect_op("(");
  while (!is_op(")")) {
    if (!m.params.empty()) expect_op(",");
    m.params.push_back(expect_name());
    if (skip_op("=")) {
      m.defaults.push_back(parse_expression(true));
    } else if (!m.defaults.empty()) {
      fail("non-default argument follows default argument");
    }
  }
  expect_op(")");
}

void Parser::parse_macro(Stmt& s) {
  next();
  s.kind = StmtKind::kMacro;
  auto m = std::make_shared<MacroDef>();
  m->name = expect_name();
  parse_signature(*m);
  const int loops = loops_;
  loops_ = 0;
  macros_.push_back(m.get());
  m->body = parse_statements({"endmacro"}, true);
  macros_.pop_back();
  loops_ = loops;
  s.macro = std::move(m);
}

void Parser::parse_call_block(Stmt& s) {
  next();
  s.kind = StmtKind::kCallBlock;
  auto m = std::make_shared<MacroDef>();
  m->name = "caller";
  if (is_op("(")) parse_signature(*m);
  const int line = cur().line;
  s.expr = parse_expression(true);
  if (s.expr->kind != ExprKind::kCall) fail_at(line, "expected call");
  const int loops = loops_;
  loops_ = 0;
  macros_.push_back(m.get());
  m->body = parse_statements({"endcall"}, true);
  macros_.pop_back();
  loops_ = loops;
  s.macro = std::move(m);
}

Target Parser::parse_assign_target(bool with_tuple, bool with_namespace,
                                   std::initializer_list<std::string_view> extra_ends) {
  if (with_namespace && cur().kind == Tok::kName && look().kind == Tok::kOp &&
      look().value == ".") {
    Target t;
    t.name = next().value;
    next();
    t.attr = expect_name();
    return t;
  }
  if (!with_tuple) {
    Target t;
    t.name = expect_name();
    return t;
  }
  Target tuple;
  tuple.tuple = false;
  bool is_tuple = false;
  while (true) {
    if (!tuple.items.empty()) expect_op(",");
    if (tuple_end(extra_ends)) break;
    tuple.items.push_back(parse_target_primary());
    if (is_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (tuple.items.empty()) fail("expected an assignment target");
    return std::move(tuple.items.front());
  }
  tuple.tuple = true;
  return tuple;
}

Target Parser::parse_target_primary() {
  if (cur().kind == Tok::kName) {
    const std::string& n = cur().value;
    if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None")
      fail(fmt::format("can't assign to '{}'", n));
    Target t;
    t.name = next().value;
    return t;
  }
  if (skip_op("(")) {
    Nest nest(*this);
    Target t = parse_assign_target(true, false, {});
    expect_op(")");
    return t;
  }
  fail(fmt::format("can't assign to {}", describe(cur())));
}

}  // namespace detail

namespace {

// Unknown filters and tests fail at parse time, except in an if's conditions and branches and in
// inline ifs, where jinja2 defers the error to rendering ("soft" frames; a loop, macro, call,
// filter, with or set block inside starts a hard frame again).
void check_names(const Expr* e, bool soft);

void check_names(const Body& body, bool soft) {
  for (const StmtPtr& s : body) {
    check_names(s->expr.get(), soft);
    check_names(s->cond.get(), soft);
    check_names(s->filter.get(), false);
    for (const Branch& b : s->branches) {
      check_names(b.cond.get(), true);
      check_names(b.body, true);
    }
    for (const auto& a : s->assigns) check_names(a.second.get(), soft);
    const bool inner_soft = s->kind == StmtKind::kIf && soft;
    check_names(s->body, inner_soft);
    check_names(s->else_body, s->kind == StmtKind::kIf);
    if (s->macro) {
      for (const ExprPtr& d : s->macro->defaults) check_names(d.get(), false);
      check_names(s->macro->body, false);
    }
  }
}

void check_names(const Expr* e, bool soft) {
  if (!e) return;
  if (e->kind == ExprKind::kCond) soft = true;
  if (!soft && e->kind == ExprKind::kFilter && !e->filter)
    throw Error(ErrorCategory::kConfig,
                fmt::format("line {}: no filter named '{}'", e->line, e->name));
  if (!soft && e->kind == ExprKind::kTest && !e->test)
    throw Error(ErrorCategory::kConfig,
                fmt::format("line {}: no test named '{}'", e->line, e->name));
  for (const ExprPtr& k : e->kids) check_names(k.get(), soft);
  for (const CallArg& a : e->args) check_names(a.value.get(), soft);
}

}  // namespace

std::unique_ptr<Program> parse(std::string_view source, const ParseLimits& limits) {
  if (source.size() > limits.max_source_bytes)
    throw Error(ErrorCategory::kConfig,
                fmt::format("the template is {} bytes, over the limit of {} bytes", source.size(),
                            limits.max_source_bytes));
  auto program = detail::Parser(lex(source), limits).run();
  check_names(program->body, false);
  return program;
}

}  // namespace offgen::jinja
