// GGUF (v2/v3) reader: memory-maps the file, parses metadata and the tensor table with strict bounds
// checks on every count, offset and size; errors name the field/tensor and byte offset.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/mapped_file.h"

namespace offgen {

enum class GgufType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// One metadata value. Scalars land in `num` (integers exactly representable up to 2^53) or `str`;
// arrays of scalars in `nums`, arrays of strings in `strs` (nested arrays are counted only).
struct GgufValue {
  GgufType type = GgufType::kU8;
  GgufType elem_type = GgufType::kU8;  // for arrays
  double num = 0;
  std::string str;
  std::vector<double> nums;
  std::vector<std::string> strs;
  uint64_t count = 0;  // array length
};

struct GgufTensor {
  std::string name;
  std::vector<int64_t> dims;  // GGML order: dims[0] is the contiguous (innermost) extent
  DType dtype = DType::kF32;
  uint64_t offset = 0;        // relative to the data section
  int64_t n_elems = 0;
  int64_t bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping; valid while the GgufFile lives
  int64_t rows() const { return n_elems / dims[0]; }
};

class GgufFile {
 public:
  // Maps and parses `path`. Throws offgen::Error (kIo for open/map failures, kInput for a
  // malformed file) with the path, field and offset. The mapping lives as long as the object.
  static GgufFile open(const std::string& path);
  // The same, reading the header and metadata only: tensors() is empty and tensor types the
  // loader does not know are not looked at (e.g. to read a tokenizer's vocabulary).
  static GgufFile open_metadata(const std::string& path);
  // Parses bytes owned by the caller (must outlive the object); `name` is used in messages.
  static GgufFile parse(std::span<const uint8_t> bytes, const std::string& name);

  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;
  ~GgufFile() = default;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t file_bytes() const { return bytes_.size(); }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const std::vector<GgufTensor>& tensors() const { return tensors_; }

  const GgufValue* find(const std::string& key) const;
  const GgufTensor* find_tensor(const std::string& name) const;
  // Typed getters: throw kInput naming the key when missing (required) or of the wrong type.
  int64_t get_int(const std::string& key) const;
  std::optional<int64_t> get_int_opt(const std::string& key) const;
  double get_float(const std::string& key) const;
  std::optional<double> get_float_opt(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  std::optional<std::string> get_string_opt(const std::string& key) const;
  bool get_bool_or(const std::string& key, bool fallback) const;
  const GgufTensor& tensor(const std::string& name) const;  // throws kInput when missing
  // The file's pages out of the resident set (MappedFile::release_pages).
  void release_pages() const { map_.release_pages(); }
  // Bytes of the mapping read from the file (MappedFile::read_into); false when not in it.
  bool read_into(const void* at, size_t n, void* dst) const { return map_.read_into(at, n, dst); }
  // Frees the elements of array values (a tokenizer's vocabulary, scores and merges: tens of MiB
  // for a large vocabulary) once they have been read; their keys, types and counts stay.
  void release_arrays();

 private:
  GgufFile() = default;
  static GgufFile open_impl(const std::string& path, bool metadata_only);
  void parse_all(bool metadata_only = false);

  std::string path_;
  uint32_t version_ = 0;
  std::span<const uint8_t> bytes_;
  MappedFile map_;  // empty when parse() was given the bytes
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace offgen
