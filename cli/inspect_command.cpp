// `offgen inspect` over any model spec (GGUF file, Hugging Face directory, dummy preset).
#include "cli/inspect_command.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "policies/cost_model.h"
#include "policies/model_facts.h"
#include "runtime/loaders/gguf_source.h"
#include "runtime/loaders/hf_source.h"
#include "runtime/loaders/model_loader.h"
#include "runtime/backend/backend.h"
#include "runtime/core/error.h"
#include "runtime/core/memory_info.h"
#include "runtime/model/decoder.h"

namespace offgen {
namespace {

std::string features(const ModelConfig& c) {
  std::string s = c.norm == NormKind::kLayer ? "LayerNorm" : "RMSNorm";
  s += c.pre_norm ? " (pre-norm)" : " (post-norm)";
  if (c.post_norms) s += " and after each sublayer";
  switch (c.ffn) {
    case FfnKind::kSwiGlu: s += ", SwiGLU"; break;
    case FfnKind::kGeGlu: s += ", GeGLU (tanh GELU)"; break;
    case FfnKind::kRelu: s += ", ReLU"; break;
    case FfnKind::kGelu: s += ", GELU"; break;
  }
  s += c.learned_pos ? ", learned positions" : ", RoPE";
  switch (c.rope_scaling.kind) {
    case RopeScalingKind::kNone: break;
    case RopeScalingKind::kLinear: s += fmt::format(" (linear x{:g})", c.rope_scaling.factor); break;
    case RopeScalingKind::kLlama3:
      s += fmt::format(" (llama3 x{:g} from {})", c.rope_scaling.factor,
                       c.rope_scaling.original_context);
      break;
  }
  if (!c.rope_freq_factors.empty()) s += " (frequency factors)";
  if (c.long_rope())
    s += fmt::format(" (LongRoPE from {}, attention factor {:g})", c.rope_original_context,
                     c.rope_attn_factor);
  if (c.rope_dims() != c.head_dim)
    s += fmt::format(" on {} of {} head dims", c.rope_dims(), c.head_dim);
  if (c.qk_norm) s += ", QK-norm";
  if (c.qkv_bias) s += ", QKV bias";
  if (c.out_bias || c.ffn_bias) s += ", projection biases";
  if (c.embed_dim > 0) s += ", embeddings projected from " + std::to_string(c.embed_dim);
  if (c.embed_scale != 1.0f) s += fmt::format(", embeddings x{:g}", c.embed_scale);
  if (c.n_sliding_layers() > 0)
    s += fmt::format(", sliding window {} on {} of {} layers (RoPE theta {:g})", c.sliding_window,
                     c.n_sliding_layers(), c.n_layers,
                     c.rope_local_theta > 0 ? c.rope_local_theta : c.rope_theta);
  if (c.attn_softcap > 0) s += fmt::format(", attention soft-cap {:g}", c.attn_softcap);
  if (c.final_softcap > 0) s += fmt::format(", logit soft-cap {:g}", c.final_softcap);
  return s;
}

void print_tensor(const std::string& name, std::string_view dtype, const std::string& dims,
                  int64_t bytes) {
  std::printf("  %-40s %-6s [%s] %.2f MiB\n", name.c_str(), std::string(dtype).c_str(),
              dims.c_str(), bytes / 1048576.0);
}

template <class Dims>
std::string join_dims(const Dims& d) {
  std::string s;
  for (size_t i = 0; i < d.size(); ++i) s += (i ? " x " : "") + std::to_string(d[i]);
  return s;
}

}  // namespace

int run_inspect(const std::string& model, int threads, const std::string& weight_dtype,
                BackendKind backend_kind, const std::string& kv_dtype) {
  OpenedModel om = open_model(model);
  const ModelConfig& c = om.source->config();
  std::printf("model: %s\n  source: %s\n", c.name.c_str(), om.source->describe().c_str());
  std::printf("config:\n  arch %s, layers %lld, d_model %lld, heads %lld (kv %lld, head_dim %lld), "
              "ffn %lld, vocab %lld, context %lld\n  %s\n  rope theta %g, norm eps %g, tied "
              "embeddings %s\n",
              c.arch.c_str(), (long long)c.n_layers, (long long)c.d_model, (long long)c.n_heads,
              (long long)c.n_kv_heads, (long long)c.head_dim, (long long)c.ffn_dim,
              (long long)c.vocab_size, (long long)c.context_length, features(c).c_str(),
              c.rope_theta, c.norm_eps, c.tied_embeddings ? "yes" : "no");
  int64_t params = 0, stored = 0;
  if (const auto* g = dynamic_cast<const GgufWeightSource*>(om.source.get())) {
    std::printf("tensors (%zu, GGUF v%u):\n", g->file().tensors().size(), g->file().version());
    for (const auto& t : g->file().tensors()) {
      print_tensor(t.name, dtype_name(t.dtype), join_dims(t.dims), t.bytes);
      params += t.n_elems, stored += t.bytes;
    }
  } else if (const auto* h = dynamic_cast<const HfWeightSource*>(om.source.get())) {
    const auto names = h->checkpoint().names();
    std::printf("tensors (%zu, safetensors):\n", names.size());
    for (const auto& n : names) {
      const SafetensorsTensor& t = h->checkpoint().tensor(n);
      print_tensor(n, t.dtype_name, join_dims(t.shape), t.bytes);
      params += t.n_elems(), stored += t.bytes;
    }
  } else {
    std::printf("tensors: generated on demand (deterministic pseudo-random weights)\n");
  }
  // Sizes as the CPU backend stores them, without building any unit (any size fits).
  auto backend = make_cpu_backend(threads, WeightMode::parse(weight_dtype));
  DecoderModel m(*om.source, *backend);
  int64_t weights = m.resident_bytes();
  for (int64_t u = 0; u < m.num_units(); ++u) weights += m.unit_bytes(u);
  if (stored > 0)
    std::printf("memory:\n  parameters %.1f M, stored %.1f MiB\n", params / 1e6,
                stored / 1048576.0);
  else
    std::printf("memory:\n");
  std::printf("  weights as the %s backend holds them (--weight-dtype %s): %.1f MiB",
              backend->name().c_str(), weight_dtype.c_str(), weights / 1048576.0);
  if (stored > 0) std::printf(" (%.3f x the file's tensor bytes)", double(weights) / double(stored));
  std::printf("\n");
  for (const auto& [t, b] : m.bytes_by_format())
    std::printf("    %-8s %10.2f MiB\n", std::string(dtype_name(t)).c_str(), b / 1048576.0);
  if (c.moe()) {  // the experts' layout: what a token reads of each layer's MLP unit
    int64_t experts = 0, heads = 0;
    for (int64_t u = 1; u < m.num_units(); u += 2) {
      experts += m.unit_expert_bytes(u);
      heads += m.unit_head_bytes(u);
    }
    const double one = double(experts) / double(c.n_experts * c.n_layers);
    std::printf("  experts: %lld per layer of %lld wide, %lld used per token%s; one expert %.2f "
                "MiB, all experts %.1f MiB (%.1f%% of the weights); routers, norms%s %.1f MiB; a "
                "token's experts %.1f MiB over all layers\n",
                (long long)c.n_experts, (long long)c.ffn_dim, (long long)c.n_experts_used,
                c.shared_ffn_dim > 0
                    ? (", plus a shared expert of " + std::to_string(c.shared_ffn_dim)).c_str()
                    : "",
                one / 1048576.0, experts / 1048576.0, 100.0 * double(experts) / double(weights),
                c.shared_ffn_dim > 0 ? " and shared experts" : "", heads / 1048576.0,
                one * double(c.n_experts_used * c.n_layers) / 1048576.0);
  }
  // KV bytes per sequence as the KV store allocates them (in the KV dtype, all in memory, no
  // eviction): sliding-window layers hold only their window.
  const BackendCaps caps = backend_caps(backend_kind);
  ModelFacts facts = model_facts(m, weight_dtype);
  facts.default_kv_dtype = caps.default_kv_dtype;
  Policy full;
  if (!kv_dtype.empty()) full.set_kv_dtype(kv_dtype);
  const DType kv = full.kv_storage(caps);
  OFFGEN_CHECK(caps.stores_kv(kv), kConfig, "--backend {} stores the KV cache as {}; not {}",
               backend_name(backend_kind), caps.kv_dtype_list(), dtype_name(kv));
  auto per_seq = [&](int64_t tokens) {
    return kv_need(facts, full, tokens).memory() / 1048576.0;
  };
  std::printf("  KV cache: %s (%s; the %s backend stores %s), %.1f KiB per token over all layers "
              "(fp32: %.1f KiB)",
              std::string(dtype_name(kv)).c_str(),
              kv_dtype.empty() ? "the backend's default" : "--kv-dtype",
              std::string(backend_name(backend_kind)).c_str(), caps.kv_dtype_list().c_str(),
              c.kv_bytes_per_token(kv) / 1024.0, c.kv_bytes_per_token(DType::kF32) / 1024.0);
  if (facts.window_layers > 0)
    std::printf("; %lld sliding-window layers hold only their window of %lld",
                (long long)facts.window_layers, (long long)facts.window);
  const int64_t some = std::min<int64_t>(4096, c.context_length);
  std::printf("\n    per sequence: %.2f MiB at %lld tokens, %.1f MiB at the full context of %lld\n",
              per_seq(some), (long long)some, per_seq(c.context_length),
              (long long)c.context_length);
  // What the memory limits count beside the homes (docs/offloading.md, "What the caps count"),
  // as admission and the planner read it: the forwards' buffers.
  const ForwardLayout& f = facts.forward;
  const int64_t chunk = backend_caps(BackendKind::kCpu).default_prefill_chunk;
  const ForwardSplit fc =
      forward_need(facts, full, ForwardShape{chunk, chunk, 1, 1, 1, chunk, chunk});
  std::printf("  counted against the limits besides: resident tensors %.1f MiB (always in RAM); "
              "forwards %.1f KiB per sequence running (its logits and hidden row) and %.1f MiB "
              "for a prompt chunk of %lld tokens (scratch, and attention scores on %lld "
              "threads)\n",
              m.resident_bytes() / 1048576.0, (f.logits_row_bytes + f.hidden_row_bytes) / 1024.0,
              (fc.hidden + fc.scratch + fc.workspace).memory() / 1048576.0, (long long)chunk,
              (long long)f.threads);
  std::printf("  beyond them (a fixed overhead): the tokenizer and the libraries' static data "
              "(%.1f MiB in this process as it started)\n",
              startup_anon_bytes() / 1048576.0);
  return 0;
}

}  // namespace offgen
