// Helpers shared by the built-in filters, tests, methods and globals: argument access, Python
// string operations that keep marks, case mapping, jinja2's attribute getters.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/text/jinja/interp.h"
#include "runtime/text/jinja/value.h"

namespace offgen::jinja {

// A value that must be a str: its text, or a TypeError naming `what`.
const MarkedText& want_str(const Value& v, std::string_view what);
int64_t want_int(const Value& v, std::string_view what);
// Arguments a built-in takes by position or keyword, with defaults (a Value() default with
// `required` set means "required").
std::vector<Value> args_of(std::string_view fn, const Args& args,
                           std::initializer_list<std::string_view> names,
                           std::vector<Value> defaults);

// Python case mapping (ICU, full mappings as Python does: "ß".upper() == "SS").
std::string to_upper(std::string_view s);
std::string to_lower(std::string_view s);
// The whole result marked when `src` has marks (case mapping changes byte lengths).
MarkedText remark(std::string text, const MarkedText& src);

// Python str.strip family: chars == nullptr strips whitespace; `left`/`right` choose the ends.
MarkedText py_strip(const MarkedText& s, const std::string* chars, bool left, bool right);
// str.split(sep, maxsplit) / rsplit: sep == nullptr splits on whitespace runs.
std::vector<Value> py_split(const MarkedText& s, const std::string* sep, int64_t maxsplit,
                            bool from_right);
std::vector<Value> py_splitlines(const MarkedText& s, bool keepends);
MarkedText py_replace(Interp& in, const MarkedText& s, std::string_view old, const MarkedText& repl,
                      int64_t count);
// Pads to `width` code points: align '<', '>' or '^' (Python's center puts the extra space on
// the right unless the padding is odd and the width even... as str.center does).
MarkedText py_pad(const MarkedText& s, int64_t width, char32_t fill, char align);

// jinja2's make_attrgetter: "a.b.0" looked up with the sandbox's getitem per part; `dflt`
// replaces an undefined result when given.
std::function<Value(const Value&)> attr_getter(Interp& in, const Value& attribute,
                                               const Value* dflt = nullptr);
// A sort/compare key: lowercased strings unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive);
// Python len(); undefined has length 0.
int64_t py_len(const Value& v);

}  // namespace offgen::jinja
