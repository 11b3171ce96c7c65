// The evaluator's statements: output, if, for (loop object, filters, else, recursion), set,
// macros and call blocks, filter/with blocks, break/continue; limits on steps and depth.
#include "runtime/text/jinja/interp.h"

#include <fmt/format.h>

#include "runtime/text/jinja/builtins.h"
#include "runtime/text/utf8.h"

namespace offgen::jinja {

const Value* Scope::find(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent_.get()) {
    auto it = s->vars_.find(std::string(name));
    if (it != s->vars_.end()) return &it->second;
  }
  return nullptr;
}

namespace {

// A macro: its definition and the scope it was defined in.
class Macro : public Object {
 public:
  Macro(const MacroDef* def, ScopePtr closure) : def_(def), closure_(std::move(closure)) {}
  std::string type_name() const override { return "Macro"; }
  void release() override { closure_.reset(); }
  bool callable() const override { return true; }
  Value call(Interp& in, Args args) override {
    return in.call_macro(*def_, closure_, std::move(args));
  }
  std::string str() const override { return fmt::format("<Macro '{}'>", def_->name); }
  Value attr(Interp& in, const Value& self, std::string_view name) override {
    if (name == "name") return Value::string(def_->name);
    return Object::attr(in, self, name);
  }

 private:
  const MacroDef* def_;
  ScopePtr closure_;
};

// jinja2's LoopContext.
class Loop : public Object {
 public:
  Loop(std::shared_ptr<const std::vector<Value>> items, int depth, const Stmt* stmt, ScopePtr scope)
      : items_(std::move(items)), depth_(depth), stmt_(stmt), scope_(std::move(scope)) {}
  void at(size_t i) { i_ = i; }
  std::string type_name() const override { return "LoopContext"; }
  void release() override {
    items_.reset();
    scope_.reset();
    last_changed_ = Value();
  }
  bool callable() const override { return stmt_->recursive; }
  std::string str() const override {
    return fmt::format("<LoopContext {}/{}>", i_ + 1, items_->size());
  }

