// Engine: the public C++ API. Loads a model once and generates completions for batches of
// requests with continuous batching (finished sequences are replaced by waiting ones).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "offload/io_stats.h"
#include "policies/hardware_profile.h"
#include "policies/policy.h"
#include "runtime/core/stop.h"
#include "runtime/model/config.h"
#include "scheduler/block_plan.h"
#include "scheduler/request.h"

namespace offgen {

class Backend;
class BlockExecutor;
class ContextRunner;
class DecoderModel;
class KvPolicy;
class KvStore;
class NvmeStore;
class SharedContext;
class Tokenizer;
class WeightSource;
class WeightStore;
struct KvzipRepeat;
struct ModelFacts;

struct EngineOptions {
  std::string model;              // a .gguf file, a Hugging Face checkpoint directory or dummy:PRESET
  BackendKind backend = BackendKind::kCpu;  // (kCpuEmulatedDevice: tests of the GPU paths)
  int threads = 0;                // 0 = all cores
  // Matmul storage: native (each GGUF tensor in its own block format), f32 (exact), bf16 (faster,
  // ~1e-2 logits), f16 on the GPU, or a GGML block format to quantise to at load (the storages
  // the backend takes: BackendCaps::takes). Parsed from text at the edges (WeightMode::parse).
  WeightMode weight_dtype;
  // Placement and batch split: up to gpu_batch_size x num_gpu_batches sequences decode together,
  // split into num_gpu_batches batches that share each unit's weight load.
  Policy policy;
  // Max prompt tokens per prefill forward; 0 = the backend's default (BackendCaps: 1024 on the
  // CPU, 65536 on a GPU, a whole block of FlexGen's workload in one forward, so weights
  // streamed to the GPU move once for it).
  int64_t prefill_chunk = 0;
  int64_t max_context = 0;        // 0 = the model's context length
  // A mixture of experts' measured routing (`offgen calibrate --model`): each layer's experts lie
  // in the unit blobs hottest first, so that the RAM share of weights split between RAM and disk
  // holds the most chosen ones (outputs do not change). Used when its model_id is this model's
  // content id and its layers and experts match; otherwise ignored with a warning on stderr.
  RoutingProfile expert_routing;
  bool count_routing = false;     // count every forward's routing (Engine::routing_counts)
  void validate() const;          // throws offgen::Error(kConfig)
  int64_t batch_size() const { return policy.block_size(); }
};

struct GenerationStats {
  int64_t requests = 0;
  int64_t failed = 0;
  int64_t prefill_tokens = 0;
  int64_t decode_tokens = 0;      // tokens produced by decode forwards
  int64_t completion_tokens = 0;  // all sampled tokens (first one comes from prefill)
  int64_t peak_active = 0;        // most sequences running at once (the batch that ran)
  // Most KV slots one sequence held at once (per layer): its table's slots in use plus a prefill
  // chunk's new tokens before that chunk's compaction (with an eviction policy: at most its budget
  // plus one chunk, docs/kv-eviction.md).
  int64_t peak_kv_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  double wall_seconds = 0;
  LaneTimes lanes;                // busy time per lane over the forwards
  IoStats io;                     // NVMe traffic during generate()
  int64_t h2d_bytes = 0, d2h_bytes = 0;  // host <-> GPU copies (0 on the CPU backend)
  int64_t forwards = 0;  // block forwards run (each over every GPU batch of its block)
  int64_t on_demand_forwards = 0;  // of them, those that moved experts on demand
  // Mixtures of experts whose experts move on demand: experts brought (once per forward and
  // layer each, the union over the block's batches) and their bytes.
  int64_t expert_loads = 0, expert_load_bytes = 0;
  // Of those experts, the ones fetched ahead (guessed from the previous MLP unit's input) and, of
  // them, the ones then routed to.
  int64_t experts_ahead = 0, experts_ahead_used = 0;
  // Mixtures of experts: MLP unit runs and the batches and rows they covered (one run serves a
  // group of batches, each expert one GEMM over its rows of all of them).
  int64_t expert_unit_runs = 0, expert_unit_batches = 0, expert_unit_rows = 0;
  // Shared contexts (requests with a context): built once each — prefilled (its tokens count in
  // prefill_tokens, its time in prefill_seconds) and compressed — and held once for all of them.
  int64_t contexts = 0;           // contexts built
  int64_t context_tokens = 0;     // their tokens (uncompressed)
  double context_seconds = 0;     // prefill + scoring + selection, all contexts
  double context_prefill_seconds = 0;  // the prefill part of it
  // KV pairs over all contexts on the layers the policy compresses (policy_layers), and kept.
  int64_t context_pairs = 0, context_kept_pairs = 0;
  // Their ratio (1 without contexts): what reports call the contexts' retained fraction.
  double context_retained() const {
    return context_pairs > 0
               ? static_cast<double>(context_kept_pairs) / static_cast<double>(context_pairs)
               : 1.0;
  }
  int64_t context_peak_bytes = 0;  // most shared-context K+V bytes held at once
  // Requests whose max_tokens was cut to fit the context window (prompt + completion).
  int64_t max_tokens_clamped = 0;
  bool interrupted = false;  // a stop request ended the call early
  int64_t unfinished = 0;    // requests without a result (an interruption; 0 otherwise)
  // Where an interruption or a failure of the machine ended the call: "prepare" (admission:
  // tokenising, templates, KV reservation), "prefill", "decode" or "output" (on_result); "" when
  // the call ran to its end.
  std::string stopped_in;
};

// A snapshot of the engine's stores (Engine::stats()): where the weights and KV caches are
// homed, their peaks, and the offload file's traffic since the engine was built.
struct EngineStats {
  struct Weights {
    int64_t resident_bytes = 0;  // embedding, output head, norms (never offloaded)
    int64_t device_bytes = 0;    // unit blobs homed in device memory (0 on the CPU backend)
    int64_t ram_bytes = 0;       // unit blobs homed in host RAM (pinned on a GPU)
    int64_t disk_bytes = 0;      // unit blobs homed on disk
    int64_t staging_bytes = 0;   // device staging slots for blobs not used where they live
    int64_t bounce_bytes = 0;    // host bounce buffers for disk reads (GPU backends)
    int64_t h2d_bytes = 0;       // host/disk -> device weight copies so far
  } weights;
  struct Kv {
    int64_t ram_bytes = 0, disk_bytes = 0;  // homes now (memory homes with the slot metadata)
    int64_t peak_ram_bytes = 0, peak_disk_bytes = 0;
    int64_t sequences = 0;        // tables held now
    TierBytes tiers, peak_tiers;  // the same by tier: device = GPU memory
  } kv;
  // The forwards' buffers held now (they only grow: also their peak), by tier: hidden states or
  // activation homes, scratch, logits, KV staging (the stores' part of Placement::forward).
  TierBytes forward;
  struct Disk {
    bool used = false;            // an offload file exists (some share of the policy is on disk)
    std::string path;             // the offload file
    int64_t allocated_bytes = 0;  // extents handed out (the file's size)
    IoStats io;                   // its I/O counters
  } disk;
};

struct Progress {
  int64_t done = 0;
  int64_t total = 0;
  int64_t completion_tokens = 0;
  double elapsed_seconds = 0;
  // The sequences running now (a block: they step together), and the most tokens any of them
  // may still generate (max_tokens less what it has, plus one while its prompt is fed; an
  // end-of-sequence token or a stop string ends one sooner): the steps left in the block at most.
  int64_t running = 0;
  int64_t steps_left = 0;
  double decode_step_seconds = 0;  // the last decode step's wall time (0: none yet)
};

struct GenerateCallbacks {
  // Called once per request as it finishes (any order), with its index in the input vector.
  std::function<void(size_t index, const Result& result)> on_result;
  // Called after each engine iteration.
  std::function<void(const Progress&)> on_progress;
  // Called with the logits row each token is sampled from (step 0 = the prompt's last position).
  std::function<void(size_t index, int64_t step, std::span<const float> logits)> on_logits;
  // Called once per shared context when it has been built (compressed), before its requests run.
  std::function<void(const SharedContext& context)> on_context;
  // Stop requests. `stop` is checked (StopToken::check) between engine iterations, between the
  // requests admitted, between the prefill forwards of a step and inside each forward between its
  // units, so a stop is noticed within one unit's compute; `should_stop` (a callable that may be
  // costly, e.g. Python's signal check) is polled between iterations and prefill forwards only.
  // After a stop request generate() returns promptly with GenerationStats::interrupted; requests
  // not finished by then get FinishReason::kInterrupted and are not passed to on_result (a
  // resumed job runs them again). A callback that throws Stopped stops the call the same way.
  StopToken stop;
  std::function<bool()> should_stop;
};

// A request's prompt tokens: its ids, or its text (chat template applied when asked) tokenised.
// Throws Error(kInput) when the prompt is empty.
std::vector<int32_t> encode_request(const Tokenizer& tokenizer, const Request& r);

class Engine {
 public:
  // Loads the model. `stop` is checked ("load") while the weights are read or generated, between
  // units and inside a dummy model's large tensors; a stop request throws Stopped.
  explicit Engine(EngineOptions options, StopToken stop = {});
  ~Engine();

