// GGUF v3 writer for Llama-architecture weight sources (gguf_write.h).
#include "runtime/loaders/gguf_write.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/formats.h"
#include "runtime/model/tensor_table.h"

namespace offgen {
namespace {

constexpr uint64_t kAlign = 32;  // GGUF's default general.alignment
// GGUF metadata value types (gguf.md).
enum : uint32_t { kU32 = 4, kI32 = 5, kF32 = 6, kString = 8, kArray = 9 };

class Header {
 public:
  void u32(uint32_t v) { pod(v); }
  void u64(uint64_t v) { pod(v); }
  void str(const std::string& s) {
    u64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  // The metadata count field: written as 0 by begin(), set by finish_kvs().
  void begin(uint64_t n_tensors) { u32(0x46554747u), u32(3), u64(n_tensors), u64(0); }  // "GGUF"
  void finish_kvs() { std::memcpy(bytes_.data() + 16, &kvs_, sizeof kvs_); }
  void kv_u32(const std::string& k, uint32_t v) { key(k, kU32), u32(v); }
  void kv_f32(const std::string& k, float v) { key(k, kF32), pod(v); }
  void kv_str(const std::string& k, const std::string& v) { key(k, kString), str(v); }
  void kv_strings(const std::string& k, const std::vector<std::string>& v) {
    key(k, kArray), u32(kString), u64(v.size());
    for (const auto& s : v) str(s);
  }
  template <class T>
  void kv_array(const std::string& k, uint32_t type, const std::vector<T>& v) {
    key(k, kArray), u32(type), u64(v.size());
    for (const T& x : v) pod(x);
  }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  template <class T>
  void pod(const T& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    bytes_.insert(bytes_.end(), p, p + sizeof(T));
  }
  void key(const std::string& k, uint32_t type) { str(k), u32(type), ++kvs_; }
  std::vector<uint8_t> bytes_;
  uint64_t kvs_ = 0;
};

uint64_t aligned(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

}  // namespace

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
  return v;
}

uint64_t write_gguf(const std::string& path, const WeightSource& src, const VocabData& vocab) {
  const ModelConfig& c = src.config();
  OFFGEN_CHECK(c.arch == "llama" && c.pre_norm && c.final_norm && c.sliding_window == 0, kConfig,
               "{}: write_gguf writes Llama-architecture models only (this one is '{}')",
               src.describe(), c.arch);
  OFFGEN_CHECK(static_cast<int64_t>(vocab.tokens.size()) == c.vocab_size, kConfig,
               "{}: vocabulary of {} tokens for a model of {}", src.describe(), vocab.tokens.size(),
               c.vocab_size);
  const std::vector<TensorSpec> specs = model_tensors(c);
  Header h;
  h.begin(specs.size());
  h.kv_str("general.architecture", "llama");
  h.kv_str("general.name", src.describe());
  h.kv_u32("llama.context_length", static_cast<uint32_t>(c.context_length));
  h.kv_u32("llama.embedding_length", static_cast<uint32_t>(c.d_model));
  h.kv_u32("llama.block_count", static_cast<uint32_t>(c.n_layers));
  h.kv_u32("llama.feed_forward_length", static_cast<uint32_t>(c.ffn_dim));
  h.kv_u32("llama.rope.dimension_count", static_cast<uint32_t>(c.head_dim));
  h.kv_u32("llama.attention.head_count", static_cast<uint32_t>(c.n_heads));
  h.kv_u32("llama.attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
  h.kv_f32("llama.attention.layer_norm_rms_epsilon", c.norm_eps);
  h.kv_f32("llama.rope.freq_base", c.rope_theta);
  h.kv_u32("llama.vocab_size", static_cast<uint32_t>(c.vocab_size));
  h.kv_str("tokenizer.ggml.model", "llama");
  h.kv_strings("tokenizer.ggml.tokens", vocab.tokens);
  std::vector<float> scores = vocab.scores;
  scores.resize(vocab.tokens.size(), 0.0f);
  h.kv_array("tokenizer.ggml.scores", kF32, scores);
  std::vector<int32_t> types = vocab.token_types;
  types.resize(vocab.tokens.size(), static_cast<int32_t>(TokenType::kNormal));
  h.kv_array("tokenizer.ggml.token_type", kI32, types);
  h.kv_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(vocab.bos_id));
  h.kv_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(vocab.eos_id));
  h.kv_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(vocab.unk_id));
  h.kv_u32("general.alignment", static_cast<uint32_t>(kAlign));
  h.finish_kvs();
  // Tensor infos: name, dims (GGML order), GGML type, offset in the data section.
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const TensorSpec& s : specs) {
    const DType t = src.tensor_dtype(s.name);
    const int32_t ggml = format_traits(t).ggml_type;
    OFFGEN_CHECK(ggml != kNoGgmlType, kConfig, "{}: tensor {} is {}, which GGUF cannot hold",
                 src.describe(), s.name, dtype_name(t));
    int64_t n = 1;
    for (int64_t d : s.dims) n *= d;
    sizes.push_back(static_cast<uint64_t>(dtype_bytes(t, n)));
    h.str(s.name);
    h.u32(static_cast<uint32_t>(s.dims.size()));
    for (int64_t d : s.dims) h.u64(static_cast<uint64_t>(d));
    h.u32(static_cast<uint32_t>(ggml));
    h.u64(offset);
    offset = aligned(offset + sizes.back());
  }
  std::vector<uint8_t>& head = h.bytes();
  head.resize(aligned(head.size()), 0);

  namespace fs = std::filesystem;
  const std::string tmp = path + ".partial";
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wb"), std::fclose);
  OFFGEN_CHECK(f != nullptr, kIo, "{}: cannot create ({})", tmp, std::strerror(errno));
  auto put = [&](const void* p, size_t n) {
    if (std::fwrite(p, 1, n, f.get()) == n) return;
    const int err = errno;
    f.reset();
    std::error_code ec;
    fs::remove(tmp, ec);
    OFFGEN_THROW(kIo, "{}: write failed ({})", tmp, std::strerror(err));
  };
  put(head.data(), head.size());
  const std::vector<uint8_t> zeros(kAlign, 0);
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorRef t = src.tensor(specs[i].name);
    put(t.data, sizes[i]);
    put(zeros.data(), aligned(sizes[i]) - sizes[i]);
  }
  OFFGEN_CHECK(std::fflush(f.get()) == 0, kIo, "{}: write failed ({})", tmp, std::strerror(errno));
  f.reset();
  std::error_code ec;
  fs::rename(tmp, path, ec);
  OFFGEN_CHECK(!ec, kIo, "{}: cannot rename to {} ({})", tmp, path, ec.message());
  return head.size() + offset;
}

}  // namespace offgen
