// Internal to the loaders of Hugging Face checkpoint files (config.json, tokenizer files,
// generation_config.json, the shard index): reading a file's text, parsing it with JsonReader (its
// depth limit; keys given twice refused where asked), and typed member access whose errors name the
// file and the JSON path.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>

#include "runtime/core/error.h"
#include "runtime/core/json_reader.h"
#include "runtime/text/tokenizer.h"

namespace offgen::hf {

using nlohmann::json;

constexpr size_t kQuoteChars = 200;

// A JSON value for a message, cut to ~200 characters.
inline std::string quote(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > kQuoteChars) s = s.substr(0, kQuoteChars) + "...";
  return s;
}

// A checkpoint file's text. Throws Error(kIo) naming it when it cannot be read (a directory too).
inline std::string read_text_file(const std::string& path) {
  std::error_code ec;
  OFFGEN_CHECK(!std::filesystem::is_directory(path, ec), kIo, "{}: is a directory, not a file",
               path);
  std::ifstream in(path, std::ios::binary);
  OFFGEN_CHECK(in.good(), kIo, "{}: cannot open: {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  OFFGEN_CHECK(!in.bad(), kIo, "{}: read failed", path);
  return ss.str();
}

// `text` (the file `file`) as a JSON value: any value, or an object when `object`. Errors name the
// file: syntax (with the byte), numbers beyond a double, nesting past kJsonMaxDepth, and keys given
// twice in one object when duplicates_throw (otherwise the later one wins).
inline json parse_json(std::string_view text, const std::string& file, bool duplicates_throw,
                       bool object = true) {
  json j;
  try {
    j = read_json(text, {.duplicate_throws = duplicates_throw, .mark = {}}).value;
  } catch (const JsonParseError& e) {
    if (e.kind() == JsonParseError::Kind::kDuplicateKey)
      OFFGEN_THROW(kInput, "{}: duplicate key \"{}\"{}", file, e.key(),
                   e.path().empty() ? std::string() : " in " + e.path());
    OFFGEN_THROW(kInput, "{}: not valid JSON at byte {}: {}", file, e.byte(), e.reason());
  }
  OFFGEN_CHECK(!object || j.is_object(), kInput, "{}: the top level is not a JSON object", file);
  return j;
}

// Reader for one file's JSON: typed member access whose errors name the file and JSON path.
struct Doc {
  const std::string& file;

  const json* find(const json& obj, std::string_view key) const {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  bool flag(const json& obj, std::string_view key, bool fallback, const std::string& path) const {
    const json* v = find(obj, key);
    if (!v) return fallback;
    OFFGEN_CHECK(v->is_boolean(), kInput, "{}: {}{}{}: expected true/false, got {}", file, path,
                 path.empty() ? "" : ".", key, quote(*v));
    return v->get<bool>();
  }
  std::string str(const json& obj, std::string_view key, const std::string& path) const {
    const json* v = find(obj, key);
    OFFGEN_CHECK(v && v->is_string(), kInput, "{}: {}.{}: expected a string, got {}", file, path,
                 key, v ? quote(*v) : "nothing");
    return v->get<std::string>();
  }
  std::string type(const json& obj, const std::string& path) const {
    OFFGEN_CHECK(obj.is_object(), kInput, "{}: {}: expected an object, got {}", file, path,
                 quote(obj));
    return str(obj, "type", path);
  }
  int32_t id(const json& v, const std::string& path) const {
    int64_t x = -1;
    if (v.is_number_unsigned()) {
      x = static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT32_MAX));
    } else if (v.is_number_integer()) {
      x = v.get<int64_t>();
    } else {
      OFFGEN_THROW(kInput, "{}: {}: expected an integer token id, got {}", file, path, quote(v));
    }
    OFFGEN_CHECK(x >= 0 && x < INT32_MAX, kInput, "{}: {}: token id {} is out of range", file, path,
                 x);
    return static_cast<int32_t>(x);
  }
};

// SentencePiece-style tokenizers (hf_tokenizer_spm.cpp): reads normalizer, pre_tokenizer and
// decoder into v's space_prefix, escape_spaces, splits, normalize_nf(k)c, strip_leading_space.
// v.byte_fallback must be set. Throws Error(kInput) naming the JSON path for anything else.
void read_spm_pipeline(const Doc& doc, const json& root, VocabData& v);

}  // namespace offgen::hf
