// offgen convert: a weight source as a GGUF file (gguf_convert.h).
#include "runtime/loaders/gguf_convert.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/formats.h"
#include "runtime/core/threading.h"
#include "runtime/loaders/gguf_source.h"
#include "runtime/loaders/gguf_vocab.h"
#include "runtime/loaders/gguf_write.h"
#include "runtime/model/architecture.h"
#include "runtime/model/quant_rules.h"
#include "runtime/model/tensor_table.h"

namespace offgen {
namespace {

// llama.cpp's general.file_type of a mode (llama_ftype), when it names one.
std::optional<uint32_t> file_type(const WeightMode& m) {
  if (m.native) return std::nullopt;
  const DType t = m.storage;
  if (t == DType::kQ4_K || t == DType::kQ5_K) {  // llama.cpp names the mixes only
    if (m.mix == QuantMix::kPlain) return std::nullopt;
    return (t == DType::kQ4_K ? 14u : 16u) + (m.mix == QuantMix::kM ? 1u : 0u);
  }
  constexpr std::pair<DType, uint32_t> kTypes[] = {
      {DType::kF32, 0},  {DType::kF16, 1},  {DType::kQ4_0, 2}, {DType::kQ8_0, 7},
      {DType::kQ5_0, 8}, {DType::kQ5_1, 9}, {DType::kQ6_K, 18}, {DType::kBF16, 32}};
  for (const auto& [type, id] : kTypes)
    if (type == t) return id;
  return std::nullopt;
}

bool ends_with(const std::string& s, const char* tail) { return s.ends_with(tail); }

// Tensors whose rows (or, for the per-head norm gains, elements) follow the RoPE pair order.
bool rope_rows(const std::string& name) {
  for (const char* t : {".attn_q.weight", ".attn_q.bias", ".attn_k.weight", ".attn_k.bias",
                        ".attn_q_norm.weight", ".attn_k_norm.weight"})
    if (ends_with(name, t)) return true;
  return false;
}

// The source row of destination row r of a [heads * head_dim] tensor whose first `rot` dims per
// head go from pair order `from` to `to` (rows past `rot` stay).
int64_t rope_source_row(int64_t r, int64_t head_dim, int64_t rot, RopeStyle from, RopeStyle to) {
  const int64_t h = r / head_dim, i = r % head_dim, half = rot / 2;
  if (from == to || i >= rot) return r;
  if (to == RopeStyle::kHalf)  // (i, i + half) <- (2i, 2i + 1)
    return h * head_dim + (i < half ? 2 * i : 2 * (i - half) + 1);
  return h * head_dim + (i % 2 == 0 ? i / 2 : i / 2 + half);  // (2i, 2i + 1) <- (i, i + half)
}

// The config the written file must read back to: arch and RoPE pair order as the GGUF row holds
// them, norm gains with their shift folded in (compared through effective values below).
std::vector<std::string> config_mismatches(const ModelConfig& a, const ModelConfig& b) {
  std::vector<std::string> out;
  auto same = [&out](const char* field, auto x, auto y) {
    if (x != y) out.push_back(fmt::format("{} (the model {}, the file {})", field, x, y));
  };
  auto close = [&out](const char* field, double x, double y) {
    if (std::fabs(x - y) > 1e-6 * std::max(1.0, std::fabs(x)))
      out.push_back(fmt::format("{} (the model {}, the file {})", field, x, y));
  };
  same("n_layers", a.n_layers, b.n_layers);
  same("d_model", a.d_model, b.d_model);
  same("n_heads", a.n_heads, b.n_heads);
  same("n_kv_heads", a.n_kv_heads, b.n_kv_heads);
  same("head_dim", a.head_dim, b.head_dim);
  same("ffn_dim", a.ffn_dim, b.ffn_dim);
  same("n_experts", a.n_experts, b.n_experts);
  same("n_experts_used", a.n_experts_used, b.n_experts_used);
  same("shared_ffn_dim", a.shared_ffn_dim, b.shared_ffn_dim);
  if (a.moe()) same("moe_norm_topk", a.moe_norm_topk, b.moe_norm_topk);
  same("vocab_size", a.vocab_size, b.vocab_size);
  same("context_length", a.context_length, b.context_length);
  close("norm_eps", a.norm_eps, b.norm_eps);
  same("norm", static_cast<int>(a.norm), static_cast<int>(b.norm));
  same("ffn", static_cast<int>(a.ffn), static_cast<int>(b.ffn));
  same("pre_norm", a.pre_norm, b.pre_norm);
  same("final_norm", a.final_norm, b.final_norm);
  same("qkv_bias", a.qkv_bias, b.qkv_bias);
  same("out_bias", a.out_bias, b.out_bias);
  same("ffn_bias", a.ffn_bias, b.ffn_bias);
  same("learned_pos", a.learned_pos, b.learned_pos);
  same("embed_dim", a.embed_dim, b.embed_dim);
  same("qk_norm", a.qk_norm, b.qk_norm);
  same("post_norms", a.post_norms, b.post_norms);
  same("tied_embeddings", a.tied_embeddings, b.tied_embeddings);
  close("embed_scale", a.embed_scale, b.embed_scale);
  const auto scale = [](const ModelConfig& c) {
    return c.attn_scale > 0 ? c.attn_scale : 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  };
  close("attention scale (query_pre_attn_scalar)", scale(a), scale(b));
  close("attn_softcap", a.attn_softcap, b.attn_softcap);
  close("final_softcap", a.final_softcap, b.final_softcap);
  same("sliding-window layers", fmt::format("{}", fmt::join(a.sliding_layers, "")),
       fmt::format("{}", fmt::join(b.sliding_layers, "")));
  same("sliding_window", a.sliding_window, b.sliding_window);
  same("rotated dims", a.rope_dims(), b.rope_dims());
  close("rope_attn_factor", a.rope_attn_factor, b.rope_attn_factor);
  if (a.learned_pos || !out.empty()) return out;
  // RoPE by its effective frequencies (scalings become frequency factors in GGUF), at every
  // context window (LongRoPE's two factor sets).
  for (const int64_t context : {a.rope_original_context, int64_t{0}})
    for (const bool sliding : {false, true}) {
      if (sliding && a.n_sliding_layers() == 0) continue;
      const std::vector<float> x = a.rope_inv_freq(sliding, context);
      const std::vector<float> y = b.rope_inv_freq(sliding, context);
      bool ok = x.size() == y.size();
      for (size_t i = 0; ok && i < x.size(); ++i)
        ok = std::fabs(x[i] - y[i]) <= 1e-6 * std::fabs(x[i]);
      if (!ok)
        out.push_back(fmt::format("RoPE frequencies of the {} layers (rope_theta, scaling)",
                                  sliding ? "sliding-window" : "global"));
    }
  return out;
}

std::vector<std::string> vocab_mismatches(const VocabData& a, const VocabData& b) {
  std::vector<std::string> out;
  auto same = [&out](const char* field, bool eq) {
    if (!eq) out.push_back(field);
  };
  const bool spm = a.model == "llama";
  same("model", a.model == b.model);
  if (!spm) same("pre-tokenizer", a.pre == b.pre);
  same("tokens", a.tokens == b.tokens);
  std::vector<int32_t> ta = a.token_types, tb = b.token_types;
  ta.resize(a.tokens.size(), 1), tb.resize(b.tokens.size(), 1);
  same("token types", ta == tb);
  same("bos/eos/unknown/padding ids", a.bos_id == b.bos_id && a.eos_id == b.eos_id &&
                                          a.unk_id == b.unk_id && a.pad_id == b.pad_id);
  same("add_bos / add_eos", a.add_bos == b.add_bos && a.add_eos == b.add_eos);
  same("chat template", a.chat_template == b.chat_template);
  if (!spm) {
    same("merges", a.merges == b.merges);
    return out;
  }
  // SentencePiece-style: GGUF ranks merges by scores and knows only llama.cpp's space prefix.
  same("scores (a SentencePiece tokenizer.json ranks merges without scores)",
       a.scores == b.scores && (!a.scores.empty() || a.merges.empty()));
  same("space prefix", a.space_prefix == b.space_prefix);
  same("pre-tokenizer splits", a.splits.empty());
  same("byte fallback / unknown fusing / space escaping",
       a.byte_fallback == b.byte_fallback && a.fuse_unk == b.fuse_unk &&
           a.escape_spaces == b.escape_spaces);
  return out;
}

// The model's hyper-parameters as llama.cpp's {arch}.* keys.
void add_model_metadata(GgufMetadata& kv, const ModelConfig& c, const std::string& arch,
                        const Architecture& row) {
  const std::string a = arch + ".";
  kv.u32(a + "context_length", static_cast<uint32_t>(c.context_length));
  kv.u32(a + "embedding_length", static_cast<uint32_t>(c.d_model));
  kv.u32(a + "block_count", static_cast<uint32_t>(c.n_layers));
  kv.u32(a + "feed_forward_length", static_cast<uint32_t>(c.ffn_dim));
  if (c.moe()) {
    kv.u32(a + "expert_count", static_cast<uint32_t>(c.n_experts));
    kv.u32(a + "expert_used_count", static_cast<uint32_t>(c.n_experts_used));
    kv.u32(a + "expert_feed_forward_length", static_cast<uint32_t>(c.ffn_dim));
    if (c.shared_ffn_dim > 0)
      kv.u32(a + "expert_shared_feed_forward_length", static_cast<uint32_t>(c.shared_ffn_dim));
    kv.boolean(a + "expert_weights_norm", c.moe_norm_topk);
  }
  kv.u32(a + "attention.head_count", static_cast<uint32_t>(c.n_heads));
  kv.u32(a + "attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
  if (c.d_model % c.n_heads != 0 || c.head_dim != c.d_model / c.n_heads) {
    kv.u32(a + "attention.key_length", static_cast<uint32_t>(c.head_dim));
    kv.u32(a + "attention.value_length", static_cast<uint32_t>(c.head_dim));
  }
  kv.f32(a + "attention.layer_norm_rms_epsilon", c.norm_eps);
  kv.f32(a + "rope.freq_base", c.rope_theta);
  kv.u32(a + "rope.dimension_count", static_cast<uint32_t>(c.rope_dims()));
  if (c.rope_scaling.kind == RopeScalingKind::kLinear) {
    kv.str(a + "rope.scaling.type", "linear");
    kv.f32(a + "rope.scaling.factor", c.rope_scaling.factor);
  }
  if (c.long_rope()) {
    kv.u32(a + "rope.scaling.original_context_length",
           static_cast<uint32_t>(c.rope_original_context));
    kv.f32(a + "rope.scaling.attn_factor", c.rope_attn_factor);
  }
  if (c.n_sliding_layers() > 0) {
    kv.u32(a + "attention.sliding_window", static_cast<uint32_t>(c.sliding_window));
    if (c.rope_local_theta > 0) kv.f32(a + "rope.freq_base_swa", c.rope_local_theta);
    // The pattern only where it is not the one readers assume for the architecture.
    bool default_pattern = row.gguf_swa_pattern > 0;
    for (int64_t l = 0; default_pattern && l < c.n_layers; ++l)
      default_pattern = c.is_sliding(l) == (l % row.gguf_swa_pattern < row.gguf_swa_pattern - 1);
    if (!default_pattern) kv.bools(a + "attention.sliding_window_pattern", c.sliding_layers);
  }
  if (c.attn_softcap > 0) kv.f32(a + "attn_logit_softcapping", c.attn_softcap);
  if (c.final_softcap > 0) kv.f32(a + "final_logit_softcapping", c.final_softcap);
  kv.u32(a + "vocab_size", static_cast<uint32_t>(c.vocab_size));
}

// The frequency factors GGUF carries as rope_freqs.weight: the file's own, or what a Llama 3.1
// scaling divides the base frequencies by (empty: none).
std::vector<float> rope_freq_tensor(const ModelConfig& c) {
  if (c.rope_scaling.kind != RopeScalingKind::kLlama3) return c.rope_freq_factors;
  const std::vector<float> base = rope_inv_freq(c.rope_theta, {}, c.rope_dims());
  const std::vector<float> scaled = c.rope_inv_freq(false);
  std::vector<float> f(base.size());
  for (size_t i = 0; i < f.size(); ++i)
    f[i] = static_cast<float>(static_cast<double>(base[i]) / scaled[i]);
  return f;
}

GgufOutTensor vector_tensor(const std::string& name, std::vector<float> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return {name, {n}, DType::kF32, [v = std::move(v)](uint8_t* out) {
            std::memcpy(out, v.data(), v.size() * 4);
          }};
}

}  // namespace

std::string gguf_architecture_for(const std::string& arch) {
  const Architecture* row = find_architecture(arch);
  if (row != nullptr && row->gguf) return std::string(row->name);
  if (row != nullptr && !row->gguf_as.empty()) return std::string(row->gguf_as);
  std::vector<std::string> names;
  for (const Architecture& a : architectures())
    if (a.gguf || !a.gguf_as.empty()) names.emplace_back(a.name);
  OFFGEN_THROW(kConfig, "architecture '{}' has no GGUF form llama.cpp loads (convert takes: {})",
               arch, fmt::join(names, ", "));
}

ConvertStats convert_to_gguf(const WeightSource& src, const VocabData& vocab,
                             const std::string& path, const WeightMode& mode, int threads) {
  const ModelConfig& c = src.config();
  ConvertStats stats;
  stats.arch = gguf_architecture_for(c.arch);
  const Architecture& row = *find_architecture(stats.arch);
  const RopeStyle file_style = architecture_config(stats.arch).rope_style;
  OFFGEN_CHECK(static_cast<int64_t>(vocab.tokens.size()) == c.vocab_size, kConfig,
               "{}: vocabulary of {} tokens for a model of {}", src.describe(),
               vocab.tokens.size(), c.vocab_size);
  OFFGEN_CHECK(mode.native || format_traits(mode.storage).ggml_type != kNoGgmlType, kConfig,
               "--weight-dtype {} is offgen's own format; GGUF cannot hold it", mode.name());
  auto ctx = std::make_shared<ThreadContext>(threads);

  GgufMetadata kv;
  kv.str("general.architecture", stats.arch);
  kv.str("general.name", c.name.empty() ? src.describe() : c.name);
  if (const std::optional<uint32_t> ft = file_type(mode)) kv.u32("general.file_type", *ft);
  kv.u32("general.quantization_version", 2);
  add_model_metadata(kv, c, stats.arch, row);
  add_tokenizer_metadata(kv, vocab);

  std::vector<GgufOutTensor> out;
  const std::vector<TensorSpec> specs = model_tensors(c);
  for (const TensorSpec& spec : specs) {
    std::vector<std::string> parts = {spec.name};
    std::string name = spec.name;
    std::vector<int64_t> dims = spec.dims;
    if (const std::optional<FusedSlice> s = fused_slice(c, spec.name)) {
      if (s->row0 > 0) continue;  // written with the first part
      parts.clear();
      for (std::string_view p : s->fused->parts) parts.push_back(fmt::format("blk.{}.{}", s->layer, p));
      name = fmt::format("blk.{}.{}", s->layer, s->fused->gguf);
      dims = {spec.dims[0], s->total_rows};
    }
    if (const std::optional<ExpertSlice> e = expert_slice(c, spec.name)) {  // stacked experts
      if (e->expert > 0) continue;  // written with expert 0
      parts.clear();
      for (int64_t x = 0; x < c.n_experts; ++x) parts.push_back(expert_tensor(e->layer, e->matrix, x));
      name = e->merged;
      dims = {spec.dims[0], spec.dims[1], c.n_experts};
    }
    if (dims.size() == 1) {  // norm gains and biases: f32, shifted and permuted as GGUF holds them
      const bool gain = c.norm == NormKind::kRms && ends_with(name, "norm.weight");
      out.push_back({name, dims, DType::kF32, [&src, &c, name, file_style, gain](uint8_t* o) {
                       const TensorRef t = src.tensor(name);
                       std::vector<float> v(static_cast<size_t>(t.n_elems()));
                       dequantize_row(t.dtype, t.data, v.data(), t.n_elems());
                       if (gain) for (float& x : v) x += c.norm_shift;
                       auto* dst = reinterpret_cast<float*>(o);
                       const bool perm = !c.learned_pos && rope_rows(name);
                       for (int64_t r = 0; r < t.n_elems(); ++r)
                         dst[r] = v[perm ? rope_source_row(r, c.head_dim, c.rope_dims(),
                                                           c.rope_style, file_style)
                                         : r];
                     }});
      continue;
    }
    // A matrix: its type, then its rows converted from the parts' rows (in parallel).
    DType type = mode.native ? src.tensor_dtype(parts[0]) : mode.storage;
    if (mode.native)
      for (const std::string& p : parts)
        if (src.tensor_dtype(p) != type) type = DType::kF32;  // parts of differing formats
    if (mode.quantises() && quantised_tensor(name, dims.size()))
      type = quant_type(mode, c, name, dims[0]);
    else if (mode.quantises())
      type = DType::kF32;  // a position table: kept in floats
    out.push_back({name, dims, type, [&src, &c, parts, type, file_style, ctx](uint8_t* o) {
                     int64_t r0 = 0;
                     for (const std::string& p : parts) {
                       const TensorRef t = src.tensor(p);
                       const int64_t n = t.dims[0], rows = t.n_elems() / n;
                       const int64_t src_row = dtype_bytes(t.dtype, n);
                       const int64_t dst_row = dtype_bytes(type, n);
                       const bool perm = !c.learned_pos && rope_rows(p);
                       const auto* s = static_cast<const uint8_t*>(t.data);
                       ctx->parallel_for(rows, 16, [&](int64_t b, int64_t e) {
                         std::vector<float> tmp(static_cast<size_t>(n));
                         for (int64_t r = b; r < e; ++r) {
                           const int64_t from =
                               perm ? rope_source_row(r, c.head_dim, c.rope_dims(), c.rope_style,
                                                      file_style)
                                    : r;
                           uint8_t* d = o + (r0 + r) * dst_row;
                           if (t.dtype == type) {
                             std::memcpy(d, s + from * src_row, dst_row);
                             continue;
                           }
                           dequantize_row(t.dtype, s + from * src_row, tmp.data(), n);
                           quantize_row(type, tmp.data(), d, n);
                         }
                       });
                       r0 += rows;
                     }
                   }});
  }
  if (std::vector<float> f = rope_freq_tensor(c); !f.empty())
    out.push_back(vector_tensor("rope_freqs.weight", std::move(f)));
  if (c.long_rope()) {
    out.push_back(vector_tensor("rope_factors_long.weight", c.rope_long_factors));
    out.push_back(vector_tensor("rope_factors_short.weight", c.rope_short_factors));
  }
  for (const GgufOutTensor& t : out) {
    int64_t n = 1;
    for (int64_t d : t.dims) n *= d;
    ++stats.tensors[t.type];
    stats.tensor_bytes[t.type] += dtype_bytes(t.type, n);
  }

  // Read back before it replaces `path`: what GGUF cannot express is refused here.
  const auto check = [&](const std::string& tmp) {
    const GgufWeightSource back(GgufFile::open(tmp));
    check_tensor_shapes(back);
    const std::vector<std::string> cm = config_mismatches(c, back.config());
    OFFGEN_CHECK(cm.empty(), kConfig,
                 "{}: cannot be written as a '{}' GGUF: the file would read back with another {}",
                 src.describe(), stats.arch, fmt::join(cm, ", "));
    const std::vector<std::string> vm = vocab_mismatches(vocab, vocab_from_gguf(back.file()));
    OFFGEN_CHECK(vm.empty(), kConfig,
                 "{}: its tokenizer cannot be written as GGUF tokenizer.ggml.* metadata: the "
                 "file would read back with other {}",
                 src.describe(), fmt::join(vm, ", "));
  };
  stats.file_bytes = write_gguf_file(path, std::move(kv), out, check);
  return stats;
}

}  // namespace offgen
