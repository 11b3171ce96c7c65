// SafetensorsCheckpoint: resolves a Hugging Face checkpoint directory (single file, indexed shards,
// or every *.safetensors file) into one name -> tensor table, checking the index against the
// shards.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/core/json_reader.h"
#include "runtime/loaders/hf_json.h"
#include "runtime/loaders/safetensors.h"

namespace offgen {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Shard names in an index are paths relative to the checkpoint directory and must stay inside it.
bool safe_relative(const std::string& s) {
  if (s.empty()) return false;
  const fs::path p(s);
  if (p.is_absolute() || p.has_root_name()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return true;
}

}  // namespace

void SafetensorsCheckpoint::add_file(SafetensorsFile f) {
  for (const SafetensorsTensor& t : f.tensors()) {
    auto it = index_.find(t.name);
    OFFGEN_CHECK(it == index_.end(), kInput, "{}: tensor '{}' appears in both {} and {}", dir_,
                 t.name, it == index_.end() ? "" : files_[it->second.file].path(), f.path());
  }
  files_.push_back(std::move(f));
  for (const SafetensorsTensor& t : files_.back().tensors()) {
    index_.emplace(t.name, Entry{&t, files_.size() - 1});
    total_bytes_ += t.bytes;
  }
}

SafetensorsCheckpoint SafetensorsCheckpoint::open_dir(const std::string& dir) {
  SafetensorsCheckpoint c;
  c.dir_ = dir;
  std::error_code ec;
  OFFGEN_CHECK(fs::is_directory(dir, ec), kIo,
               "{}: not a directory (expected a safetensors "
               "checkpoint directory)",
               dir);
  const fs::path root(dir);
  const fs::path single = root / "model.safetensors";
  const fs::path index_path = root / "model.safetensors.index.json";

  if (fs::exists(single, ec)) {
    c.add_file(SafetensorsFile::open(single.string()));
    return c;
  }

  if (!fs::exists(index_path, ec)) {
    std::vector<std::string> found;
    for (const auto& e : fs::directory_iterator(root, ec))
      if (e.is_regular_file(ec) && e.path().extension() == ".safetensors")
        found.push_back(e.path().string());
    OFFGEN_CHECK(!ec, kIo, "{}: cannot list directory: {}", dir, ec.message());
    OFFGEN_CHECK(!found.empty(), kInput,
                 "{}: no model.safetensors, model.safetensors.index.json "
                 "or *.safetensors file",
                 dir);
    std::sort(found.begin(), found.end());
    for (const auto& p : found) c.add_file(SafetensorsFile::open(p));
    return c;
  }

  // Indexed shards: {"metadata": {...}, "weight_map": {tensor: shard}}.
  const std::string ipath = index_path.string();
  // Keys given twice refused (nlohmann would silently keep the last one); the shape is checked
  // below.
  const json idx = hf::parse_json(hf::read_text_file(ipath), ipath, true, false);
  static const json kAbsent;
  const json& wm = idx.is_object() && idx.contains("weight_map") ? idx["weight_map"] : kAbsent;
  std::map<std::string, std::string> first_tensor;  // shard -> a tensor naming it (for messages)
  try {  // shape errors: "<index>: <field> must be <what it expects>"
    json_object(idx, "", "a JSON object");
    if (idx.contains("metadata")) json_object(idx["metadata"], "\"metadata\"");
    json_object(wm, "\"weight_map\"", "an object of tensor name -> shard file");
    for (const auto& [name, shard] : wm.items()) {
      const std::string& s =
          json_string(shard, fmt::format("weight_map[\"{}\"]", name), "a shard file name");
      OFFGEN_CHECK(safe_relative(s), kInput,
                   "{}: weight_map[\"{}\"] = \"{}\" must be a relative path inside the directory",
                   ipath, name, s);
      first_tensor.emplace(s, name);
    }
  } catch (const JsonFieldError& e) {
    OFFGEN_THROW(kInput, "{}: {}{}must be {}", ipath, e.field(), e.field().empty() ? "" : " ",
                 e.expected());
  }
  OFFGEN_CHECK(!wm.empty(), kInput, "{}: \"weight_map\" is empty", ipath);
  for (const auto& [shard, tensor] : first_tensor) {
    const fs::path p = root / shard;
    OFFGEN_CHECK(fs::is_regular_file(p, ec), kInput,
                 "{}: shard \"{}\" (named for tensor '{}') does not exist: {}", ipath, shard,
                 tensor, p.string());
    c.add_file(SafetensorsFile::open(p.string()));
  }
  for (const auto& [name, shard] : wm.items()) {
    const std::string& s = shard.get_ref<const std::string&>();
    auto it = c.index_.find(name);
    OFFGEN_CHECK(it != c.index_.end(), kInput,
                 "{}: tensor '{}' is mapped to shard \"{}\", which has no such tensor", ipath, name,
                 s);
    const std::string& holder = c.files_[it->second.file].path();
    OFFGEN_CHECK(holder == (root / s).string(), kInput,
                 "{}: tensor '{}' is mapped to shard \"{}\", but it is in {}", ipath, name, s,
                 holder);
  }
  for (const auto& [name, e] : c.index_)
    OFFGEN_CHECK(wm.contains(name), kInput,
                 "{}: tensor '{}' in shard {} is not listed in the index", ipath, name,
                 c.files_[e.file].path());
  return c;
}

const SafetensorsTensor* SafetensorsCheckpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second.tensor;
}

const SafetensorsTensor& SafetensorsCheckpoint::tensor(const std::string& name) const {
  const SafetensorsTensor* t = find(name);
  OFFGEN_CHECK(t != nullptr, kInput, "{}: tensor '{}' is not in the checkpoint", dir_, name);
  return *t;
}

const SafetensorsFile& SafetensorsCheckpoint::file_of(const std::string& name) const {
  auto it = index_.find(name);
  OFFGEN_CHECK(it != index_.end(), kInput, "{}: tensor '{}' is not in the checkpoint", dir_, name);
  return files_[it->second.file];
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& kv : index_) out.push_back(kv.first);
  return out;
}

}  // namespace offgen