  Value attr(Interp& in, const Value& self, std::string_view name) override {
    const auto n = static_cast<int64_t>(items_->size());
    const auto i = static_cast<int64_t>(i_);
    if (name == "index") return Value::integer(i + 1);
    if (name == "index0") return Value::integer(i);
    if (name == "revindex") return Value::integer(n - i);
    if (name == "revindex0") return Value::integer(n - i - 1);
    if (name == "first") return Value::boolean(i == 0);
    if (name == "last") return Value::boolean(i == n - 1);
    if (name == "length") return Value::integer(n);
    if (name == "depth") return Value::integer(depth_);
    if (name == "depth0") return Value::integer(depth_ - 1);
    if (name == "previtem")
      return i > 0 ? (*items_)[i - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem")
      return i + 1 < n ? (*items_)[i + 1] : Value::undefined("there is no next item");
    if (name == "cycle" || name == "changed")
      return Value::object(std::make_shared<LoopMethod>(self, name));
    return Object::attr(in, self, name);
  }

  Value call(Interp& in, Args args) override {
    if (!stmt_->recursive)
      fail("the loop is not recursive (add 'recursive' to the for tag to call loop())");
    if (args.pos.size() != 1 || !args.kw.empty()) fail("loop() takes one iterable");
    return Value::string(in.recurse_loop(*stmt_, scope_, args.pos[0], depth_ + 1));
  }

 private:
  class LoopMethod : public Object {
   public:
    LoopMethod(Value loop, std::string_view name) : loop_(std::move(loop)), name_(name) {}
    std::string type_name() const override { return "method"; }
    void release() override { loop_ = Value(); }
    bool callable() const override { return true; }
    Value call(Interp&, Args args) override {
      auto& l = static_cast<Loop&>(loop_.obj());
      if (name_ == "cycle") {
        if (args.pos.empty()) fail("no items for cycling given");
        return args.pos[l.i_ % args.pos.size()];
      }
      Value now = Value::list(args.pos, true);
      const bool changed = !l.has_last_ || !equal(now, l.last_changed_);
      l.last_changed_ = now;
      l.has_last_ = true;
      return Value::boolean(changed);
    }

   private:
    Value loop_;
    std::string name_;
  };

  std::shared_ptr<const std::vector<Value>> items_;
  size_t i_ = 0;
  int depth_;
  const Stmt* stmt_;
  ScopePtr scope_;
  Value last_changed_;
  bool has_last_ = false;
};

}  // namespace

void Interp::step(int64_t n) {
  steps_ += n;
  if (steps_ > limits_.max_steps)
    fail(
        fmt::format("the template took more than {} steps to render (a loop that does not end, "
                    "or work out of proportion to its input)",
                    limits_.max_steps));
}

void Interp::charge_items(size_t n) {
  if (n > limits_.max_output_bytes / sizeof(Value)) charge(limits_.max_output_bytes + 1);
  charge(n * sizeof(Value));
}

void Interp::charge(size_t n) {
  if (n > limits_.max_output_bytes)
    fail(fmt::format("the template built a value of {} bytes or items, over the limit of {}", n,
                     limits_.max_output_bytes));
  step(static_cast<int64_t>(n / 64));
}

Value Interp::make_string(MarkedText s) {
  charge(s.size());
  return Value::string(std::move(s));
}

void Interp::undefined_error(const Value& v) { fail(v.undefined_hint()); }

MarkedText Interp::render(const Program& program, ScopePtr globals) {
  MarkedText out;
  ObjectRegistry objects;  // released when the render ends, whatever cycles it built
  ObjectRegistry::Install install(objects);
  try {
    exec(program.body, globals, out);
  } catch (const RaisedError&) {
    throw;
  } catch (const Error& e) {
    throw Error(e.category(), fmt::format("line {}: {}", line_, e.what()));
  }
  return out;
}

void Interp::append_out(MarkedText& out, const Value& v) {
  append_str(out, v);
  if (out.size() > limits_.max_output_bytes)
    fail(fmt::format("the rendered text is over the limit of {} bytes", limits_.max_output_bytes));
  step(static_cast<int64_t>(v.is_string() ? v.text().size() / 64 : 0));
}

Interp::Flow Interp::exec(const Body& body, const ScopePtr& scope, MarkedText& out) {
  for (const StmtPtr& s : body) {
    const Flow f = exec_stmt(*s, scope, out);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interp::Flow Interp::exec_stmt(const Stmt& s, const ScopePtr& scope, MarkedText& out) {
  DepthGuard guard(*this);
  step();
  line_ = s.line;
  switch (s.kind) {
    case StmtKind::kData:
      out.append(s.text);
      if (out.size() > limits_.max_output_bytes)
        fail(fmt::format("the rendered text is over the limit of {} bytes",
                         limits_.max_output_bytes));
      return Flow::kNormal;
    case StmtKind::kPrint:
      append_out(out, eval(*s.expr, scope));
      return Flow::kNormal;
    case StmtKind::kIf:
      for (const Branch& b : s.branches) {
        line_ = s.line;
        if (eval(*b.cond, scope).truthy()) return exec(b.body, scope, out);
      }
      return exec(s.else_body, scope, out);
    case StmtKind::kFor:
      return exec_for(s, scope, out, eval(*s.expr, scope), 1);
    case StmtKind::kSet:
      assign(s.target, eval(*s.expr, scope), scope);
      return Flow::kNormal;
    case StmtKind::kSetBlock: {
      MarkedText buf;
      exec(s.body, std::make_shared<Scope>(scope), buf);
      Value v = Value::string(std::move(buf));
      if (s.filter) v = eval_filter(*s.filter, scope, &v);
      assign(s.target, std::move(v), scope);
      return Flow::kNormal;
    }
    case StmtKind::kMacro:
      scope->set(s.macro->name, Value::object(std::make_shared<Macro>(s.macro.get(), scope)));
      return Flow::kNormal;
    case StmtKind::kCallBlock: {
      const Expr& call = *s.expr;
      const Value f = eval(*call.kids[0], scope);
      Args args = eval_args(call.args, scope);
      args.kw.emplace_back("caller", Value::object(std::make_shared<Macro>(s.macro.get(), scope)));
      line_ = s.line;
      append_out(out, this->call(f, std::move(args)));
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      MarkedText buf;
      exec(s.body, std::make_shared<Scope>(scope), buf);
      const Value input = Value::string(std::move(buf));
      append_out(out, eval_filter(*s.filter, scope, &input));
      return Flow::kNormal;
    }
    case StmtKind::kWith: {
      auto inner = std::make_shared<Scope>(scope);
      for (const auto& [target, expr] : s.assigns) assign(target, eval(*expr, scope), inner);
      return exec(s.body, inner, out);
    }
    case StmtKind::kBreak:
      return Flow::kBreak;
    case StmtKind::kContinue:
      return Flow::kContinue;
    case StmtKind::kScope:
      return exec(s.body, scope, out);
  }
  return Flow::kNormal;
}

Interp::Flow Interp::exec_for(const Stmt& s, const ScopePtr& scope, MarkedText& out,
                              const Value& iterable, int depth) {
  std::vector<Value> all = iterate(iterable);
  if (s.cond) {  // the loop filter runs before the loop: loop.length counts what it keeps
    std::vector<Value> kept;
    for (Value& v : all) {
      auto probe = std::make_shared<Scope>(scope);
      assign(s.target, v, probe);
      line_ = s.line;
      if (eval(*s.cond, probe).truthy()) kept.push_back(std::move(v));
    }
    all = std::move(kept);
  }
  auto items = std::make_shared<const std::vector<Value>>(std::move(all));
  if (items->empty()) {
    exec(s.else_body, scope, out);
    return Flow::kNormal;
  }
  auto loop = std::make_shared<Loop>(items, depth, &s, scope);
  const Value loop_value = Value::object(loop);
  for (size_t i = 0; i < items->size(); ++i) {
    step();
    loop->at(i);
    auto iter = std::make_shared<Scope>(scope);
    iter->set("loop", loop_value);
    assign(s.target, (*items)[i], iter);
    if (exec(s.body, iter, out) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

MarkedText Interp::recurse_loop(const Stmt& loop, const ScopePtr& scope, const Value& items,
                                int depth) {
  DepthGuard guard(*this);
  MarkedText out;
  exec_for(loop, scope, out, items, depth);
  return out;
}

void Interp::assign(const Target& t, Value v, const ScopePtr& scope) {
  if (!t.attr.empty()) {
    const Value* ns = scope->find(t.name);
    if (!ns || ns->type() != Type::kObject || !ns->obj().set_attr(t.attr, std::move(v)))
      fail(fmt::format("cannot assign attribute '{}' on '{}': it is not a namespace", t.attr,
                       t.name));
    return;
  }
  if (!t.tuple) {
    scope->set(t.name, std::move(v));
    return;
  }
  const std::vector<Value> parts = iterate(v);
  if (parts.size() != t.items.size())
    fail(fmt::format("{} values to unpack (expected {}, got {})",
                     parts.size() < t.items.size() ? "not enough" : "too many", t.items.size(),
                     parts.size()));
  for (size_t i = 0; i < parts.size(); ++i) assign(t.items[i], parts[i], scope);
}

std::vector<Value> Interp::iterate(const Value& v) {
  switch (v.type()) {
    case Type::kUndefined:
      return {};
    case Type::kList:
      charge_items(v.items().size());
      return v.items();
    case Type::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.dict_value().size());
      for (const auto& kv : v.dict_value().items()) keys.push_back(kv.first);
      charge_items(keys.size());
      return keys;
    }
    case Type::kString: {
      std::vector<Value> chars;
      const std::string& s = v.text();
      charge_items(s.size());
      for (size_t i = 0; i < s.size();) {
        const int n = utf8::decode(s, i).len;
        chars.push_back(Value::string(v.str().slice(i, i + n)));
        i += n;
      }
      return chars;
    }
    case Type::kObject:
      if (auto* g = dynamic_cast<Generator*>(&v.obj())) {
        std::vector<Value> items = g->take();
        charge_items(items.size());
        return items;
      }
      break;
    case Type::kNone:
    case Type::kBool:
    case Type::kInt:
    case Type::kFloat:
      break;
  }
  fail(fmt::format("'{}' object is not iterable", v.type_name()));
}

Value Interp::call_macro(const MacroDef& def, const ScopePtr& closure, Args args) {
  DepthGuard guard(*this);
  step();
  auto scope = std::make_shared<Scope>(closure);
  const size_t n = def.params.size();
  if (args.pos.size() > n && !def.catch_varargs)
    fail(fmt::format("macro '{}' takes not more than {} argument(s)", def.name, n));
  std::vector<bool> given(n, false);
  for (size_t i = 0; i < n && i < args.pos.size(); ++i) {
    scope->set(def.params[i], args.pos[i]);
    given[i] = true;
  }
  std::vector<Value> extra(args.pos.begin() + std::min(n, args.pos.size()), args.pos.end());
  Dict kwargs;
  bool has_caller = false;
  for (auto& [name, v] : args.kw) {
    size_t i = 0;
    while (i < n && def.params[i] != name) ++i;
    if (i < n) {
      if (given[i])
        fail(fmt::format("macro '{}' got multiple values for argument '{}'", def.name, name));
      scope->set(name, std::move(v));
      given[i] = true;
    } else if (name == "caller") {
      if (!def.caller)
        fail(fmt::format("macro '{}' was called with a caller block but does not use caller",
                         def.name));
      scope->set("caller", std::move(v));
      has_caller = true;
    } else if (def.catch_kwargs) {
      kwargs.set(Value::string(name), std::move(v));
    } else {
      fail(fmt::format("macro '{}' takes no keyword argument '{}'", def.name, name));
    }
  }
  const size_t first_default = n - def.defaults.size();
  for (size_t i = 0; i < n; ++i) {
    if (given[i]) continue;
    if (i >= first_default) {
      scope->set(def.params[i], eval(*def.defaults[i - first_default], scope));
    } else {
      scope->set(def.params[i],
                 Value::undefined(fmt::format("parameter '{}' was not provided", def.params[i])));
    }
  }
  if (def.catch_varargs) scope->set("varargs", Value::list(std::move(extra), true));
  if (def.catch_kwargs) scope->set("kwargs", Value::dict(std::move(kwargs)));
  if (def.caller && !has_caller)
    scope->set("caller",
               Value::undefined(fmt::format("no caller defined for macro '{}'", def.name)));
  MarkedText out;
  const int line = line_;
  exec(def.body, scope, out);
  line_ = line;
  return Value::string(std::move(out));
}

}  // namespace offgen::jinja
