// Deterministic random weights for benchmark presets.
#include "runtime/loaders/dummy_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime/core/error.h"
#include "runtime/core/hash.h"
#include "runtime/core/quant_blocks.h"
#include "runtime/model/architecture.h"
#include "runtime/model/tensor_table.h"

namespace offgen {
namespace {

struct Preset {
  const char* name;
  int64_t layers, d_model, heads, kv_heads, ffn, vocab, context;
  bool opt = false;        // OPT architecture (LayerNorm, ReLU, biases, learned positions)
  int64_t embed_dim = 0;   // OPT-350m's word_embed_proj_dim
  bool post_norm = false;  // OPT-350m
};

// Gemma 3, Qwen3 and mixture-of-experts shapes (their public configurations): head sizes of
// their own, Gemma's five sliding-window layers per global one; the mixtures' experts (ffn is
// an expert's width), whose routers are generated with a fixed skew (DummyWeightSource::tensor)
// so that some experts are chosen more often than others.
struct ModernPreset {
  const char* name;
  const char* arch;  // "gemma3", "qwen3", "mixtral", "qwen2moe" or "qwen3moe"
  int64_t layers, d_model, heads, kv_heads, head_dim, ffn, vocab, context;
  int64_t window = 0;  // gemma3: sliding window (every 6th layer global)
  int64_t experts = 0, used = 0, shared_ffn = 0;
  bool tied = true;
};
constexpr ModernPreset kModernPresets[] = {
    {"gemma3-270m", "gemma3", 18, 640, 4, 1, 256, 2048, 262144, 32768, 512},
    {"gemma3-1b", "gemma3", 26, 1152, 4, 1, 256, 6912, 262144, 32768, 512},
    {"qwen3-0.6b", "qwen3", 28, 1024, 16, 8, 128, 3072, 151936, 40960},
    {"mixtral-8x7b", "mixtral", 32, 4096, 32, 8, 128, 14336, 32000, 32768, 0, 8, 2, 0, false},
    {"qwen2-moe-a2.7b", "qwen2moe", 24, 2048, 16, 16, 128, 1408, 151936, 8192, 0, 60, 4, 5632,
     false},
    {"qwen3-30b-a3b", "qwen3moe", 48, 2048, 32, 4, 128, 768, 151936, 40960, 0, 128, 8, 0, false},
    {"qwen3-235b-a22b", "qwen3moe", 94, 4096, 64, 4, 128, 1536, 151936, 40960, 0, 128, 8, 0,
     false},
};

// Llama-shaped sizes (public configurations of SmolLM2, TinyLlama, LLaMA 30B, Llama 2 and Llama 3)
// and the OPT sizes FlexGen benchmarks (facebook/opt-* configs).
constexpr Preset kPresets[] = {
    {"smollm2-135m", 30, 576, 9, 3, 1536, 49152, 8192},
    {"llama-1b", 22, 2048, 32, 4, 5632, 32000, 2048},
    {"llama3-1b", 16, 2048, 32, 8, 8192, 128256, 8192},
    {"llama3-3b", 28, 3072, 24, 8, 8192, 128256, 8192},
    {"llama-7b", 32, 4096, 32, 32, 11008, 32000, 4096},
    {"llama-13b", 40, 5120, 40, 40, 13824, 32000, 4096},
    {"llama-30b", 60, 6656, 52, 52, 17920, 32000, 2048},
    {"llama-70b", 80, 8192, 64, 8, 28672, 32000, 4096},
    {"opt-125m", 12, 768, 12, 12, 3072, 50272, 2048, true},
    {"opt-350m", 24, 1024, 16, 16, 4096, 50272, 2048, true, 512, true},
    {"opt-1.3b", 24, 2048, 32, 32, 8192, 50272, 2048, true},
    {"opt-2.7b", 32, 2560, 32, 32, 10240, 50272, 2048, true},
    {"opt-6.7b", 32, 4096, 32, 32, 16384, 50272, 2048, true},
    {"opt-13b", 40, 5120, 40, 40, 20480, 50272, 2048, true},
    {"opt-30b", 48, 7168, 56, 56, 28672, 50272, 2048, true},
    {"opt-66b", 64, 9216, 72, 72, 36864, 50272, 2048, true},
    {"opt-175b", 96, 12288, 96, 96, 49152, 50272, 2048, true},
};

}  // namespace

std::vector<std::string> dummy_presets() {
  std::vector<std::string> v;
  for (const auto& p : kPresets) v.push_back(p.name);
  for (const auto& p : kModernPresets) v.push_back(p.name);
  return v;
}

ModelConfig dummy_config(const std::string& preset) {
  for (const auto& p : kModernPresets) {
    if (preset != p.name) continue;
    ModelConfig c = architecture_config(p.arch);
    c.name = std::string("dummy:") + p.name;
    c.n_layers = p.layers;
    c.d_model = p.d_model;
    c.n_heads = p.heads;
    c.n_kv_heads = p.kv_heads;
    c.head_dim = p.head_dim;
    c.ffn_dim = p.ffn;
    c.vocab_size = p.vocab;
    c.context_length = p.context;
    c.rope_theta = 1e6f;
    c.norm_eps = 1e-6f;
    c.tied_embeddings = p.tied;
    c.n_experts = p.experts;
    c.n_experts_used = p.used;
    c.shared_ffn_dim = p.shared_ffn;
    if (p.window > 0) {  // generated norm gains of 1 stand for the stored 1 + w of a GGUF
      c.sliding_window = p.window;
      c.rope_local_theta = 1e4f;
      for (int64_t l = 0; l < c.n_layers; ++l) c.sliding_layers.push_back((l + 1) % 6 != 0);
    }
    finish_architecture_config(c);
    c.validate();
    return c;
  }
  for (const auto& p : kPresets) {
    if (preset != p.name) continue;
    ModelConfig c = architecture_config(p.opt ? "opt" : "llama");
    c.name = std::string("dummy:") + p.name;
    c.n_layers = p.layers;
    c.d_model = p.d_model;
    c.n_heads = p.heads;
    c.n_kv_heads = p.kv_heads;
    c.head_dim = p.d_model / p.heads;
    c.ffn_dim = p.ffn;
    c.vocab_size = p.vocab;
    c.context_length = p.context;
    c.rope_theta = 10000.0f;
    c.norm_eps = 1e-5f;
    // Random weights: either pairing; GGUF Llama's, so a preset and its GGUF file
    // (dummy_gguf, offgen convert) are the same model.
    c.rope_style = RopeStyle::kInterleaved;
    c.tied_embeddings = p.opt;
    if (p.opt) {
      c.pre_norm = !p.post_norm;
      c.final_norm = !p.post_norm;
      c.embed_dim = p.embed_dim;
    }
    c.validate();
    return c;
  }
  OFFGEN_THROW(kConfig, "unknown dummy model preset '{}' (available: {})", preset,
               fmt::join(dummy_presets(), ", "));
}

namespace {

std::string preset_of(const std::string& spec) { return spec.substr(0, spec.find(':')); }

DType format_of(const std::string& spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return DType::kF32;
  const std::string name = spec.substr(colon + 1);
  DType t = DType::kF32;
  bool known = true;
  try {
    t = dtype_from_name(name);
  } catch (const Error&) {
    known = false;
  }
  OFFGEN_CHECK(known && (t == DType::kF32 || has_random_blocks(t)), kConfig,
               "dummy:{}: unknown weight format '{}' (dummy:PRESET takes f32, q8_0, q4_0, q4_k, "
               "q5_k or q6_k after a colon, e.g. dummy:llama-7b:q4_k)",
               spec, name);
  return t;
}

}  // namespace

DummyWeightSource::DummyWeightSource(const std::string& spec, StopToken stop)
    : preset_(preset_of(spec)),
      matrix_type_(format_of(spec)),
      config_(dummy_config(preset_)),
      stop_(stop) {}

std::string DummyWeightSource::describe() const {
  return matrix_type_ == DType::kF32
             ? "dummy:" + preset_
             : fmt::format("dummy:{}:{}", preset_, dtype_name(matrix_type_));
}

DType DummyWeightSource::tensor_dtype(const std::string& name) const {
  const std::vector<int64_t> dims = dims_of(name);
  OFFGEN_CHECK(!dims.empty(), kInput, "{}: no tensor '{}'", describe(), name);
  if (dims.size() < 2 || matrix_type_ == DType::kF32 || router_tensor(name))
    return DType::kF32;
  if (dims[0] % dtype_block_elems(matrix_type_) == 0) return matrix_type_;
  return dims[0] % dtype_block_elems(DType::kQ8_0) == 0 ? DType::kQ8_0 : DType::kF32;
}

std::vector<int64_t> DummyWeightSource::dims_of(const std::string& name) const {
  return model_tensor_dims(config_, name);
}

bool DummyWeightSource::has_tensor(const std::string& name) const { return !dims_of(name).empty(); }

TensorRef DummyWeightSource::tensor(const std::string& name) const {
  TensorRef t;
  t.name = name;
  t.dtype = tensor_dtype(name);
  t.dims = dims_of(name);
  const int64_t n = t.n_elems();
  // Uniform in ±sqrt(3)·σ with σ = 1/sqrt(fan_in): activations stay O(1) through the layers.
  const float amax = t.dims.size() < 2 ? 0.0f : std::sqrt(3.0f / static_cast<float>(t.dims[0]));
  uint64_t x = fnv1a64(name) | 1;
  const int64_t bytes = dtype_bytes(t.dtype, n);
  void* mem = std::malloc(static_cast<size_t>(bytes));
  OFFGEN_CHECK(mem != nullptr, kResource, "{}: out of memory generating '{}' ({} bytes)",
               describe(), name, bytes);
  t.keepalive = std::shared_ptr<const void>(mem, std::free);
  t.data = mem;
  // Generated in pieces of about 4 MiB with a stop check between them (one sequential stream:
  // the pieces' sizes do not change the values; whole 8-byte words of random_blocks' stream).
  if (t.dtype != DType::kF32) {
    const int64_t blocks = n / dtype_block_elems(t.dtype);
    const int64_t block_bytes = dtype_bytes(t.dtype, dtype_block_elems(t.dtype));
    const int64_t piece = std::max<int64_t>(8, (int64_t{4} << 20) / block_bytes / 8 * 8);
    for (int64_t b = 0; b < blocks; b += piece) {
      stop_.check("load");
      random_blocks(t.dtype, x, amax, static_cast<uint8_t*>(mem) + b * block_bytes,
                    std::min(piece, blocks - b));
    }
    return t;
  }
  auto* data = static_cast<float*>(mem);
  if (t.dims.size() == 1) {  // norm gains: ones; biases: zeros
    const float v = name.ends_with(".bias") ? 0.0f : 1.0f;
    for (int64_t i = 0; i < n; ++i) data[i] = v;
    return t;
  }
  constexpr int64_t kPiece = int64_t{1} << 20;  // elements
  for (int64_t i0 = 0; i0 < n; i0 += kPiece) {
    stop_.check("load");
    for (int64_t i = i0; i < std::min(n, i0 + kPiece); ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      data[i] = (static_cast<float>(x >> 40) * 0x1.0p-24f * 2.0f - 1.0f) * amax;
    }
  }
  if (name.ends_with(".ffn_gate_inp.weight")) {
    // A fixed skew of the router: expert e's logits scaled by 1.25^(1 - 2 r / (E - 1)) for its
    // rank r in a per-layer permutation, from 1.25 (chosen most often) to 0.8.
    const int64_t experts = t.dims[1], cols = t.dims[0];
    int layer = 0;
    std::sscanf(name.c_str(), "blk.%d.", &layer);
    for (int64_t e = 0; e < experts; ++e) {
      const int64_t rank = (e * 7 + layer * 13) % experts;
      const double s = std::pow(1.25, 1.0 - 2.0 * rank / std::max<int64_t>(1, experts - 1));
      for (int64_t i = 0; i < cols; ++i) data[e * cols + i] *= static_cast<float>(s);
    }
  }
  return t;
}

VocabData DummyWeightSource::vocab() const {
  VocabData v;
  v.model = "gpt2";
  v.pre = "gpt2";
  // The GPT-2 byte alphabet: printable bytes map to themselves, the rest to U+0100 onwards.
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    const int cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80)
      s += static_cast<char>(cp);
    else {
      s += static_cast<char>(0xc0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    }
    v.tokens.push_back(s);
    v.token_types.push_back(1);
  }
  for (int64_t i = 256; i < config_.vocab_size; ++i) {
    v.tokens.push_back(fmt::format("<dummy_{}>", i));
    v.token_types.push_back(5);  // unused
  }
  return v;
}

}  // namespace offgen
