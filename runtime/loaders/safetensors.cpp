// safetensors file parsing: the JSON header is read token by token (JsonReader, no DOM), so
// duplicate keys, unexpected keys and value types are rejected as they appear, with the offset of
// the token.
#include "runtime/loaders/safetensors.h"

#include <algorithm>
#include <array>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/core/json_reader.h"

namespace offgen {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation's limit
constexpr uint64_t kMaxElems = 1ull << 62;

struct DTypeInfo {
  std::string_view name;
  int64_t size;
  std::optional<DType> dtype;
};
constexpr DTypeInfo kDTypes[] = {
    {"F64", 8, std::nullopt},  {"F32", 4, DType::kF32},      {"F16", 2, DType::kF16},
    {"BF16", 2, DType::kBF16}, {"I64", 8, std::nullopt},     {"I32", 4, std::nullopt},
    {"I16", 2, std::nullopt},  {"I8", 1, std::nullopt},      {"U64", 8, std::nullopt},
    {"U32", 4, std::nullopt},  {"U16", 2, std::nullopt},     {"U8", 1, std::nullopt},
    {"BOOL", 1, std::nullopt}, {"F8_E4M3", 1, std::nullopt}, {"F8_E5M2", 1, std::nullopt},
};

const DTypeInfo* find_dtype(std::string_view name) {
  for (const DTypeInfo& d : kDTypes)
    if (d.name == name) return &d;
  return nullptr;
}

// One tensor entry as written in the header, before the offsets are checked against the data.
struct RawTensor {
  std::string name;
  const DTypeInfo* dtype = nullptr;
  std::vector<uint64_t> shape;
  std::vector<uint64_t> offsets;
  uint64_t at = 0;  // file offset of the entry's key
};

enum class Field { kDtype, kShape, kOffsets };
const char* field_name(Field f) {
  switch (f) {
    case Field::kDtype:
      return "dtype";
    case Field::kShape:
      return "shape";
    case Field::kOffsets:
      return "data_offsets";
  }
  return "?";
}

// Handler for the header grammar: {"__metadata__": {str: str}, name: {"dtype": str,
// "shape": [uint], "data_offsets": [uint, uint]}, ...}. Throws offgen::Error on the first problem.
class HeaderGrammar : public JsonHandler {
 public:
  HeaderGrammar(const std::string& file, const JsonReader& reader) : file_(file), reader_(reader) {}

  std::vector<RawTensor> tensors;
  std::map<std::string, std::string> metadata;

  void on_null() override { unexpected("null"); }
  void on_bool(bool) override { unexpected("a boolean"); }
  void on_int(int64_t v) override {
    if (v < 0) unexpected(fmt::format("the negative number {}", v));
    number(static_cast<uint64_t>(v));
  }
  void on_uint(uint64_t v) override { number(v); }
  void on_float(double, const std::string& s) override {
    unexpected(fmt::format("the non-integer number {}", s));
  }

  void on_string(std::string& s) override {
    if (st_ == St::kMetaValue) {
      metadata.emplace(meta_key_, std::move(s));
      st_ = St::kMeta;
      return;
    }
    if (st_ == St::kField && field_ == Field::kDtype) {
      cur_.dtype = find_dtype(s);
      if (!cur_.dtype)
        fail(
            fmt::format("tensor '{}': unknown dtype \"{}\" (known: F64 F32 F16 BF16 I64 I32 I16 I8 "
                        "U64 U32 U16 U8 BOOL F8_E4M3 F8_E5M2)",
                        cur_.name, s));
      st_ = St::kTensor;
      return;
    }
    unexpected(fmt::format("the string \"{}\"", s));
  }

  void on_begin_object() override {
    if (st_ == St::kTop) {
      st_ = St::kRoot;
    } else if (st_ == St::kRootValue && key_ == "__metadata__") {
      st_ = St::kMeta;
    } else if (st_ == St::kRootValue) {
      cur_ = RawTensor{};
      cur_.name = key_;
      cur_.at = key_at_;
      seen_ = {};
      st_ = St::kTensor;
    } else {
      unexpected("an object");
    }
  }

  // The reader found `k` twice in one object: the header itself, '__metadata__' or a tensor entry
  // (an unexpected key fails on its first appearance, so only dtype/shape/data_offsets get here).
  void on_duplicate_key(const std::string& k) override {
    if (st_ == St::kRoot) fail(fmt::format("duplicate key \"{}\" in the header", k));
    if (st_ == St::kMeta) fail(fmt::format("'__metadata__': duplicate key \"{}\"", k));
    fail(fmt::format("tensor '{}': duplicate key \"{}\"", cur_.name, k));
  }

