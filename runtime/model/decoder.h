// Decoder-only transformer (Llama/Mistral/Qwen2/Qwen3: RMSNorm, RoPE (scaled), GQA, SwiGLU,
// QK-norm; mixtures of experts (Mixtral, Qwen2/3-MoE): routed SwiGLU experts; Gemma 2/3: sandwich norms, GeGLU, sliding-window layers, soft-capping; OPT: LayerNorm,
// learned positions, ReLU, biases, post-norm, projected embeddings — see ModelConfig) as
// schedulable units — per layer an attention unit (2l) and an MLP unit (2l+1) — plus the resident
// embedding and output head. A unit's weights live in one "blob" (backend storage, 4 KiB-multiple
// size) that the caller places anywhere (RAM, staged from disk) and passes to run_unit.
#pragma once

#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/backend/backend_array.h"
#include "runtime/core/placement.h"
#include "runtime/model/config.h"
#include "runtime/model/kv_slots.h"
#include "runtime/model/moe_routing.h"
#include "runtime/model/weight_source.h"

namespace offgen {

// Scratch activations for one ragged batch, in the backend's device memory; grown on demand. One
// per concurrently running batch.
struct DecoderScratch {
  BackendArray<float> x, qkv, q, attn, proj, gate_up, act, emb;
  // Mixtures of experts: router logits (and the shared expert's gate), an expert's gathered
  // input rows and its output rows (empty for dense models).
  BackendArray<float> route, moe_x, moe_y;
  std::vector<KvOverflow> overflow;  // per sequence, for chunks that overflow their table
  std::vector<float> route_host;     // the router logits in host memory
  MoeRouting routing;
  static constexpr int64_t kBuffers = 11;  // the arrays above
  void reserve(Backend& be, const ModelConfig& c, int64_t rows);
  // fp32 elements of one row over all the arrays.
  static int64_t row_floats(const ModelConfig& c);
  // Bytes the arrays hold now, each rounded up to 4 KiB as the backends allocate.
  int64_t bytes() const;
};

// The rows of one ragged batch as a unit sees them.
struct UnitBatch {
  int64_t rows = 0;
  std::span<const SeqSpan> seqs;
  const int32_t* positions = nullptr;  // per row
  std::span<const KvSeqView> kv;       // per sequence, for this unit's layer (attention units)
  // Evicts from tables with metadata; null: none evict, except on sliding-window layers, whose
  // tables with metadata then overwrite the keys behind the window (KvStore's window tables).
  const KvSlotPolicy* policy = nullptr;
};

// Per-layer KV views for the sequences of a batch, supplied by the caller (who owns the cache).
using KvViewFn = std::function<std::span<const KvSeqView>(int64_t layer)>;
// Where unit u's blob currently is.
using BlobFn = std::function<const void*(int64_t unit)>;

class DecoderModel {
 public:
  // Prepares the resident tensors (embedding table, output norm and head). `src` must outlive the
  // model: build_unit reads it. `context`: the context window the model runs with (0: the
  // config's context_length), which picks LongRoPE's short or long factors. `expert_order`: a
  // mixture of experts' experts per layer in the order their slices lie in the unit blobs
  // (empty: index order), e.g. hottest first, so that the RAM share of a blob split between RAM
  // and disk (Placement::weight_blob) holds the most chosen ones. Outputs do not depend on it.
  // Throws Error(kConfig) when it is not a permutation of every layer's experts.
  DecoderModel(const WeightSource& src, Backend& backend, int64_t context = 0,
               const ExpertOrder& expert_order = {});

  const ModelConfig& config() const { return config_; }
  Backend& backend() const { return backend_; }

