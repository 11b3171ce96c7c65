// Tiny in-memory GGUF v3 writer for tests and the fuzz seed corpus: metadata + tensors in, file
// bytes out, plus the byte offsets of every field so tests can corrupt one precisely.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace offgen::test {

// GGUF metadata value type ids (gguf.md).
enum : uint32_t {
  kGgufU8 = 0,
  kGgufI8 = 1,
  kGgufU16 = 2,
  kGgufI16 = 3,
  kGgufU32 = 4,
  kGgufI32 = 5,
  kGgufF32 = 6,
  kGgufBool = 7,
  kGgufString = 8,
  kGgufArray = 9,
  kGgufU64 = 10,
  kGgufI64 = 11,
  kGgufF64 = 12,
};
// ggml tensor type ids.
enum : uint32_t {
  kGgmlF32 = 0,
  kGgmlF16 = 1,
  kGgmlQ4_0 = 2,
  kGgmlQ4_1 = 3,
  kGgmlQ5_0 = 6,
  kGgmlQ5_1 = 7,
  kGgmlQ8_0 = 8,
  kGgmlQ2_K = 10,
  kGgmlQ3_K = 11,
  kGgmlQ4_K = 12,
  kGgmlQ5_K = 13,
  kGgmlQ6_K = 14,
  kGgmlQ8_K = 15,
  kGgmlIQ2_XXS = 16,  // not read by offgen
  kGgmlIQ4_NL = 20,
  kGgmlIQ4_XS = 23,
  kGgmlBF16 = 30,
};

// Where each piece landed in the built file (absolute byte offsets).
struct GgufLayout {
  struct Kv {
    std::string key;
    size_t begin = 0;     // the key's length prefix
    size_t type_at = 0;   // the u32 value type
    size_t value_at = 0;  // first byte of the value (array: its element type)
  };
  struct TensorInfo {
    std::string name;
    size_t begin = 0;  // the name's length prefix
    size_t n_dims_at = 0;
    size_t dims_at = 0;  // first u64 dim
    size_t type_at = 0;
    size_t offset_at = 0;
    uint64_t offset = 0;  // relative to the data section
    size_t data_at = 0;   // absolute
  };
  size_t tensor_count_at = 8;
  size_t kv_count_at = 16;
  std::vector<Kv> kvs;
  std::vector<TensorInfo> tensors;
  size_t data_start = 0;
  uint64_t alignment = 32;
};

class GgufWriter {
 public:
  GgufWriter& version(uint32_t v) {
    version_ = v;
    return *this;
  }

  GgufWriter& add_string(const std::string& key, const std::string& v) {
    Bytes b;
    put_str(b, v);
    return add_raw(key, kGgufString, b);
  }
  GgufWriter& add_u32(const std::string& key, uint32_t v) {
    if (key == "general.alignment" && v != 0 && (v & (v - 1)) == 0) alignment_ = v;
    return add_raw(key, kGgufU32, pod(v));
  }
  GgufWriter& add_i32(const std::string& key, int32_t v) { return add_raw(key, kGgufI32, pod(v)); }
  GgufWriter& add_u64(const std::string& key, uint64_t v) { return add_raw(key, kGgufU64, pod(v)); }
  GgufWriter& add_f32(const std::string& key, float v) { return add_raw(key, kGgufF32, pod(v)); }
  GgufWriter& add_bool(const std::string& key, bool v) {
    return add_raw(key, kGgufBool, Bytes{static_cast<uint8_t>(v ? 1 : 0)});
  }
  GgufWriter& add_string_array(const std::string& key, const std::vector<std::string>& v) {
    Bytes b = pod(kGgufString);
    append(b, pod(static_cast<uint64_t>(v.size())));
    for (const auto& s : v) put_str(b, s);
    return add_raw(key, kGgufArray, b);
  }
  GgufWriter& add_i32_array(const std::string& key, const std::vector<int32_t>& v) {
    Bytes b = pod(kGgufI32);
    append(b, pod(static_cast<uint64_t>(v.size())));
    for (int32_t x : v) append(b, pod(x));
    return add_raw(key, kGgufArray, b);
  }
  GgufWriter& add_f32_array(const std::string& key, const std::vector<float>& v) {
    Bytes b = pod(kGgufF32);
    append(b, pod(static_cast<uint64_t>(v.size())));
    for (float x : v) append(b, pod(x));
    return add_raw(key, kGgufArray, b);
  }
  // Any value: `type` is written as the u32 type id and `value` verbatim after it.
  GgufWriter& add_raw(const std::string& key, uint32_t type, const std::vector<uint8_t>& value) {
    kvs_.push_back({key, type, value});
    return *this;
  }

