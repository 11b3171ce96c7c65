// Engine: construction (backend, model, stores, executor) and the memory accounting admission
// uses; generate() and its steps are in engine_generate.cpp and engine_step.cpp.
#include "scheduler/engine.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>

#include "policies/model_facts.h"
#include "runtime/core/error.h"
#include "runtime/core/formats.h"
#include "runtime/core/log.h"
#include "runtime/core/memory_info.h"
#include "runtime/loaders/model_loader.h"
#include "scheduler/context_compression.h"
#include "runtime/text/chat_template.h"
#include "scheduler/context_prompt.h"
#include "scheduler/engine_state.h"

namespace offgen {

namespace {

// The expert order that `routing` gives the model `model_id` of config `c`: hottest first when it
// was measured on this model (same content, layers and experts); else index order, with a warning
// where routing was given for another model.
ExpertOrder expert_order_for(const RoutingProfile& routing, const std::string& model_id,
                             const ModelConfig& c, const std::string& spec) {
  if (routing.empty() || !c.moe()) return {};
  const RoutingCounts& r = routing.counts;
  bool fits = routing.model_id == model_id && static_cast<int64_t>(r.counts.size()) == c.n_layers;
  for (const std::vector<int64_t>& layer : r.counts)
    fits = fits && static_cast<int64_t>(layer.size()) == c.n_experts;
  if (!fits) {
    log_warn("the routing statistics given ({}) do not match {} (another model, or other "
             "layers or experts): its experts keep their index order",
             routing.model.empty() ? routing.model_id : routing.model, spec);
    return {};
  }
  log_info("experts of each layer placed hottest first ({} rows routed, {}): a share of the "
           "weights in RAM holds the most chosen ones",
           *std::max_element(r.rows.begin(), r.rows.end()), routing.sample);
  return hot_first_order(r);
}

// The storages `caps` lists, for messages: plain ones by name, GGML block formats as a group.
std::string storage_list(const BackendCaps& caps) {
  std::vector<std::string_view> names{"native"};
  bool blocks = false;
  for (const FormatTraits& f : all_formats()) {
    if (!caps.takes(f.type)) continue;
    if (f.ggml_type != kNoGgmlType && f.block_elems > 1)
      blocks = true;
    else
      names.push_back(f.name);
  }
  if (blocks) names.push_back("GGML block formats");
  const std::string_view last = names.back();
  names.pop_back();
  return fmt::format("{} or {}", fmt::join(names, ", "), last);
}

}  // namespace

void EngineOptions::validate() const {
  const BackendCaps caps = backend_caps(backend);
  const std::string_view be = backend_name(backend);
  OFFGEN_CHECK(threads >= 0 && threads <= 1024, kConfig, "--threads {} must be in [0, 1024]", threads);
  if (!weight_dtype.native && !caps.takes(weight_dtype.storage)) {
    const DType t = weight_dtype.storage;
    std::vector<std::string_view> takers;
    for (BackendKind k : backend_kinds())
      if (backend_user_selectable(k) && backend_caps(k).takes(t)) takers.push_back(backend_name(k));
    OFFGEN_CHECK(!takers.empty(), kConfig, "--weight-dtype {}: no backend multiplies by it",
                 dtype_name(t));
    OFFGEN_THROW(kConfig, "--weight-dtype {} is a storage of --backend {}; --backend {} takes {}",
                 dtype_name(t), fmt::join(takers, " or "), be, storage_list(caps));
  }
  policy.validate();
  const WeightMode storage = policy.weight_storage(weight_dtype);  // throws for impossible ones
  OFFGEN_CHECK(storage.native || caps.takes(storage.storage), kConfig,
               "--backend {}: no {} matmul weights (--compress-weight)", be, storage.name());
  // What the backend supports of the placement (a GPU backend, so far: activations and the KV
  // cache in GPU memory, or the KV cache in host memory with its attention on the CPU).
  const Policy& p = policy;
  OFFGEN_CHECK(caps.activation_offload || p.act_gpu_percent >= 100, kConfig,
               "--backend {}: activations stay in GPU memory (--percent WG WC CG CC 100 0)", be);
  OFFGEN_CHECK(caps.cpu_cache_compute || !p.cpu_cache_compute, kConfig,
               "--backend {}: --cpu-cache-compute is not supported by this backend", be);
  OFFGEN_CHECK(caps.kv_split || p.cache_gpu_percent >= 100 ||
                   (p.cache_cpu_percent >= 100 && p.cpu_cache_compute),
               kConfig,
               "--backend {}: the KV cache goes wholly to the GPU (--percent WG WC 100 0 ...) or "
               "wholly to the CPU with --cpu-cache-compute (--percent WG WC 0 100 ...); cache "
               "splits and cache on disk are not supported on a GPU yet (got {} {})",
               be, p.cache_gpu_percent, p.cache_cpu_percent);
  OFFGEN_CHECK(caps.kv_on_disk || p.cache_disk_percent() <= 0, kConfig,
               "--backend {}: the KV cache on disk is not supported by this backend yet (got {} {} "
               "on the GPU and CPU)",
               be, p.cache_gpu_percent, p.cache_cpu_percent);
  OFFGEN_CHECK(!p.kv_dtype_auto, kConfig,
               "--kv-dtype auto asks the planner to choose: give it with --policy auto");
  const DType kv = p.kv_storage(caps);
  OFFGEN_CHECK(caps.stores_kv(kv), kConfig,
               "--backend {} stores the KV cache as {}; not {}{}", be, caps.kv_dtype_list(),
               dtype_name(kv), kv == DType::kQ4G64 ? " (--compress-cache)" : "");

  OFFGEN_CHECK(prefill_chunk >= 0, kConfig, "prefill chunk {} must be >= 0", prefill_chunk);
  OFFGEN_CHECK(max_context >= 0, kConfig, "max context {} must be >= 0", max_context);
}

Engine::Engine(EngineOptions options, StopToken stop) : options_(std::move(options)) {
  options_.validate();
  const BackendCaps caps = backend_caps(options_.backend);
  if (options_.prefill_chunk == 0) options_.prefill_chunk = caps.default_prefill_chunk;
  // The KV dtype the stores use, named in the options from here on (reports, the fingerprint).
  options_.policy.kv_dtype = options_.policy.kv_storage(caps);
  const WeightMode storage = options_.policy.weight_storage(options_.weight_dtype);
  backend_ = make_backend(options_.backend, options_.threads, storage);
  auto memory = [](const char* at) {
    const RssBytes r = rss_bytes();
    log_debug("memory {}: anonymous {}, file pages {}", at, format_bytes(r.anon),
              format_bytes(r.file));
  };
  trim_free_memory();  // what earlier work (a calibration, an earlier engine) freed
  memory("before the model");
  OpenedModel opened = open_model(options_.model, stop);
  memory("model opened");
  tokenizer_ = std::make_unique<Tokenizer>(std::move(opened.vocab));
  memory("tokenizer");
  model_id_ = std::move(opened.content_id);
  const auto t0 = EngineClock::now();
  source_ = std::move(opened.source);
  const ExpertOrder order = expert_order_for(options_.expert_routing, model_id_,
                                             source_->config(), options_.model);
  experts_hot_first_ = !order.empty();
  model_ = std::make_unique<DecoderModel>(*source_, *backend_, options_.max_context, order);
  if (options_.count_routing) model_->count_routing(&routing_counts_);
  // The file's pages of tensors copied out leave the resident set (they count for nothing the
  // placement holds); so do each unit's once the weight store has homed it.
  source_->release_pages();
  memory("resident tensors");
  const Policy& p = options_.policy;
  // Capacity check of the weights before anything is staged (the accounting the planner uses).
  facts_ = std::make_unique<const ModelFacts>(model_facts(*model_, storage.name()));
  weight_need_ = weight_need(*facts_, p);
  const Placement placement = facts_->placement(p);
  p.check_fits(weight_need_, backend_->device_is_host(), "the model's weights");
  // No RAM limit given: admit KV caches within the RAM available now (with 10% to spare), so a
  // request asking for a huge max_tokens cannot take the machine down.
  const bool ram_limited = p.cpu_mem > 0 || (backend_->device_is_host() && p.gpu_mem > 0);
  if (!ram_limited) {
    const int64_t avail = available_ram_bytes();
    if (avail > 0) ram_limit_ = ram_part(weight_need_) + avail / 10 * 9;
  }
  check_kv_limited();
  if (p.uses_disk()) {
    NvmeStoreOptions no;
    no.dir = p.offload_dir;
    if (no.dir.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      no.dir = tmp && *tmp ? tmp : "/tmp";
    }
    no.queue_depth = static_cast<uint32_t>(p.io_queue_depth);
    no.capacity_bytes = static_cast<uint64_t>(p.disk_mem);
    nvme_ = std::make_unique<NvmeStore>(no);
  }
  std::vector<uint8_t> build_scratch;
  weights_ = std::make_unique<WeightStore>(
      *backend_, model_->num_units(), [&](int64_t u) { return model_->unit_bytes(u); },
      [&](int64_t u, void* dst) {
        stop.check("load");  // between units (a dummy model's source checks inside tensors)
        model_->build_unit(u, dst, &build_scratch);
        source_->release_pages();
      },
      placement, nvme_.get(), static_cast<int>(model_->weight_slots()),
      // A mixture of experts' experts move on demand: only those a step routes to.
      [&](int64_t u) { return model_->unit_head_bytes(u); });
  std::vector<uint8_t>().swap(build_scratch);  // a matrix's source rows: not needed past the build
  memory("weight store");
  if (p.kv.evicts()) kv_policy_ = make_kv_policy(p.kv);
  kv_ = std::make_unique<KvStore>(model_->config(), placement, nvme_.get(), kv_policy_ != nullptr,
                                  *p.kv_dtype, KvDeviceHomes{backend_.get()});
  executor_ = std::make_unique<BlockExecutor>(*model_, *weights_, *kv_, p.overlap, placement,
                                              nvme_.get(), kv_policy_.get());
  stop.check("load");
  log_debug("loaded {} in {:.2f}s", options_.model, seconds_since(t0));
  sample_anon_peak();
  OFFGEN_CHECK(tokenizer_->vocab_size() <= model_->config().vocab_size, kInput,
               "{}: tokenizer has {} tokens but the model only {} embeddings", options_.model,
               tokenizer_->vocab_size(), model_->config().vocab_size);
  max_context_ = model_->config().context_length;
  for (int32_t id : tokenizer_->end_of_generation()) end_of_generation_.insert(id);
  if (options_.max_context > 0) max_context_ = std::min(max_context_, options_.max_context);
}


Engine::~Engine() = default;

const ModelConfig& Engine::config() const { return model_->config(); }
const Tokenizer& Engine::tokenizer() const { return *tokenizer_; }
int64_t Engine::weight_bytes() const {
  const WeightStoreStats& w = weights_->stats();
  return model_->resident_bytes() + w.device_bytes + w.ram_bytes + w.disk_bytes;
}

TierBytes Engine::peak_bytes() const {
  const WeightStoreStats& w = weights_->stats();
  const KvStoreStats& k = kv_->stats();
  const int64_t resident = model_->resident_bytes();
  const TierBytes f = stats().forward;
  if (backend_->device_is_host())
    return {0,
            resident + w.ram_bytes + w.staging_bytes + k.peak_ram_bytes +
                stats_.context_peak_bytes + f.memory(),
            w.disk_bytes + k.peak_disk_bytes + f.disk};
  return {resident + w.device_bytes + w.staging_bytes + k.peak_tiers.device +
              stats_.context_peak_bytes + f.device,
          w.ram_bytes + w.bounce_bytes + k.peak_tiers.host + f.host,
          w.disk_bytes + k.peak_disk_bytes + f.disk};
}

EngineStats Engine::stats() const {
  EngineStats s;
  const WeightStoreStats& w = weights_->stats();
  s.weights.resident_bytes = model_->resident_bytes();
  s.weights.device_bytes = w.device_bytes;
  s.weights.ram_bytes = w.ram_bytes;
  s.weights.disk_bytes = w.disk_bytes;
  s.weights.staging_bytes = w.staging_bytes;
  s.weights.bounce_bytes = w.bounce_bytes;
  s.weights.h2d_bytes = weights_->h2d_bytes();
  const KvStoreStats& k = kv_->stats();
  s.kv.ram_bytes = k.ram_bytes;
  s.kv.disk_bytes = k.disk_bytes;
  s.kv.peak_ram_bytes = k.peak_ram_bytes;
  s.kv.peak_disk_bytes = k.peak_disk_bytes;
  s.kv.sequences = k.sequences;
  s.kv.tiers = k.tiers;
  s.kv.peak_tiers = k.peak_tiers;
  s.forward = executor_->held();
  // The logits rows the engine samples from: the device's own where device memory is host memory.
  const int64_t logits = (static_cast<int64_t>(logits_.capacity()) * 4 + 4095) / 4096 * 4096;
  (backend_->device_is_host() ? s.forward.device : s.forward.host) += logits;
  if (nvme_) {
    s.disk.used = true;
    s.disk.path = nvme_->path();
    s.disk.allocated_bytes = static_cast<int64_t>(nvme_->allocated_bytes());
    s.disk.io = nvme_->stats();
  }
  return s;
}

std::vector<int32_t> encode_request(const Tokenizer& tokenizer, const Request& r) {
  if (!r.prompt_ids.empty()) return r.prompt_ids;
  std::vector<int32_t> ids;
  if (r.chat || !r.messages.empty()) {
    ChatOptions o;
    o.tools_json = r.tools_json;
    o.kwargs_json = r.chat_kwargs_json;
    ids = tokenizer.encode_marked(apply_chat_template(
        tokenizer, r.messages.empty() ? std::vector<ChatMessage>{{"user", r.prompt}} : r.messages,
        std::move(o)));
  } else {
    ids = tokenizer.encode(r.prompt, r.parse_special);
  }
  OFFGEN_CHECK(!ids.empty(), kInput, "prompt is empty");
  return ids;
}

std::vector<int32_t> Engine::encode_prompt(const Request& r) const {
  for (int32_t id : r.prompt_ids)
    OFFGEN_CHECK(id >= 0 && id < model_->config().vocab_size, kInput,
                 "prompt token id {} is outside the vocabulary of {}", id,
                 model_->config().vocab_size);
  return encode_request(*tokenizer_, r);
}

void Engine::check_fits(int64_t sequences, int64_t prompt_len, int64_t gen_len) const {
  Workload w;
  w.prompt_len = prompt_len;
  w.gen_len = gen_len;
  w.prefill_chunk = options_.prefill_chunk;
  check_memory(block_need(*facts_, options_.policy, w, sequences),
               fmt::format("the model's weights and the KV cache and forwards of {} sequences of "
                           "{} tokens",
                           sequences, kv_capacity(prompt_len, gen_len)));
}

TierBytes Engine::kv_need(int64_t capacity) const {
  return offgen::kv_need(*facts_, options_.policy, capacity);
}

int64_t Engine::kv_capacity(int64_t prompt, int64_t max_tokens) const {
  return options_.policy.kv.table_slots(prompt, max_tokens);
}

int64_t Engine::fit_sequences(int64_t prompt_len, int64_t gen_len) const {
  Workload w;
  w.prompt_len = prompt_len;
  w.gen_len = gen_len;
  w.prefill_chunk = options_.prefill_chunk;
  // The need grows with the count: the largest count that fits, by bisection.
  int64_t lo = 0, hi = int64_t{1} << 20;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits_memory(block_need(*facts_, options_.policy, w, mid))) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

TierBytes Engine::forward_need(const ForwardShape& shape) const {
  return offgen::forward_need(*facts_, options_.policy, shape).total();
}

void Engine::reserve_forward(const ForwardShape& shape) {
  if (forward_reserved_.covers(shape)) return;
  executor_->reserve(shape);
  logits_.reserve(static_cast<size_t>(shape.sequences * model_->config().vocab_size));
  forward_reserved_ = forward_reserved_.max(shape);
}

void Engine::check_kv_limited() const {
  const Policy& p = options_.policy;
  if (p.batch_given() || !p.has_capacity_limit()) return;
  // Sizes from capacity limits: one of them (or the default RAM limit) must bound the KV cache,
  // or admission, and bench's fit, would be unbounded. Where device memory is host memory the
  // RAM limit bounds the device and host tiers together.
  const TierBytes one = kv_need(1);
  const bool dih = backend_->device_is_host();
  const bool ram_bound = dih ? p.ram_mem() > 0 && ram_part(one) > 0
                             : (p.gpu_mem > 0 && one.device > 0) || (p.cpu_mem > 0 && one.host > 0);
  const bool bound = ram_bound || (p.disk_mem > 0 && one.disk > 0) ||
                     (ram_limit_ > 0 && ram_part(one) > 0);
  if (bound) return;
  std::vector<std::string> on, flags;
  if (dih && ram_part(one) > 0) {
    on.emplace_back("RAM"), flags.emplace_back("--cpu-mem");
  } else {
    if (one.device > 0) on.emplace_back("GPU memory"), flags.emplace_back("--gpu-mem");
    if (one.host > 0) on.emplace_back("host RAM"), flags.emplace_back("--cpu-mem");
  }
  if (one.disk > 0) on.emplace_back("disk"), flags.emplace_back("--disk-mem");
  std::vector<std::string> given;
  if (p.gpu_mem > 0) given.emplace_back("--gpu-mem");
  if (p.cpu_mem > 0) given.emplace_back("--cpu-mem");
  if (p.disk_mem > 0) given.emplace_back("--disk-mem");
  OFFGEN_THROW(kConfig,
               "no batch size is given and the KV cache is in {}, which {} does not limit: "
               "nothing would bound how many sequences run at once; give --gpu-batch-size N, "
               "or {}",
               fmt::join(on, " and "), fmt::join(given, " and "), fmt::join(flags, " or "));
}

int64_t Engine::max_active() const {
  const Policy& p = options_.policy;
  // Without given batch sizes a capacity limit decides how many sequences run (admission checks
  // each one's KV cache against it).
  return p.batch_given() || !p.has_capacity_limit() ? p.block_size() : int64_t{1} << 20;
}

}  // namespace offgen
