// The built-ins of jinja2's environment that chat templates use: filters (jinja2's plus Hugging
// Face's tojson), tests, global functions (range, dict, namespace, cycler, joiner, and HF's
// raise_exception and strftime_now) and the methods of str, list and dict the sandbox allows.
#pragma once

#include <string_view>

#include "runtime/text/jinja/ast.h"
#include "runtime/text/jinja/value.h"

namespace offgen::jinja {

// nullptr when there is no such filter / test.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);

// A global function of the environment (range, dict, namespace, ...); undefined when none.
Value find_global(std::string_view name);

// obj.name for str, list and dict values: a bound method, or undefined. A method the immutable
// sandbox forbids (list.append, dict.update, ...) is a value that fails when called, with
// jinja2's SecurityError message.
Value method(const Value& obj, std::string_view name);

// Hugging Face's tojson: json.dumps(v, ensure_ascii=..., indent=..., separators=...,
// sort_keys=...) with its defaults (ensure_ascii=False; ", " and ": " without an indent, ","
// and ": " with one).
struct JsonFormat {
  bool ensure_ascii = false;
  bool pretty = false;  // an indent was given (even 0 or ""): a newline before each item
  std::string indent;   // per level
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
};
MarkedText to_json(Interp& in, const Value& v, const JsonFormat& f);

// Python's printf-style formatting (`fmt % args`, the format filter) and str.format.
MarkedText percent_format(Interp& in, const MarkedText& fmt, const Value& args);
MarkedText str_format(Interp& in, const MarkedText& fmt, const Args& args);

}  // namespace offgen::jinja
