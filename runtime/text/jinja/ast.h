// The syntax tree of a parsed Jinja template (jinja2's node set for the statements and
// expressions chat templates use). Built by parse(), read-only while rendering.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/text/jinja/value.h"

namespace offgen::jinja {

class Interp;
struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

using FilterFn = Value (*)(Interp& in, const Value& input, const Args& args);
using TestFn = bool (*)(Interp& in, const Value& input, const Args& args);

enum class ExprKind {
  kConst,    // value
  kName,     // name
  kList,     // kids
  kTuple,    // kids
  kDict,     // kids: key, value, key, value, ...
  kAttr,     // kids[0].name
  kItem,     // kids[0][kids[1]]
  kSlice,    // kids[0][kids[1]:kids[2]:kids[3]] (null kids for omitted parts)
  kCall,     // kids[0](args)
  kFilter,   // kids[0] (null inside a filter block) | name(args)
  kTest,     // kids[0] is [not] name(args)
  kNot,      // not kids[0]
  kNeg,      // -kids[0]
  kPos,      // +kids[0]
  kBinary,   // kids[0] op kids[1]: + - * / // % **
  kConcat,   // kids joined with ~
  kAnd,      // kids[0] and kids[1]
  kOr,       // kids[0] or kids[1]
  kCompare,  // kids[0] ops[0] kids[1] ops[1] kids[2] ... (== != < <= > >= in notin)
  kCond,     // kids[0] if kids[1] else kids[2] (kids[2] null: undefined)
};

struct CallArg {
  std::string name;  // keyword name; empty for positional
  ExprPtr value;
  int star = 0;  // 1: *args, 2: **kwargs
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;       // kConst
  std::string name;  // kName, kAttr, kFilter, kTest; kBinary: the operator
  std::vector<ExprPtr> kids;
  std::vector<std::string> ops;  // kCompare
  std::vector<CallArg> args;     // kCall, kFilter, kTest
  FilterFn filter = nullptr;     // kFilter (null: unknown, fails when evaluated)
  TestFn test = nullptr;         // kTest (null: unknown, fails when evaluated)
  bool negate = false;           // kTest: "is not"
};

// An assignment target: a name, a (nested) tuple of names, or namespace.attribute.
struct Target {
  std::string name;           // a name, or the namespace's name for an attribute
  std::string attr;           // namespace attribute ("" when none)
  std::vector<Target> items;  // a tuple target
  bool tuple = false;
};

struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
  bool catch_varargs = false, catch_kwargs = false, caller = false;  // the body reads them
};

enum class StmtKind {
  kData,         // text
  kPrint,        // {{ expr }}
  kIf,           // branches; else_body
  kFor,          // target in expr [if cond] body else_body
  kSet,          // target = expr
  kSetBlock,     // {% set target | filter %} body {% endset %}
  kMacro,        // macro
  kCallBlock,    // {% call(params) expr %} body: macro (the caller) + expr (the call)
  kFilterBlock,  // {% filter f %} body
  kWith,         // {% with targets = exprs %} body
  kBreak,
  kContinue,
  kScope,  // body rendered as is ({% generation %})
};

struct Branch {
  ExprPtr cond;
  Body body;
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;  // kData
  ExprPtr expr;      // kPrint, kFor (iterable), kSet, kCallBlock (the call)
  ExprPtr cond;      // kFor: the loop filter
  ExprPtr filter;    // kSetBlock, kFilterBlock: a kFilter chain whose innermost input is null
  std::vector<Branch> branches;  // kIf
  Body body, else_body;
  Target target;                                    // kFor, kSet, kSetBlock
  std::vector<std::pair<Target, ExprPtr>> assigns;  // kWith
  std::shared_ptr<const MacroDef> macro;            // kMacro, kCallBlock
  bool recursive = false;                           // kFor
};

struct Program {
  Body body;
};

}  // namespace offgen::jinja