  void on_key(std::string& k) override {
    if (st_ == St::kRoot) {
      key_at_ = pos();
      key_ = std::move(k);
      st_ = St::kRootValue;
    } else if (st_ == St::kMeta) {
      meta_key_ = std::move(k);
      st_ = St::kMetaValue;
    } else if (st_ == St::kTensor) {
      if (k == "dtype")
        field_ = Field::kDtype;
      else if (k == "shape")
        field_ = Field::kShape;
      else if (k == "data_offsets")
        field_ = Field::kOffsets;
      else
        fail(fmt::format("tensor '{}': unexpected key \"{}\" (allowed: dtype, shape, data_offsets)",
                         cur_.name, k));
      seen_[static_cast<int>(field_)] = true;
      st_ = St::kField;
    } else {
      fail(fmt::format("internal: unexpected key \"{}\"", k));
    }
  }

  void on_end_object() override {
    if (st_ == St::kTensor) {
      for (Field f : {Field::kDtype, Field::kShape, Field::kOffsets})
        if (!seen_[static_cast<int>(f)])
          fail(fmt::format("tensor '{}': missing key \"{}\"", cur_.name, field_name(f)));
      tensors.push_back(std::move(cur_));
      st_ = St::kRoot;
    } else if (st_ == St::kMeta) {
      st_ = St::kRoot;
    } else if (st_ == St::kRoot) {
      st_ = St::kDone;
    } else {
      fail("internal: unbalanced object");
    }
  }

  void on_begin_array() override {
    if (st_ != St::kField || field_ == Field::kDtype) unexpected("an array");
    st_ = St::kArray;
  }

  void on_end_array() override {
    if (st_ != St::kArray) fail("internal: unbalanced array");
    if (field_ == Field::kOffsets && cur_.offsets.size() != 2)
      fail(fmt::format("tensor '{}': data_offsets must have 2 entries [begin, end], got {}",
                       cur_.name, cur_.offsets.size()));
    st_ = St::kTensor;
  }

 private:
  enum class St { kTop, kRoot, kRootValue, kMeta, kMetaValue, kTensor, kField, kArray, kDone };

  uint64_t pos() const { return 8 + reader_.offset(); }
  [[noreturn]] void fail(const std::string& msg) const {
    OFFGEN_THROW(kInput, "{}: {} (header, near offset {})", file_, msg, pos());
  }

  void number(uint64_t v) {
    if (st_ != St::kArray) unexpected(fmt::format("the number {}", v));
    if (field_ == Field::kShape) {
      cur_.shape.push_back(v);
    } else {
      if (cur_.offsets.size() == 2)
        fail(fmt::format("tensor '{}': data_offsets has more than 2 entries", cur_.name));
      cur_.offsets.push_back(v);
    }
  }

  // A value of the wrong kind: the message says what was expected where.
  [[noreturn]] void unexpected(const std::string& what) const {
    switch (st_) {
      case St::kTop:
        fail(fmt::format("the header must be a JSON object, got {}", what));
      case St::kRootValue:
        if (key_ == "__metadata__")
          fail(fmt::format("'__metadata__' must be an object of strings, got {}", what));
        fail(fmt::format("tensor '{}': the entry must be an object, got {}", key_, what));
      case St::kMetaValue:
        fail(
            fmt::format("'__metadata__' key \"{}\" must map to a string, got {}", meta_key_, what));
      case St::kField:
        fail(fmt::format("tensor '{}': \"{}\" must be {}, got {}", cur_.name, field_name(field_),
                         field_ == Field::kDtype   ? "a string"
                         : field_ == Field::kShape ? "an array of non-negative integers"
                                                   : "an array of 2 non-negative integers",
                         what));
      case St::kArray:
        fail(fmt::format("tensor '{}': \"{}\" must hold non-negative integers, got {}", cur_.name,
                         field_name(field_), what));
      case St::kRoot:
      case St::kMeta:
      case St::kTensor:
      case St::kDone:
        break;
    }
    fail(fmt::format("internal: unexpected {}", what));
  }

  const std::string& file_;
  const JsonReader& reader_;
  St st_ = St::kTop;
  std::string key_, meta_key_;
  uint64_t key_at_ = 0;
  RawTensor cur_;
  Field field_ = Field::kDtype;
  std::array<bool, 3> seen_ = {};
};

}  // namespace

int64_t SafetensorsTensor::n_elems() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // checked against overflow when the header was parsed
  return n;
}

int64_t safetensors_dtype_size(std::string_view dtype_name) {
  const DTypeInfo* d = find_dtype(dtype_name);
  return d ? d->size : 0;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.map_ = MappedFile::open(path, "safetensors file");
  f.bytes_ = f.map_.bytes();
  f.parse_all();  // a file shorter than 8 bytes (empty ones too) is a kInput error there
  return f;
}

