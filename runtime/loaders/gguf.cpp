// GGUF parsing with bounds checks on every read.
#include "runtime/loaders/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/core/formats.h"

namespace offgen {
namespace {

constexpr uint64_t kMaxStringBytes = 1ull << 30;
constexpr uint32_t kMaxDims = 4;
// Counts come from the file, so reservations are capped: a corrupt count must fail on the read
// that runs out of bytes, not allocate gigabytes first.
constexpr uint64_t kMaxReserve = 1u << 16;

// Cursor over the file bytes; every read is bounds-checked and names what was being read.
class Cursor {
 public:
  Cursor(std::span<const uint8_t> b, const std::string& name) : b_(b), name_(name) {}
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return b_.size() - pos_; }

  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string(const std::string& what) {
    const uint64_t at = pos_;
    const uint64_t n = read<uint64_t>(what.c_str());
    OFFGEN_CHECK(n <= kMaxStringBytes && n <= remaining(), kInput,
                 "{}: {}: string length {} at offset {} exceeds the file ({} bytes left)", name_,
                 what, n, at, remaining());
    std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  void need(uint64_t n, const char* what) const {
    OFFGEN_CHECK(n <= remaining(), kInput,
                 "{}: truncated file: reading {} at offset {} needs {} bytes, {} left", name_, what,
                 pos_, n, remaining());
  }
  [[noreturn]] void fail(const std::string& msg, uint64_t at) const {
    OFFGEN_THROW(kInput, "{}: {} (offset {})", name_, msg, at);
  }

 private:
  std::span<const uint8_t> b_;
  const std::string& name_;
  uint64_t pos_ = 0;
};

uint64_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    case GgufType::kString: return 8;  // at least the length prefix
    case GgufType::kArray: return 12;  // at least type + count
  }
  return 1;
}

bool valid_type(uint32_t t) { return t <= 12; }

double read_scalar(Cursor& c, GgufType t, const std::string& key) {
  const char* w = key.c_str();
  switch (t) {
    case GgufType::kU8: return c.read<uint8_t>(w);
    case GgufType::kI8: return c.read<int8_t>(w);
    case GgufType::kU16: return c.read<uint16_t>(w);
    case GgufType::kI16: return c.read<int16_t>(w);
    case GgufType::kU32: return c.read<uint32_t>(w);
    case GgufType::kI32: return c.read<int32_t>(w);
    case GgufType::kF32: return c.read<float>(w);
    case GgufType::kBool: return c.read<uint8_t>(w) != 0;
    case GgufType::kU64: return static_cast<double>(c.read<uint64_t>(w));
    case GgufType::kI64: return static_cast<double>(c.read<int64_t>(w));
    case GgufType::kF64: return c.read<double>(w);
    case GgufType::kString: case GgufType::kArray: break;
  }
  c.fail("internal: not a scalar type for " + key, c.pos());
}

void read_value(Cursor& c, GgufType t, const std::string& key, GgufValue& out, int depth) {
  out.type = t;
  if (t == GgufType::kString) {
    out.str = c.read_string(key);
    return;
  }
  if (t != GgufType::kArray) {
    out.num = read_scalar(c, t, key);
    return;
  }
  const uint64_t at = c.pos();
  const uint32_t et = c.read<uint32_t>((key + " array type").c_str());
  if (!valid_type(et)) c.fail(fmt::format("metadata '{}': unknown array element type {}", key, et), at);
  const uint64_t n = c.read<uint64_t>((key + " array count").c_str());
  out.elem_type = static_cast<GgufType>(et);
  out.count = n;
  if (n > c.remaining() / scalar_size(out.elem_type))
    c.fail(fmt::format("metadata '{}': array of {} elements cannot fit in the {} bytes left", key, n,
                       c.remaining()),
           at);
  if (out.elem_type == GgufType::kString) {
    out.strs.reserve(std::min(n, kMaxReserve));
    for (uint64_t i = 0; i < n; ++i) out.strs.push_back(c.read_string(fmt::format("{}[{}]", key, i)));
  } else if (out.elem_type == GgufType::kArray) {
    if (depth > 4) c.fail(fmt::format("metadata '{}': arrays nested too deeply", key), at);
    GgufValue inner;
    for (uint64_t i = 0; i < n; ++i) read_value(c, GgufType::kArray, key, inner, depth + 1);
  } else {
    out.nums.reserve(std::min(n, kMaxReserve));
    for (uint64_t i = 0; i < n; ++i) out.nums.push_back(read_scalar(c, out.elem_type, key));
  }
}

DType tensor_dtype(uint32_t t, const std::string& tensor, Cursor& c, uint64_t at) {
  if (const FormatTraits* f = format_from_ggml_type(t)) return f->type;
  c.fail(fmt::format("tensor '{}': unsupported ggml type {} (supported: {})", tensor, t,
                     supported_ggml_types()),
         at);
}

