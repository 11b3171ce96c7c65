// safetensors reader (Hugging Face checkpoints): maps each file and validates the JSON header
// strictly (dtypes, shapes, offsets, fully indexed data); SafetensorsCheckpoint resolves names
// across the shards of a checkpoint directory. Errors name the file, tensor/field and offset.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/mapped_file.h"

namespace offgen {

struct SafetensorsTensor {
  std::string name;
  std::string dtype_name;         // as in the header: "F32", "BF16", "I64", ...
  std::optional<DType> dtype;     // kF32/kF16/kBF16 for the supported float types, else nullopt
  std::vector<int64_t> shape;     // header order: shape[0] outermost (PyTorch order)
  const uint8_t* data = nullptr;  // into the mapping (may be unaligned), valid while the file lives
  int64_t bytes = 0;
  int64_t file_offset = 0;  // absolute byte offset of `data` in the file
  int64_t n_elems() const;  // product of shape (1 for a scalar)
};

// Bytes per element of a safetensors dtype string ("F32" -> 4), or 0 when the name is unknown.
// Known: F64 F32 F16 BF16 I64 I32 I16 I8 U64 U32 U16 U8 BOOL F8_E4M3 F8_E5M2.
int64_t safetensors_dtype_size(std::string_view dtype_name);

// One .safetensors file. Move-only; owns the mapping when made by open(). Immutable after
// construction, so concurrent readers are safe.
class SafetensorsFile {
 public:
  // Maps and parses `path`. Throws offgen::Error: kIo when the file cannot be opened or mapped,
  // kInput when it is malformed (message names the path, tensor/field and byte offset).
  static SafetensorsFile open(const std::string& path);
  // Parses bytes owned by the caller (they must outlive the object); `name` is used in messages.
  static SafetensorsFile parse(std::span<const uint8_t> bytes, const std::string& name);

  SafetensorsFile(SafetensorsFile&&) noexcept = default;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile() = default;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // header order
  const SafetensorsTensor* find(const std::string& name) const;               // nullptr if absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t file_bytes() const { return bytes_.size(); }
  uint64_t data_offset() const { return data_offset_; }  // start of the data section (8 + N)
  void release_pages() const { map_.release_pages(); }  // MappedFile::release_pages
  // Bytes of the mapping read from the file (MappedFile::read_into); false when not in it.
  bool read_into(const void* at, size_t n, void* dst) const { return map_.read_into(at, n, dst); }

 private:
  SafetensorsFile() = default;
  void parse_all();

  std::string path_;
  std::span<const uint8_t> bytes_;
  MappedFile map_;  // empty when parse() was given the bytes
  uint64_t data_offset_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint directory: `model.safetensors`; else the shards listed by
// `model.safetensors.index.json` ({"metadata": {...}, "weight_map": {tensor: shard file}}); else
// every *.safetensors file in the directory. Tensor names must be unique across shards (a
// duplicate names both files); with an index, every entry must exist in the shard it names and
// every shard tensor must be listed. Move-only; tensor pointers stay valid while it lives.
class SafetensorsCheckpoint {
 public:
  // Throws kIo when the directory or a file cannot be read, kInput for malformed/inconsistent data.
  static SafetensorsCheckpoint open_dir(const std::string& dir);

  const SafetensorsTensor* find(const std::string& name) const;  // nullptr when absent
  const SafetensorsTensor& tensor(
      const std::string& name) const;      // throws kInput naming tensor+dir
  std::vector<std::string> names() const;  // sorted
  const std::string& dir() const { return dir_; }
  int64_t total_bytes() const { return total_bytes_; }  // sum of tensor bytes
  const std::vector<SafetensorsFile>& files() const { return files_; }
  // The shard holding `name` (throws like tensor() when absent).
  const SafetensorsFile& file_of(const std::string& name) const;

 private:
  SafetensorsCheckpoint() = default;
  void add_file(SafetensorsFile f);

  struct Entry {
    const SafetensorsTensor* tensor = nullptr;
    size_t file = 0;
  };
  std::string dir_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, Entry> index_;
  int64_t total_bytes_ = 0;
};

}  // namespace offgen