SafetensorsFile SafetensorsFile::parse(std::span<const uint8_t> bytes, const std::string& name) {
  SafetensorsFile f;
  f.path_ = name;
  f.bytes_ = bytes;
  f.parse_all();
  return f;
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::parse_all() {
  const uint64_t size = bytes_.size();
  OFFGEN_CHECK(size >= 8, kInput,
               "{}: file is {} bytes, shorter than the 8-byte header length (offset 0)", path_,
               size);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes_[i];  // little-endian u64
  OFFGEN_CHECK(n > 0, kInput, "{}: header length is 0 (offset 0)", path_);
  OFFGEN_CHECK(n <= size - 8, kInput,
               "{}: header length {} (offset 0) exceeds the {} bytes after it; truncated file?",
               path_, n, size - 8);
  OFFGEN_CHECK(n <= kMaxHeaderBytes, kInput, "{}: header length {} (offset 0) exceeds the {} limit",
               path_, n, kMaxHeaderBytes);
  const char* hdr = reinterpret_cast<const char*>(bytes_.data() + 8);
  OFFGEN_CHECK(hdr[0] == '{', kInput, "{}: the header must start with '{{' (offset 8)", path_);
  data_offset_ = 8 + n;
  const uint64_t data_size = size - data_offset_;

  JsonReader reader({hdr, n});
  HeaderGrammar sax(path_, reader);
  try {
    reader.read(sax);
  } catch (const JsonParseError& e) {  // the grammar's own errors are plain offgen::Errors
    const uint64_t at = 8 + (e.byte() > 0 ? e.byte() - 1 : 0);
    OFFGEN_THROW(kInput, "{}: header is not valid JSON at offset {}: {}", path_, at, e.detail());
  }

  tensors_.reserve(sax.tensors.size());
  for (const RawTensor& r : sax.tensors) {
    SafetensorsTensor t;
    t.name = r.name;
    t.dtype_name = std::string(r.dtype->name);
    t.dtype = r.dtype->dtype;
    uint64_t elems = 1;
    for (size_t d = 0; d < r.shape.size(); ++d) {
      if (r.shape[d] > kMaxElems || __builtin_mul_overflow(elems, r.shape[d], &elems) ||
          elems > kMaxElems)
        OFFGEN_THROW(kInput,
                     "{}: tensor '{}': shape dimension {} = {} overflows the element count "
                     "(limit 2^62) (header, near offset {})",
                     path_, r.name, d, r.shape[d], r.at);
      t.shape.push_back(static_cast<int64_t>(r.shape[d]));
    }
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(elems, static_cast<uint64_t>(r.dtype->size), &bytes))
      OFFGEN_THROW(kInput, "{}: tensor '{}': byte size overflows (header, near offset {})", path_,
                   r.name, r.at);
    const uint64_t b = r.offsets[0], e = r.offsets[1];
    OFFGEN_CHECK(b <= e && e <= data_size, kInput,
                 "{}: tensor '{}': data_offsets [{}, {}] must satisfy begin <= end <= {} (the data "
                 "section size) (header, near offset {})",
                 path_, r.name, b, e, data_size, r.at);
    OFFGEN_CHECK(
        e - b == bytes, kInput,
        "{}: tensor '{}': data_offsets [{}, {}] span {} bytes, but {} x {} elements need {} "
        "(header, near offset {})",
        path_, r.name, b, e, e - b, t.dtype_name, elems, bytes, r.at);
    t.bytes = static_cast<int64_t>(bytes);
    t.file_offset = static_cast<int64_t>(data_offset_ + b);
    t.data = bytes_.data() + data_offset_ + b;
    index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }
  metadata_ = std::move(sax.metadata);

  // The data section must be exactly tiled by the tensors: no overlap and no unindexed bytes.
  std::vector<size_t> order(tensors_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto begin_of = [&](size_t i) { return static_cast<uint64_t>(tensors_[i].file_offset); };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::pair(begin_of(a), tensors_[a].bytes) < std::pair(begin_of(b), tensors_[b].bytes);
  });
  uint64_t expect = data_offset_;
  const SafetensorsTensor* prev = nullptr;
  for (size_t i : order) {
    const SafetensorsTensor& t = tensors_[i];
    const uint64_t b = begin_of(i);
    OFFGEN_CHECK(
        b >= expect, kInput,
        "{}: tensor '{}' data at offsets [{}, {}) overlaps tensor '{}' ending at offset {}", path_,
        t.name, b, b + t.bytes, prev ? prev->name : "", expect);
    OFFGEN_CHECK(b == expect, kInput,
                 "{}: data section bytes at offsets [{}, {}) are not covered by any tensor (before "
                 "tensor '{}'); the buffer must be fully indexed",
                 path_, expect, b, t.name);
    expect = b + t.bytes;
    prev = &t;
  }
  OFFGEN_CHECK(
      expect == size, kInput,
      "{}: data section bytes at offsets [{}, {}) are not covered by any tensor (after the "
      "last one); the buffer must be fully indexed",
      path_, expect, size);
}

}  // namespace offgen