bool is_integer_type(GgufType t) {
  return t == GgufType::kU8 || t == GgufType::kI8 || t == GgufType::kU16 || t == GgufType::kI16 ||
         t == GgufType::kU32 || t == GgufType::kI32 || t == GgufType::kU64 || t == GgufType::kI64;
}

// Refuses tensors whose data ranges share a byte (a damaged or crafted file: one tensor's bytes
// would be read as another's), naming both.
void check_no_overlap(const std::vector<GgufTensor>& tensors, uint64_t data_start,
                      const std::string& path) {
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
  // Sorted by offset, the ranges are disjoint exactly when each starts at or after the end of
  // the one before.
  for (size_t k = 1; k < order.size(); ++k) {
    const GgufTensor& a = tensors[order[k - 1]];
    const GgufTensor& b = tensors[order[k]];
    if (b.offset < a.offset + static_cast<uint64_t>(a.bytes))
      OFFGEN_THROW(kInput,
                   "{}: tensors '{}' (data [{}, {})) and '{}' (data [{}, {})) overlap; the file "
                   "is damaged",
                   path, a.name, data_start + a.offset, data_start + a.offset + a.bytes, b.name,
                   data_start + b.offset, data_start + b.offset + b.bytes);
  }
}

}  // namespace

GgufFile GgufFile::open(const std::string& path) { return open_impl(path, false); }
GgufFile GgufFile::open_metadata(const std::string& path) { return open_impl(path, true); }

GgufFile GgufFile::open_impl(const std::string& path, bool metadata_only) {
  GgufFile f;
  f.path_ = path;
  f.map_ = MappedFile::open(path, "model file");
  OFFGEN_CHECK(f.map_.size() > 0, kInput, "{}: empty file, not a GGUF model", path);
  f.bytes_ = f.map_.bytes();
  f.parse_all(metadata_only);
  return f;
}

GgufFile GgufFile::parse(std::span<const uint8_t> bytes, const std::string& name) {
  GgufFile f;
  f.path_ = name;
  f.bytes_ = bytes;
  f.parse_all();
  return f;
}

void GgufFile::parse_all(bool metadata_only) {
  Cursor c(bytes_, path_);
  const uint32_t magic = c.read<uint32_t>("magic");
  if (magic != 0x46554747u) c.fail("not a GGUF file (bad magic)", 0);
  version_ = c.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3)
    c.fail(fmt::format("unsupported GGUF version {} (supported: 2, 3)", version_), 4);
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  if (n_kv > c.remaining() / 12) c.fail(fmt::format("metadata count {} exceeds the file", n_kv), 16);
  if (n_tensors > c.remaining() / 24)
    c.fail(fmt::format("tensor count {} exceeds the file", n_tensors), 8);

  uint64_t alignment_at = 0;
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t at = c.pos();
    std::string key = c.read_string(fmt::format("metadata key #{}", i));
    const uint32_t t = c.read<uint32_t>("metadata value type");
    if (!valid_type(t)) c.fail(fmt::format("metadata '{}': unknown value type {}", key, t), at);
    GgufValue v;
    read_value(c, static_cast<GgufType>(t), key, v, 0);
    if (kv_.count(key)) c.fail(fmt::format("duplicate metadata key '{}'", key), at);
    if (key == "general.alignment") alignment_at = at;
    kv_.emplace(std::move(key), std::move(v));
  }

  uint64_t alignment = 32;
  if (const auto* a = find("general.alignment")) {
    if (!is_integer_type(a->type) || a->num <= 0 || a->num > (1 << 20) ||
        (static_cast<uint64_t>(a->num) & (static_cast<uint64_t>(a->num) - 1)) != 0)
      c.fail(fmt::format("metadata 'general.alignment' = {} must be an integer power of two up to "
                         "1 MiB",
                         a->type == GgufType::kString ? a->str : fmt::format("{}", a->num)),
             alignment_at);
    alignment = static_cast<uint64_t>(a->num);
  }
  if (metadata_only) return;

  tensors_.reserve(std::min(n_tensors, kMaxReserve));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t at = c.pos();
    GgufTensor t;
    t.name = c.read_string(fmt::format("tensor #{} name", i));
    const uint32_t nd = c.read<uint32_t>("tensor dims count");
    if (nd == 0 || nd > kMaxDims)
      c.fail(fmt::format("tensor '{}': {} dimensions (1..{} allowed)", t.name, nd, kMaxDims), at);
    int64_t n = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t e = c.read<uint64_t>("tensor dim");
      if (e == 0 || e > (1ull << 40) ||
          static_cast<uint64_t>(n) > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / e)
        c.fail(fmt::format("tensor '{}': dimension {} = {} is invalid or overflows", t.name, d, e), at);
      t.dims.push_back(static_cast<int64_t>(e));
      n *= static_cast<int64_t>(e);
    }
    t.n_elems = n;
    const uint32_t ty = c.read<uint32_t>("tensor type");
    t.dtype = tensor_dtype(ty, t.name, c, at);
    t.offset = c.read<uint64_t>("tensor offset");
    const int64_t block = dtype_block_elems(t.dtype);
    if (t.dims[0] % block != 0)
      c.fail(fmt::format("tensor '{}': row length {} is not a multiple of the {} block size {}",
                         t.name, t.dims[0], dtype_name(t.dtype), block),
             at);
    if (n / block > std::numeric_limits<int64_t>::max() / dtype_block_bytes(t.dtype))
      c.fail(fmt::format("tensor '{}': byte size overflows", t.name), at);
    t.bytes = dtype_bytes(t.dtype, n);
    if (t.offset % alignment != 0)
      c.fail(fmt::format("tensor '{}': data offset {} is not aligned to {}", t.name, t.offset,
                         alignment),
             at);
    if (tensor_index_.count(t.name)) c.fail(fmt::format("duplicate tensor '{}'", t.name), at);
    tensor_index_[t.name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }

  const uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
  if (n_tensors > 0 && data_start > bytes_.size())
    c.fail("tensor data section starts past the end of the file", c.pos());
  for (auto& t : tensors_) {
    const uint64_t avail = bytes_.size() - std::min<uint64_t>(data_start, bytes_.size());
    if (t.offset > avail || static_cast<uint64_t>(t.bytes) > avail - t.offset)
      OFFGEN_THROW(kInput,
                   "{}: tensor '{}' data [{}, {}) lies outside the file ({} bytes; truncated?)",
                   path_, t.name, data_start + t.offset, data_start + t.offset + t.bytes,
                   bytes_.size());
    t.data = bytes_.data() + data_start + t.offset;
  }
  check_no_overlap(tensors_, data_start, path_);
}

