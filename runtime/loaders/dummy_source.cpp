// Deterministic random weights for benchmark presets.
#include "runtime/loaders/dummy_source.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "runtime/core/error.h"
#include "runtime/core/hash.h"
#include "runtime/model/architecture.h"
#include "runtime/model/tensor_table.h"

namespace offgen {
namespace {

struct Preset {
  const char* name;
  int64_t layers, d_model, heads, kv_heads, ffn, vocab, context;
  bool opt = false;         // OPT architecture (LayerNorm, ReLU, biases, learned positions)
  int64_t embed_dim = 0;    // OPT-350m's word_embed_proj_dim
  bool post_norm = false;   // OPT-350m
};

// Llama-shaped sizes (public configurations of SmolLM2, TinyLlama, Llama 2 and Llama 3) and the
// OPT sizes FlexGen benchmarks (facebook/opt-* configs).
constexpr Preset kPresets[] = {
    {"smollm2-135m", 30, 576, 9, 3, 1536, 49152, 8192},
    {"llama-1b", 22, 2048, 32, 4, 5632, 32000, 2048},
    {"llama3-1b", 16, 2048, 32, 8, 8192, 128256, 8192},
    {"llama3-3b", 28, 3072, 24, 8, 8192, 128256, 8192},
    {"llama-7b", 32, 4096, 32, 32, 11008, 32000, 4096},
    {"llama-13b", 40, 5120, 40, 40, 13824, 32000, 4096},
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
  return v;
}

ModelConfig dummy_config(const std::string& preset) {
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
    c.rope_style = RopeStyle::kHalf;  // random weights: either pairing; kept as benchmarked
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

DummyWeightSource::DummyWeightSource(const std::string& preset)
    : preset_(preset), config_(dummy_config(preset)) {}

std::vector<int64_t> DummyWeightSource::dims_of(const std::string& name) const {
  return model_tensor_dims(config_, name);
}

bool DummyWeightSource::has_tensor(const std::string& name) const { return !dims_of(name).empty(); }

TensorRef DummyWeightSource::tensor(const std::string& name) const {
  TensorRef t;
  t.name = name;
  t.dtype = DType::kF32;
  t.dims = dims_of(name);
  OFFGEN_CHECK(!t.dims.empty(), kInput, "{}: no tensor '{}'", describe(), name);
  const int64_t n = t.n_elems();
  float* data = static_cast<float*>(std::malloc(n * sizeof(float)));
  OFFGEN_CHECK(data != nullptr, kResource, "{}: out of memory generating '{}' ({} floats)",
               describe(), name, n);
  t.keepalive = std::shared_ptr<const void>(data, std::free);
  t.data = data;
  if (t.dims.size() == 1) {  // norm gains: ones; biases: zeros
    const float v = name.ends_with(".bias") ? 0.0f : 1.0f;
    for (int64_t i = 0; i < n; ++i) data[i] = v;
    return t;
  }
  // Uniform in ±sqrt(3)·σ with σ = 1/sqrt(fan_in): activations stay O(1) through the layers.
  const float scale = std::sqrt(3.0f / static_cast<float>(t.dims[0]));
  uint64_t x = fnv1a64(name) | 1;
  for (int64_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    data[i] = (static_cast<float>(x >> 40) * 0x1.0p-24f * 2.0f - 1.0f) * scale;
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
    if (cp < 0x80) s += static_cast<char>(cp);
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