  int64_t num_units() const { return 2 * config_.n_layers; }
  // The weight staging slots a schedule of these units wants (loads run slots - 1 units ahead of
  // compute): kWeightStagingSlots, or 3 for a mixture of experts, whose small attention units and
  // large MLP units alternate: with two slots an MLP unit's load would wait for the previous MLP
  // unit's compute, so the two largest loads and computes would never overlap.
  int64_t weight_slots() const { return config_.moe() ? 3 : kWeightStagingSlots; }
  static bool unit_has_cache(int64_t unit) { return unit % 2 == 0; }
  static int64_t unit_layer(int64_t unit) { return unit / 2; }
  int64_t unit_bytes(int64_t unit) const;  // multiple of 4096
  // Mixtures of experts: the bytes of unit u's experts (each a 4 KiB-aligned slice at the end of
  // the blob) and of the rest of it (router, norm, shared expert); 0 and unit_bytes for units
  // without experts.
  int64_t unit_expert_bytes(int64_t unit) const;
  int64_t unit_head_bytes(int64_t unit) const;
  // Unit u's expert e: its bytes [first, first + second) in the blob (unit_head_bytes on).
  std::pair<int64_t, int64_t> expert_range(int64_t unit, int64_t e) const;
  // The experts unit u's router picks for `rows` rows of hidden (ascending, each once): what
  // run_unit will read of the blob's experts. Reads only the blob's head (unit_head_bytes).
  void route_unit(int64_t unit, const void* blob, const float* hidden, int64_t rows,
                  DecoderScratch& s, std::vector<int64_t>& experts) const;
  // The same from a resident copy of unit u's norm gain and router (no blob needed), so that a
  // schedule can guess a later unit's experts from an earlier unit's input and fetch them ahead.
  // Mixtures of experts on host backends keep the copies (resident_bytes counts them); false,
  // with no experts, elsewhere.
  bool predict_experts(int64_t unit, const float* hidden, int64_t rows, DecoderScratch& s,
                       std::vector<int64_t>& experts) const;
  // Counts every routing of the MLP units' forwards into `counts` (reset to this model's layers
  // and experts) from now on; nullptr stops. Not thread-safe: forwards run one at a time.
  void count_routing(RoutingCounts* counts);
  const ExpertOrder& expert_order() const { return expert_order_; }
  // Writes unit u's blob (unit_bytes(u), 64-byte aligned) from the weight source. `scratch`
  // (optional) holds a matrix's source rows; a caller building many units passes one for all, so
  // its memory is touched once (fresh pages cost more than the copy on some VMs). Thread-safe
  // for calls with different scratch buffers.
  void build_unit(int64_t unit, void* dst, std::vector<uint8_t>* scratch = nullptr) const;
  int64_t resident_bytes() const;  // embedding + output head + norms (+ the router copies)
  // What a forward on this backend holds per row, sequence and compute thread (the block
  // executor's buffers, DecoderScratch, the backend's workspace) for the memory accounting.
  ForwardLayout forward_layout() const;
  // Bytes of every matrix and table (units and resident ones) by the format it is stored in, as
  // this backend holds them; norm gains and biases count as f32.
  std::map<DType, int64_t> bytes_by_format() const;

  // hidden[rows, d_model] (device memory) = embedding of ids at their positions (learned position
  // tables); ids and positions are host memory.
  void embed(std::span<const int32_t> ids, const int32_t* positions, float* hidden,
             DecoderScratch& s) const;
  // Attention unit: hidden += attention(norm(hidden)), writing the new tokens' K/V into the
  // batch's KV views after their n_past used slots — or, in tables that evict, where the policy
  // makes room (see KvStep). MLP unit: hidden += mlp(norm(hidden)).
  void run_unit(int64_t unit, const void* blob, float* hidden, const UnitBatch& batch,
                DecoderScratch& s) const;
  // logits[i, vocab] (device memory) for hidden rows rows[i].
  void output_step(const float* hidden, std::span<const int64_t> rows, float* logits,
                   DecoderScratch& s) const;

  // All units in order; logits for the last token of each sequence: [seqs.size(), vocab] in
  // device memory (the KV views' too).
  void forward(std::span<const int32_t> ids, const int32_t* positions,
               std::span<const SeqSpan> seqs, const KvViewFn& kv, const BlobFn& blob,
               float* logits, DecoderScratch& s) const;