  const ModelConfig& config() const;
  const Tokenizer& tokenizer() const;
  const EngineOptions& options() const { return options_; }
  // What the KV cache is stored as (options().policy.kv_dtype: the --kv-dtype, or the backend's
  // default, resolved when the engine was built).
  DType kv_dtype() const { return *options_.policy.kv_dtype; }
  int64_t max_context() const { return max_context_; }
  // The model's content identity (runtime/loaders/model_loader.h: OpenedModel::content_id).
  const std::string& model_id() const { return model_id_; }
  // Whether a mixture of experts' experts lie hottest first (options().expert_routing was used).
  bool experts_hot_first() const { return experts_hot_first_; }
  // The routing of every forward since the engine was built (with options().count_routing).
  const RoutingCounts& routing_counts() const { return routing_counts_; }
  // All weight bytes: resident tensors and every unit blob's homes (not the staging).
  int64_t weight_bytes() const;
  // Peak memory by tier: the weights (resident tensors, homes, staging, bounce buffers), the KV
  // homes at their peak, the shared contexts' peak (of the last generate()) and the forwards'
  // buffers — device = GPU memory (on the CPU backend everything but disk is host).
  TierBytes peak_bytes() const;
  // The stores' figures now (see EngineStats).
  EngineStats stats() const;
  const Backend& backend() const { return *backend_; }
  Backend& backend() { return *backend_; }  // not during generate(), except from its callbacks

