// GGUF v3 writer (gguf_write.h).
#include "runtime/loaders/gguf_write.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/formats.h"
#include "runtime/loaders/gguf_vocab.h"
#include "runtime/loaders/gguf_convert.h"

namespace offgen {
namespace {

constexpr uint64_t kAlign = 32;  // GGUF's default general.alignment
// GGUF metadata value types (gguf.md).
enum : uint32_t { kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9 };

template <class T>
void put(std::vector<uint8_t>& b, const T& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), p, p + sizeof(T));
}
void put_str(std::vector<uint8_t>& b, const std::string& s) {
  put(b, static_cast<uint64_t>(s.size()));
  b.insert(b.end(), s.begin(), s.end());
}

uint64_t aligned(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

}  // namespace

void GgufMetadata::key(const std::string& k, uint32_t type) {
  put_str(bytes_, k);
  put(bytes_, type);
  ++count_;
}
void GgufMetadata::u32(const std::string& k, uint32_t v) { key(k, kU32), put(bytes_, v); }
void GgufMetadata::i32(const std::string& k, int32_t v) { key(k, kI32), put(bytes_, v); }
void GgufMetadata::f32(const std::string& k, float v) { key(k, kF32), put(bytes_, v); }
void GgufMetadata::boolean(const std::string& k, bool v) {
  key(k, kBool), put(bytes_, static_cast<uint8_t>(v));
}
void GgufMetadata::str(const std::string& k, const std::string& v) {
  key(k, kString), put_str(bytes_, v);
}
void GgufMetadata::strings(const std::string& k, const std::vector<std::string>& v) {
  key(k, kArray), put(bytes_, kString), put(bytes_, static_cast<uint64_t>(v.size()));
  for (const std::string& s : v) put_str(bytes_, s);
}
void GgufMetadata::f32s(const std::string& k, const std::vector<float>& v) {
  key(k, kArray), put(bytes_, kF32), put(bytes_, static_cast<uint64_t>(v.size()));
  for (float x : v) put(bytes_, x);
}
void GgufMetadata::i32s(const std::string& k, const std::vector<int32_t>& v) {
  key(k, kArray), put(bytes_, kI32), put(bytes_, static_cast<uint64_t>(v.size()));
  for (int32_t x : v) put(bytes_, x);
}
void GgufMetadata::bools(const std::string& k, const std::vector<uint8_t>& v) {
  key(k, kArray), put(bytes_, kBool), put(bytes_, static_cast<uint64_t>(v.size()));
  for (uint8_t x : v) put(bytes_, static_cast<uint8_t>(x != 0));
}