 private:
  // A matrix stacked from several source tensors (Q, K, V or gate, up) by rows: consecutive
  // tensors of the same matmul storage form one part (one GEMM); a change of storage (a Q4_K_M
  // file's Q6_K attn_v after Q4_K attn_q/attn_k) starts another part.
  struct Part {
    std::vector<std::string> names;  // the tensors, in row order
    std::vector<int64_t> tensor_rows;
    DType storage = DType::kF32;
    int64_t rows = 0;
    int64_t offset = 0;  // in the unit blob
  };
  struct Matrix {
    int64_t rows = 0, cols = 0;
    std::vector<Part> parts;
  };
  // One expert of a mixture-of-experts MLP unit: its gate+up and down matrices, in the blob's
  // bytes [at, at + bytes) (4 KiB-aligned, so that an expert can be moved on its own).
  struct Expert {
    Matrix w0, w1;
    int64_t at = 0, bytes = 0;
  };
  struct Layout {  // byte offsets inside a unit blob (-1: absent)
    int64_t layer = 0;
    int64_t norm = 0, norm_b = -1, post_norm = -1, q_norm = -1, k_norm = -1, b0 = -1, b1 = -1;
    int64_t bytes = 0;
    Matrix w0, w1;  // MoE units: the shared expert's (empty without one)
    Matrix router, shared_gate;  // MoE units: [n_experts, d_model] and [1, d_model]
    std::vector<Expert> experts;  // MoE units, after everything else (by index; their slices in
                                  // the blob in expert_order_)
  };
  // The MLP of a mixture of experts over `rows` normalised rows `in`, into s.proj.
  void moe_mlp(const Layout& L, const uint8_t* base, const float* in, int64_t rows,
               DecoderScratch& s) const;
  // Routes `rows` normalised rows `in` into s.routing; returns the router logits in host memory
  // (then the shared expert's gate logits, [rows] after [rows][n_experts]).
  const float* moe_route(const Layout& L, const uint8_t* base, const float* in, int64_t rows,
                         DecoderScratch& s) const;
  // The experts (ascending) that L's norm and router, in the bytes at `base`, pick for `rows`
  // rows of hidden.
  void routed_experts(const Layout& L, const uint8_t* base, const float* hidden, int64_t rows,
                      DecoderScratch& s, std::vector<int64_t>& experts) const;
  // Mixture-of-experts MLP units' norm gain and router, resident (predict_experts): their own
  // bytes, laid out as a Layout whose other members are absent.
  struct RouterCopy {
    Buffer bytes;
    Layout layout;
  };
  void copy_routers();
  Layout make_layout(int64_t unit) const;
  // The matmul storage of tensor `name` (rows of `cols` elements coming as `src`): the backend's
  // WeightMode, for a mode that quantises through the rule table (quant_rules.h).
  DType storage_of(const std::string& name, DType src, int64_t cols) const;
  const Layout& layout(int64_t unit) const { return layouts_[unit]; }
  // Groups `names` (rows each, `cols` columns) into parts by matmul storage, placed from `at`;
  // returns the end offset.
  int64_t place_matrix(const std::vector<std::string>& names, const std::vector<int64_t>& rows,
                       int64_t cols, int64_t at, Matrix& m) const;
  // Packs m into base + its parts' offsets; `stacked` holds the source rows (reused by the caller).
  void build_matrix(const Matrix& m, uint8_t* base, std::vector<uint8_t>& stacked) const;
  // y[rows][m.rows] = x · Wᵀ, part by part into the column ranges of y.
  void matmul(const float* x, int64_t rows, const Matrix& m, const uint8_t* base, float* y) const;

  const WeightSource& src_;
  ModelConfig config_;
  Backend& backend_;
  Weight tok_embd_;  // gather table [vocab, embed_width] (empty when embed_from_head_)
  bool embed_from_head_ = false;  // embeddings gathered from the tied lm_head_
  bool embed_gather_ = false;     // tok_embd_ is a matmul storage (quantised), gathered by rows
  Weight pos_embd_;  // learned positions [pos_offset + context, d_model] (empty with RoPE)
  Weight proj_in_, proj_out_;  // embed_width <-> d_model projections (empty when equal)
  Buffer out_norm_, out_norm_b_;  // device memory; empty without a final norm
  Weight lm_head_;   // [vocab, embed_width]
  std::vector<Layout> layouts_;  // per unit
  ExpertOrder expert_order_;     // per layer (empty: index order)
  std::vector<RouterCopy> routers_;  // per unit (empty: none kept)
  RoutingCounts* routing_counts_ = nullptr;
  std::vector<float> inv_freq_, inv_freq_local_;  // RoPE of the global / sliding-window layers
};

// Every unit blob built once and held in the backend's device memory: the all-resident placement.
class ResidentUnits {
 public:
  explicit ResidentUnits(const DecoderModel& model);
  const void* blob(int64_t unit) const { return blobs_[unit].data(); }
  int64_t bytes() const;
  BlobFn fn() const {
    return [this](int64_t u) { return blob(u); };
  }

 private:
  std::vector<Buffer> blobs_;
};

}  // namespace offgen
