// Values of the Jinja engine with Python's semantics as jinja2 exposes them: undefined, None,
// bool, int, float, str (UTF-8 with marks, see marked_text.h), list/tuple, dict (insertion
// ordered) and objects (namespace, loop, macros, bound methods, built-in functions).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/text/marked_text.h"

namespace offgen::jinja {

class Interp;
class Value;
class Object;

enum class Type : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,
  kDict,
  kObject
};

struct List {
  std::vector<Value> items;
  bool tuple = false;
  // A named tuple's field names (groupby's (grouper, list)); empty for a plain tuple.
  std::vector<std::string> names;
};

class Dict;

// Immutable values share their payload (lists and dicts are never changed once built: the
// sandbox is immutable); objects (a namespace) have reference semantics as in Python.
class Value {
 public:
  Value() : i_(0) {}  // undefined without a hint
  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value real(double f);
  static Value string(std::string s);
  static Value string(MarkedText s);
  // A markupsafe Markup string (what |safe and |escape return): `+` and `%` with it HTML-escape
  // the plain strings they combine it with, as in jinja2 without autoescape.
  static Value markup(MarkedText s);
  static Value list(std::vector<Value> items, bool tuple = false);
  static Value named_tuple(std::vector<Value> items, std::vector<std::string> names);
  static Value dict(Dict d);
  static Value object(std::shared_ptr<Object> o);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_list() const { return type_ == Type::kList; }
  bool is_dict() const { return type_ == Type::kDict; }
  bool is_number() const {
    return type_ == Type::kInt || type_ == Type::kFloat || type_ == Type::kBool;
  }
  bool is_integer() const { return type_ == Type::kInt || type_ == Type::kBool; }
  bool is_markup() const { return markup_; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return type_ == Type::kBool ? (b_ ? 1 : 0) : i_; }  // kInt or kBool
  double as_float() const { return type_ == Type::kFloat ? f_ : static_cast<double>(as_int()); }
  const MarkedText& str() const { return *static_cast<const MarkedText*>(p_.get()); }
  const std::string& text() const { return str().text(); }
  const List& list_value() const { return *static_cast<const List*>(p_.get()); }
  const std::vector<Value>& items() const { return list_value().items; }
  bool is_tuple() const { return type_ == Type::kList && list_value().tuple; }
  const Dict& dict_value() const { return *static_cast<const Dict*>(p_.get()); }
  Object& obj() const { return *static_cast<Object*>(const_cast<void*>(p_.get())); }
  // The message an undefined value raises when used ("'x' is undefined").
  std::string undefined_hint() const;
  // Identity of the payload (Python's `is` for containers and objects).
  const void* identity() const { return p_.get(); }

  // Python truthiness (jinja2: undefined is false).
  bool truthy() const;
  // The Python type name used in messages ("str", "list", "dict object", ...).
  std::string type_name() const;

 private:
  Type type_ = Type::kUndefined;
  bool markup_ = false;
  union {
    bool b_;
    int64_t i_;
    double f_;
  };
  std::shared_ptr<const void> p_;
};

// Python dict: keys are hashable values (str, int, float, bool, None, tuples of those), in
// insertion order.
class Dict {
 public:
  // Inserts or replaces (a replaced key keeps its position). Throws kInput for an unhashable key.
  void set(Value key, Value value);
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }

 private:
  std::vector<std::pair<Value, Value>> items_;
  std::unordered_map<std::string, size_t> index_;  // hash_key(key) -> position
};

// The key under which a hashable value is indexed: equal for values Python calls equal
// (1 == 1.0 == True). Throws kInput ("unhashable type: 'list'") for lists, dicts and objects.
std::string hash_key(const Value& v);

// Positional and keyword arguments of a call.
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

// Binds Args to a Python-style signature: names in order, defaults for the trailing ones.
// Throws kInput naming `fn` for a missing, unknown or repeated argument.
std::vector<Value> bind_args(std::string_view fn, const Args& args,
                             std::initializer_list<std::string_view> names,
                             std::vector<Value> defaults = {});

// Objects: namespaces, loops, macros, bound methods, built-in functions.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  // Attribute access (obj.name); undefined when there is none.
  virtual Value attr(Interp& in, const Value& self, std::string_view name);
  // Assignment `{% set obj.name = v %}`; false when the object does not take attributes.
  virtual bool set_attr(std::string_view name, Value v);
  virtual bool callable() const { return false; }
  virtual Value call(Interp& in, Args args);
  // Python's str() of the object.
  virtual std::string str() const;
  // Drops the values and scopes the object holds (called when a render ends, to break the
  // reference cycles a template can build: a namespace holding itself, a macro held by the scope
  // it closes over).
  virtual void release() {}
};

// The objects created during one render on this thread (Value::object registers them), released
// together when the render ends. Install one per render with ObjectRegistry::Install.
class ObjectRegistry {
 public:
  ObjectRegistry() = default;
  ObjectRegistry(const ObjectRegistry&) = delete;
  ObjectRegistry& operator=(const ObjectRegistry&) = delete;
  ~ObjectRegistry() { release_all(); }
  void add(const std::shared_ptr<Object>& o);
  void release_all();

  // Makes `r` this thread's registry for its lifetime.
  class Install {
   public:
    explicit Install(ObjectRegistry& r);
    ~Install();
    Install(const Install&) = delete;
    Install& operator=(const Install&) = delete;

   private:
    ObjectRegistry* previous_;
  };

 private:
  std::vector<std::weak_ptr<Object>> objects_;
  size_t prune_at_ = 1024;
};

// jinja2's lazy results (map, select, reject, selectattr, rejectattr, unique, items, batch and
// reverse return generators): iterated once, with no len(), not JSON serialisable, always true.
// The items are computed eagerly (templates have no side effects to reorder).
class Generator : public Object {
 public:
  explicit Generator(std::vector<Value> items) : items_(std::move(items)) {}
  std::string type_name() const override { return "generator"; }
  std::string str() const override { return "<generator object>"; }
  // The items on the first call, nothing after (the generator is spent).
  std::vector<Value> take();
  void release() override { items_.clear(); }

 private:
  std::vector<Value> items_;
  bool spent_ = false;
};
Value make_generator(std::vector<Value> items);

// Python equality (1 == 1.0 == True, lists and dicts by value, objects by identity; undefined
// equals undefined).
bool equal(const Value& a, const Value& b);
// Python ordering for <, <=, >, >=: numbers, strings, lists and tuples. Throws kInput with
// Python's message for other types. Returns <0, 0, >0.
int compare(const Value& a, const Value& b);

// markupsafe.escape() of a plain string (&, <, >, ", ' as entities); a Markup string as it is.
MarkedText html_escape(const Value& v);

// Python str() (undefined: ""), appended to `out` with the marks of the strings it contains;
// repr() as Python prints a value inside a container.
void append_str(MarkedText& out, const Value& v);
void append_repr(MarkedText& out, const Value& v);
MarkedText to_str(const Value& v);
std::string py_repr_string(std::string_view s);
// Python repr() of a float ("1.0", "1e-05", "inf").
std::string py_float_repr(double f);

// Throws the engine's render-time error (offgen::Error, kInput); the renderer adds the line.
[[noreturn]] void fail(std::string message);

}  // namespace offgen::jinja