  // Capacity fitting (the cost model's figures: what the stores allocate), under the tier
  // capacities as Policy::overflow reads them on this backend.
  // Throws Error(kConfig) when weights plus `sequences` KV caches of prompts of `prompt_len`
  // tokens generating `gen_len`, and their forwards, exceed the policy's tier capacities (the
  // pre-flight check of fixed-shape workloads such as bench).
  void check_fits(int64_t sequences, int64_t prompt_len, int64_t gen_len) const;
  // KV slots of a sequence of `prompt` tokens generating up to `max_tokens`, under the KV policy.
  int64_t kv_capacity(int64_t prompt, int64_t max_tokens) const;
  // Bytes per tier of one sequence's KV table of `capacity` slots (with its slot metadata).
  TierBytes kv_need(int64_t capacity) const;
  // Largest number of sequences of such prompts whose KV tables and forwards fit the tier
  // capacities (and the default RAM limit) next to the weights (capped at 2^20; 0 when not even
  // one fits).
  int64_t fit_sequences(int64_t prompt_len, int64_t gen_len) const;
  // Sequences that may run at once: the policy's block, or (no batch sizes given, a tier
  // capacity set) as many as the capacities admit.
  int64_t max_active() const;
  // The largest forward whose buffers admission has reserved so far (they are kept).
  const ForwardShape& forward_reserved() const { return forward_reserved_; }

  // Renders and tokenises a request's prompt (chat template when asked). Throws kInput.
  std::vector<int32_t> encode_prompt(const Request& r) const;