void add_tokenizer_metadata(GgufMetadata& kv, const VocabData& v) {
  const bool spm = v.model == "llama";
  kv.str("tokenizer.ggml.model", v.model);
  if (!spm && !v.pre.empty()) kv.str("tokenizer.ggml.pre", gguf_pre_name(v.pre));
  kv.strings("tokenizer.ggml.tokens", v.tokens);
  std::vector<int32_t> types = v.token_types;
  types.resize(v.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
  kv.i32s("tokenizer.ggml.token_type", types);
  if (spm) {
    std::vector<float> scores = v.scores;
    scores.resize(v.tokens.size(), 0.0f);
    kv.f32s("tokenizer.ggml.scores", scores);
  }
  // A BPE vocabulary always has the merges key (llama.cpp refuses one without it), even empty.
  if (!spm || !v.merges.empty()) kv.strings("tokenizer.ggml.merges", v.merges);
  auto id = [&kv](const char* key, int32_t value) {
    if (value >= 0) kv.u32(key, static_cast<uint32_t>(value));
  };
  id("tokenizer.ggml.bos_token_id", v.bos_id);
  id("tokenizer.ggml.eos_token_id", v.eos_id);
  id("tokenizer.ggml.unknown_token_id", v.unk_id);
  id("tokenizer.ggml.padding_token_id", v.pad_id);
  for (int32_t e : v.eog_ids)
    if (e != v.eos_id) {  // GGUF names one more end-of-generation token (end of turn)
      id("tokenizer.ggml.eot_token_id", e);
      break;
    }
  kv.boolean("tokenizer.ggml.add_bos_token", v.add_bos);
  kv.boolean("tokenizer.ggml.add_eos_token", v.add_eos);
  if (spm) kv.boolean("tokenizer.ggml.add_space_prefix", v.space_prefix != SpacePrefix::kNone);
  if (!v.chat_template.empty()) kv.str("tokenizer.chat_template", v.chat_template);
}

uint64_t write_gguf_file(const std::string& path, GgufMetadata kv,
                         const std::vector<GgufOutTensor>& tensors,
                         const std::function<void(const std::string&)>& check) {
  kv.u32("general.alignment", static_cast<uint32_t>(kAlign));
  std::vector<uint8_t> head;
  put(head, uint32_t{0x46554747u});  // "GGUF"
  put(head, uint32_t{3});
  put(head, static_cast<uint64_t>(tensors.size()));
  put(head, kv.count());
  head.insert(head.end(), kv.bytes().begin(), kv.bytes().end());
  // Tensor infos: name, dims (GGML order), GGML type, offset in the data section.
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const GgufOutTensor& t : tensors) {
    const int32_t ggml = format_traits(t.type).ggml_type;
    OFFGEN_CHECK(ggml != kNoGgmlType, kConfig, "{}: tensor {} is {}, which GGUF cannot hold", path,
                 t.name, dtype_name(t.type));
    int64_t n = 1;
    for (int64_t d : t.dims) n *= d;
    sizes.push_back(static_cast<uint64_t>(dtype_bytes(t.type, n)));
    put_str(head, t.name);
    put(head, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) put(head, static_cast<uint64_t>(d));
    put(head, static_cast<uint32_t>(ggml));
    put(head, offset);
    offset = aligned(offset + sizes.back());
  }
  head.resize(aligned(head.size()), 0);

  namespace fs = std::filesystem;
  const std::string tmp = path + ".partial";
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wb"), std::fclose);
  OFFGEN_CHECK(f != nullptr, kIo, "{}: cannot create ({})", tmp, std::strerror(errno));
  auto discard = [&]() {
    f.reset();
    std::error_code ec;
    fs::remove(tmp, ec);
  };
  auto write = [&](const void* p, size_t n) {
    if (std::fwrite(p, 1, n, f.get()) == n) return;
    const int err = errno;
    discard();
    OFFGEN_THROW(kIo, "{}: write failed ({})", tmp, std::strerror(err));
  };
  try {
    write(head.data(), head.size());
    const std::vector<uint8_t> zeros(kAlign, 0);
    std::vector<uint8_t> buf;
    for (size_t i = 0; i < tensors.size(); ++i) {
      buf.assign(sizes[i], 0);
      tensors[i].fill(buf.data());
      write(buf.data(), buf.size());
      write(zeros.data(), aligned(sizes[i]) - sizes[i]);
    }
    OFFGEN_CHECK(std::fflush(f.get()) == 0, kIo, "{}: write failed ({})", tmp,
                 std::strerror(errno));
    f.reset();
    if (check) check(tmp);
  } catch (...) {
    discard();
    throw;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) discard();
  OFFGEN_CHECK(!ec, kIo, "{}: cannot rename to {} ({})", tmp, path, ec.message());
  return head.size() + offset;
}

VocabData placeholder_spm_vocab(int64_t n) {
  OFFGEN_CHECK(n >= 259, kConfig, "a placeholder vocabulary needs at least 259 tokens, not {}", n);
  VocabData v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.token_types = {static_cast<int32_t>(TokenType::kUnknown),
                   static_cast<int32_t>(TokenType::kControl),
                   static_cast<int32_t>(TokenType::kControl)};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(fmt::format("<0x{:02X}>", b));
    v.token_types.push_back(static_cast<int32_t>(TokenType::kByte));
  }
  for (int64_t i = 259; i < n; ++i) {
    v.tokens.push_back(fmt::format("<dummy_{}>", i));
    v.token_types.push_back(static_cast<int32_t>(TokenType::kNormal));
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  v.unk_id = 0, v.bos_id = 1, v.eos_id = 2;
  v.add_bos = true;
  v.space_prefix = SpacePrefix::kEverySegment;  // llama.cpp's default for SentencePiece files
  v.strip_leading_space = true;
  return v;
}

uint64_t write_gguf(const std::string& path, const WeightSource& src, const VocabData& vocab) {
  return convert_to_gguf(src, vocab, path, WeightMode::native_mode()).file_bytes;
}

}  // namespace offgen