  // dims in GGML order (dims[0] innermost); `data` is stored at the next aligned offset unless
  // `offset_override` (relative to the data section) is given, which is written verbatim.
  GgufWriter& add_tensor(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type,
                         const std::vector<uint8_t>& data, int64_t offset_override = -1) {
    tensors_.push_back({name, dims, type, data, offset_override});
    return *this;
  }

  std::vector<uint8_t> build(GgufLayout* layout_out = nullptr) const {
    GgufLayout L;
    L.alignment = alignment_;
    Bytes b;
    append(b, pod(uint32_t{0x46554747u}));  // "GGUF"
    append(b, pod(version_));
    append(b, pod(static_cast<uint64_t>(tensors_.size())));
    append(b, pod(static_cast<uint64_t>(kvs_.size())));
    for (const auto& kv : kvs_) {
      GgufLayout::Kv k;
      k.key = kv.key;
      k.begin = b.size();
      put_str(b, kv.key);
      k.type_at = b.size();
      append(b, pod(kv.type));
      k.value_at = b.size();
      append(b, kv.value);
      L.kvs.push_back(k);
    }
    // Data offsets: each tensor at the next multiple of the alignment.
    uint64_t next = 0;
    std::vector<uint64_t> offsets;
    for (const auto& t : tensors_) {
      offsets.push_back(next);
      next = align(next + t.data.size());
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      GgufLayout::TensorInfo ti;
      ti.name = t.name;
      ti.begin = b.size();
      put_str(b, t.name);
      ti.n_dims_at = b.size();
      append(b, pod(static_cast<uint32_t>(t.dims.size())));
      ti.dims_at = b.size();
      for (uint64_t d : t.dims) append(b, pod(d));
      ti.type_at = b.size();
      append(b, pod(t.type));
      ti.offset_at = b.size();
      ti.offset = t.offset_override >= 0 ? static_cast<uint64_t>(t.offset_override) : offsets[i];
      append(b, pod(ti.offset));
      L.tensors.push_back(ti);
    }
    L.data_start = align(b.size());
    b.resize(L.data_start, 0);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      b.resize(L.data_start + offsets[i], 0);
      L.tensors[i].data_at = L.data_start + L.tensors[i].offset;
      append(b, tensors_[i].data);
    }
    if (layout_out) *layout_out = std::move(L);
    return b;
  }

  // Little-endian bytes of a trivially copyable value.
  template <class T>
  static std::vector<uint8_t> pod(const T& v) {
    std::vector<uint8_t> b(sizeof(T));
    std::memcpy(b.data(), &v, sizeof(T));
    return b;
  }
  // Overwrites sizeof(T) bytes at `at`.
  template <class T>
  static void patch(std::vector<uint8_t>& file, size_t at, const T& v) {
    std::memcpy(file.data() + at, &v, sizeof(T));
  }

 private:
  using Bytes = std::vector<uint8_t>;
  struct KvEntry {
    std::string key;
    uint32_t type;
    Bytes value;
  };
  struct TensorEntry {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    Bytes data;
    int64_t offset_override;
  };

  static void append(Bytes& b, const Bytes& x) { b.insert(b.end(), x.begin(), x.end()); }
  static void put_str(Bytes& b, const std::string& s) {
    append(b, pod(static_cast<uint64_t>(s.size())));
    b.insert(b.end(), s.begin(), s.end());
  }
  uint64_t align(uint64_t x) const { return (x + alignment_ - 1) / alignment_ * alignment_; }

  uint32_t version_ = 3;
  uint64_t alignment_ = 32;
  std::vector<KvEntry> kvs_;
  std::vector<TensorEntry> tensors_;
};

}  // namespace offgen::test