  // Generates all requests; results are returned in input order. Per-request failures (prompt
  // too long, invalid sampling values, a KV cache that can never fit, non-finite logits) become
  // error results; the others still run. Failures of the machine (disk full, I/O errors, out of
  // memory: Error kResource/kIo; a bug: kInternal) are thrown, with no result for the unfinished
  // requests; the engine stays usable. Without --cpu-mem (and --gpu-mem on the CPU backend),
  // admission keeps the RAM the KV caches take within what was available when the engine was
  // built. Requests with a context (Request::context) share it: each distinct context is
  // prefilled once, compressed once by the KV policy (kvzip, kvzip-uniform, h2o, snapkv scored by
  // its first request, sinks, or full) to the KV budget's retained ratio, held once (RAM or GPU
  // memory) while its requests run and released after the last; each request's own KV follows
  // it, uncompressed, at positions after the context's uncompressed length. Throws
  // Error(kConfig) when a request has a context and the KV policy cannot compress one. Not
  // thread-safe: one generate() at a time.
  std::vector<Result> generate(const std::vector<Request>& requests,
                               const GenerateCallbacks& callbacks = {});
  const GenerationStats& last_stats() const { return stats_; }

 private:
  struct Sequence;
  struct SharedContextJob;
  struct Run;
  // generate()'s steps (engine_generate.cpp).
  void plan_contexts(Run& run);
  Progress progress(const Run& run) const;
  std::unique_ptr<Sequence> prepare(Run& run, size_t i);  // null: finished with an error
  void admit(Run& run);
  void step(Run& run);
  void release(Run& run, Sequence& s);
  void finish(Run& run, Sequence& s);
  void abandon(Run& run);
  void close_stats(const Run& run);
  // A stop checkpoint of generate() in phase_ (throws Stopped): polls the callbacks' StopToken,
  // and their should_stop too where `between_steps` (between iterations and prefill forwards).
  void checkpoint(bool between_steps) const;
  TierBytes context_tier(int64_t bytes) const;
  int64_t ram_part(const TierBytes& need) const;
  // The cost model's bytes of forwards up to `shape`, and its buffers allocated now (the block
  // executor's and the logits rows); forward_reserved_ is the largest shape reserved so far.
  TierBytes forward_need(const ForwardShape& shape) const;
  void reserve_forward(const ForwardShape& shape);
  // The shape of the forwards with `s` admitted beside the running sequences of `run`.
  ForwardShape forward_shape_with(const Run& run, const Sequence& s) const;
  bool fits_memory(const TierBytes& need) const;
  void check_memory(const TierBytes& need, const std::string& what) const;
  // Sizes from capacity limits: throws Error(kConfig) when no limit bounds the KV cache.
  void check_kv_limited() const;
  void build_context(SharedContextJob& job);
  void run_prefill(std::vector<Sequence*>& seqs);
  void run_decode(std::vector<Sequence*>& seqs);
  int32_t sample(Sequence& s, size_t row);  // row g of the last forward

  void accept(Sequence& s, int32_t token);  // appends a sampled token; marks finished
  void forward(std::vector<Sequence*>& seqs, const std::vector<std::vector<int32_t>>& chunks);

  EngineOptions options_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<WeightSource> source_;
  std::unique_ptr<DecoderModel> model_;
  std::unique_ptr<NvmeStore> nvme_;
  std::unique_ptr<WeightStore> weights_;
  std::unique_ptr<KvPolicy> kv_policy_;  // null for the full cache
  std::unique_ptr<KvStore> kv_;
  std::unique_ptr<BlockExecutor> executor_;
  std::unique_ptr<ContextRunner> context_runner_;  // shared contexts, over the executor
  std::unique_ptr<KvzipRepeat> kvzip_repeat_;
  std::unique_ptr<Tokenizer> tokenizer_;
  int64_t max_context_ = 0;
  std::string model_id_;
  bool experts_hot_first_ = false;
  RoutingCounts routing_counts_;
  GenerationStats stats_;
  const GenerateCallbacks* callbacks_ = nullptr;  // during generate()
  const char* phase_ = "prepare";                  // what generate() is doing (stopped_in)
  std::unique_ptr<const ModelFacts> facts_;       // the layout the memory accounting reads
  TierBytes weight_need_;                          // weights' bytes per tier
  int64_t ram_limit_ = 0;  // RAM admission may commit (0: the policy's tier limits decide)
  ForwardShape forward_reserved_;
  std::vector<float> logits_;
  std::vector<int32_t> argmax_;  // the last forward's greedy tokens (when greedy_)
  bool greedy_ = false;
  std::unordered_set<int32_t> end_of_generation_;
};

}  // namespace offgen