void GgufFile::release_arrays() {
  for (auto& [key, v] : kv_) {
    std::vector<double>().swap(v.nums);
    std::vector<std::string>().swap(v.strs);
  }
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(const std::string& name) const {
  const auto* t = find_tensor(name);
  OFFGEN_CHECK(t != nullptr, kInput, "{}: tensor '{}' is missing", path_, name);
  return *t;
}

std::optional<int64_t> GgufFile::get_int_opt(const std::string& key) const {
  const auto* v = find(key);
  if (!v) return std::nullopt;
  OFFGEN_CHECK(is_integer_type(v->type), kInput, "{}: metadata '{}' should be an integer", path_, key);
  // A u64 above 2^63 would make the conversion undefined.
  OFFGEN_CHECK(v->num >= -0x1p63 && v->num < 0x1p63, kInput,
               "{}: metadata '{}' = {} does not fit a signed 64-bit integer", path_, key, v->num);
  return static_cast<int64_t>(v->num);
}

int64_t GgufFile::get_int(const std::string& key) const {
  auto v = get_int_opt(key);
  OFFGEN_CHECK(v.has_value(), kInput, "{}: required metadata '{}' is missing", path_, key);
  return *v;
}

std::optional<double> GgufFile::get_float_opt(const std::string& key) const {
  const auto* v = find(key);
  if (!v) return std::nullopt;
  OFFGEN_CHECK(v->type == GgufType::kF32 || v->type == GgufType::kF64 || is_integer_type(v->type),
               kInput, "{}: metadata '{}' should be a number", path_, key);
  return v->num;
}

double GgufFile::get_float(const std::string& key) const {
  auto v = get_float_opt(key);
  OFFGEN_CHECK(v.has_value(), kInput, "{}: required metadata '{}' is missing", path_, key);
  return *v;
}

std::optional<std::string> GgufFile::get_string_opt(const std::string& key) const {
  const auto* v = find(key);
  if (!v) return std::nullopt;
  OFFGEN_CHECK(v->type == GgufType::kString, kInput, "{}: metadata '{}' should be a string", path_,
               key);
  return v->str;
}

std::string GgufFile::get_string(const std::string& key) const {
  auto v = get_string_opt(key);
  OFFGEN_CHECK(v.has_value(), kInput, "{}: required metadata '{}' is missing", path_, key);
  return *v;
}

bool GgufFile::get_bool_or(const std::string& key, bool fallback) const {
  const auto* v = find(key);
  if (!v) return fallback;
  OFFGEN_CHECK(v->type == GgufType::kBool, kInput, "{}: metadata '{}' should be a bool", path_, key);
  return v->num != 0;
}

}  // namespace offgen
