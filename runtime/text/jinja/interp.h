// The Jinja evaluator: renders a Program over variables with jinja2's semantics (scopes per loop
// iteration and macro call, undefined values, the immutable sandbox) within limits on steps,
// nesting depth and the size of what it builds.
#pragma once

#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "runtime/core/error.h"
#include "runtime/text/jinja/ast.h"
#include "runtime/text/jinja/value.h"

namespace offgen::jinja {

struct RenderLimits {
  // Evaluation steps: one per statement or expression evaluated, plus one per 64 bytes of every
  // string built and per element of every list built. Bounds the time of any render.
  int64_t max_steps = 20'000'000;
  // Nesting of statements, expressions and macro calls while rendering.
  int max_depth = 400;
  // The rendered output, and any single string or list built on the way (bytes / elements).
  size_t max_output_bytes = size_t{32} << 20;
};

// Variables of one scope, chained to the enclosing scope (lookups walk outwards).
class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  const Value* find(std::string_view name) const;
  void set(const std::string& name, Value v) { vars_[name] = std::move(v); }

 private:
  std::shared_ptr<Scope> parent_;
  std::unordered_map<std::string, Value> vars_;
};
using ScopePtr = std::shared_ptr<Scope>;

// One render. Not thread-safe; create one per render (cheap).
class Interp {
 public:
  Interp(const RenderLimits& limits, const std::tm& now) : limits_(limits), now_(now) {}

  // Renders `program` with `globals` as the outermost scope. Throws offgen::Error (kInput)
  // "line N: ..." for errors of the template on these inputs (RaisedError for raise_exception).
  MarkedText render(const Program& program, ScopePtr globals);

  // For built-ins.
  void step(int64_t n = 1);
  // Charges a string or list of `n` bytes / elements being built, and refuses one over the
  // output limit.
  void charge(size_t n);
  // The same for a list of `n` values being built (charged by their size in memory).
  void charge_items(size_t n);
  Value make_string(MarkedText s);
  Value call(const Value& f, Args args);
  Value getattr(const Value& obj, std::string_view name);
  Value getitem(const Value& obj, const Value& key);
  // Applies a filter or test by name (map, select, selectattr, ...).
  Value apply_filter(std::string_view name, const Value& v, const Args& args);
  bool apply_test(std::string_view name, const Value& v, const Args& args);
  // The items a `for` loop iterates: list items, dict keys, characters of a string; undefined
  // is empty. Throws for values that are not iterable.
  std::vector<Value> iterate(const Value& v);
  const std::tm& now() const { return now_; }
  // Renders a macro call (used by the Macro object).
  Value call_macro(const MacroDef& def, const ScopePtr& closure, Args args);
  // Re-runs a recursive loop over `items` (used by the loop object's call).
  MarkedText recurse_loop(const Stmt& loop, const ScopePtr& scope, const Value& items, int depth);

  // Raises jinja2's UndefinedError for a use of `v` that undefined values do not allow.
  [[noreturn]] static void undefined_error(const Value& v);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  friend struct DepthGuard;

  Flow exec(const Body& body, const ScopePtr& scope, MarkedText& out);
  Flow exec_stmt(const Stmt& s, const ScopePtr& scope, MarkedText& out);
  Flow exec_for(const Stmt& s, const ScopePtr& scope, MarkedText& out, const Value& items,
                int depth);
  void assign(const Target& t, Value v, const ScopePtr& scope);
  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_filter(const Expr& e, const ScopePtr& scope, const Value* block_input);
  Args eval_args(const std::vector<CallArg>& args, const ScopePtr& scope);
  Value lookup(const Expr& e, const ScopePtr& scope);
  Value binary(const std::string& op, const Value& a, const Value& b);
  bool compare_op(const std::string& op, const Value& a, const Value& b);
  Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
  void append_out(MarkedText& out, const Value& v);

  RenderLimits limits_;
  std::tm now_;
  int64_t steps_ = 0;
  int depth_ = 0;
  int line_ = 0;
};

// Counts one level of nesting for its lifetime; throws past RenderLimits::max_depth.
struct DepthGuard {
  Interp& in;
  explicit DepthGuard(Interp& interp) : in(interp) {
    if (++in.depth_ > in.limits_.max_depth)
      fail("the template nests deeper than " + std::to_string(in.limits_.max_depth) +
           " levels while rendering (recursion?)");
  }
  ~DepthGuard() { --in.depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;
};

// What raise_exception raises: offgen::Error (kInput) with the template's message.
class RaisedError : public Error {
 public:
  explicit RaisedError(const std::string& message) : Error(ErrorCategory::kInput, message) {}
};

}  // namespace offgen::jinja
