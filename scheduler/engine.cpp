// Engine: continuous batching over the Llama steps with all weights in RAM.
#include "scheduler/engine.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/loaders/model_loader.h"
#include "scheduler/calibrate.h"
#include "scheduler/context_compression.h"
#include "scheduler/context_prompt.h"

namespace offgen {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace


void EngineOptions::validate() const {
  OFFGEN_CHECK(backend == "cpu" || backend == "cuda" || backend == "cpu-emulated-device", kConfig,
               "--backend {}: expected cpu or cuda", backend);
  OFFGEN_CHECK(threads >= 0 && threads <= 1024, kConfig, "--threads {} must be in [0, 1024]", threads);
  OFFGEN_CHECK(weight_dtype == "f32" || weight_dtype == "bf16" || weight_dtype == "f16", kConfig,
               "--weight-dtype {}: expected f32, bf16 or f16", weight_dtype);
  OFFGEN_CHECK(weight_dtype != "f16" || backend == "cuda", kConfig,
               "--weight-dtype f16 is a GPU storage (--backend cuda); the CPU GEMM takes f32 or bf16");
  policy.validate();
  policy.weight_storage(weight_dtype);  // throws for an impossible combination
  if (backend != "cpu") {
    // What a backend whose device memory is not host memory supports so far.
    const Policy& p = policy;
    OFFGEN_CHECK(p.act_gpu_percent >= 100, kConfig,
                 "--backend {}: activations stay in GPU memory (--percent WG WC CG CC 100 0)",
                 backend);
    OFFGEN_CHECK(p.cache_gpu_percent >= 100 || (p.cache_cpu_percent >= 100 && p.cpu_cache_compute),
                 kConfig,
                 "--backend {}: the KV cache goes wholly to the GPU (--percent WG WC 100 0 ...) or "
                 "wholly to the CPU with --cpu-cache-compute (--percent WG WC 0 100 ...); cache "
                 "splits and cache on disk are not supported on a GPU yet (got {} {})",
                 backend, p.cache_gpu_percent, p.cache_cpu_percent);
    OFFGEN_CHECK(!p.compress_cache, kConfig,
                 "--backend {}: --compress-cache is not supported on a GPU yet", backend);
  }

  OFFGEN_CHECK(prefill_chunk >= 0, kConfig, "prefill chunk {} must be >= 0", prefill_chunk);
  OFFGEN_CHECK(max_context >= 0, kConfig, "max context {} must be >= 0", max_context);
}

struct Engine::Sequence {
  size_t index = 0;
  const Request* req = nullptr;
  std::vector<int32_t> prompt;
  int64_t n_pos = 0;     // tokens fed so far (the next token's position)
  int64_t n_used = 0;    // slots of the KV table in use (n_pos until the policy evicts)
  int64_t capacity = 0;  // slots of the KV table
  int64_t compact_to = 0;  // slots an overflowing prompt chunk keeps
  int64_t max_tokens = 0;
  int64_t kv = -1;  // KvStore handle
  int64_t pos0 = 0;     // position of the first own token (after a shared context, its length)
  int64_t context = -1;  // the shared context it attends to (index into the jobs), -1: none
  const SharedContext* shared = nullptr;  // that context, held until its last request ends
  Sampler sampler;
  Result result;
  int32_t pending = -1;  // sampled, not yet fed
  bool finished = false;

  Sequence(const SamplingParams& p) : sampler(p) {}
  bool prefilling() const { return n_pos < static_cast<int64_t>(prompt.size()); }
};

Engine::Engine(EngineOptions options) : options_(std::move(options)) {
  options_.validate();
  if (options_.prefill_chunk == 0) options_.prefill_chunk = options_.backend == "cuda" ? 65536 : 2048;
  const std::string storage = options_.policy.weight_storage(options_.weight_dtype);
  backend_ = options_.backend == "cpu-emulated-device"
                 ? make_emulated_device_backend(options_.threads, dtype_from_name(storage))
                 : make_backend(options_.backend, options_.threads, dtype_from_name(storage));
  OpenedModel opened = open_model(options_.model);
  tokenizer_ = std::make_unique<Tokenizer>(std::move(opened.vocab));
  const auto t0 = Clock::now();
  source_ = std::move(opened.source);
  model_ = std::make_unique<LlamaModel>(*source_, *backend_);
  const Policy& p = options_.policy;
  // Capacity check of the weights before anything is staged (the accounting the planner uses).
  facts_ = model_facts(*model_, storage);
  weight_need_ = weight_need(facts_, p);
  p.check_fits(weight_need_, "the model's weights");
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
  weights_ = std::make_unique<WeightStore>(
      *backend_, model_->num_units(), [&](int64_t u) { return model_->unit_bytes(u); },
      [&](int64_t u, void* dst) { model_->build_unit(u, dst); }, p.weight_gpu_percent,
      p.weight_cpu_percent, nvme_.get());
  if (p.kv.evicts()) kv_policy_ = make_kv_policy(p.kv);
  kv_ = std::make_unique<KvStore>(model_->config(), p.cache_gpu_percent + p.cache_cpu_percent,
                                  nvme_.get(), kv_policy_ != nullptr, p.compress_cache,
                                  KvDeviceHomes{backend_.get(), p.cache_gpu_percent >= 100});
  executor_ = std::make_unique<BlockExecutor>(*model_, *weights_, *kv_, p.overlap,
                                              p.act_gpu_percent + p.act_cpu_percent, nvme_.get(),
                                              kv_policy_.get());
  log_debug("loaded {} in {:.2f}s", options_.model, seconds_since(t0));
  OFFGEN_CHECK(tokenizer_->vocab_size() <= model_->config().vocab_size, kInput,
               "{}: tokenizer has {} tokens but the model only {} embeddings", options_.model,
               tokenizer_->vocab_size(), model_->config().vocab_size);
  max_context_ = model_->config().context_length;
  const VocabData& v = tokenizer_->vocab();
  if (v.eos_id >= 0) end_of_generation_.insert(v.eos_id);
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const std::string& t = v.tokens[i];
    const bool control = i < v.token_types.size() && v.token_types[i] == 3;
    if (control && (t == "<|endoftext|>" || t == "<|im_end|>" || t == "<|eot_id|>" ||
                    t == "<|end_of_text|>" || t == "</s>"))
      end_of_generation_.insert(static_cast<int32_t>(i));
  }
  if (options_.max_context > 0) max_context_ = std::min(max_context_, options_.max_context);
}

// A distinct shared context of one generate() call and the requests that name it.
struct Engine::SharedContextJob {
  MultiqueryPrompt tokens;  // context ids, protected prefix, chat postfix, the first question
  int64_t remaining = 0;    // its requests not yet finished
  std::unique_ptr<SharedContext> shared;  // while built
  std::string error;        // why it could not be built (its requests fail with it)
};

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
  if (backend_->device_is_host())
    return {0, resident + w.ram_bytes + w.staging_bytes + k.peak_ram_bytes + stats_.context_peak_bytes,
            w.disk_bytes + k.peak_disk_bytes};
  const bool kv_on_device = !kv_->host_compute();
  return {resident + w.device_bytes + w.staging_bytes + (kv_on_device ? k.peak_ram_bytes : 0) +
              stats_.context_peak_bytes,
          w.ram_bytes + w.bounce_bytes + (kv_on_device ? 0 : k.peak_ram_bytes),
          w.disk_bytes + k.peak_disk_bytes};
}

std::vector<int32_t> encode_request(const Tokenizer& tokenizer, const Request& r) {
  if (!r.prompt_ids.empty()) return r.prompt_ids;
  std::string text;
  if (!r.messages.empty()) {
    text = apply_chat_template(tokenizer.vocab().chat_template, r.messages, true);
  } else if (r.chat) {
    text = apply_chat_template(tokenizer.vocab().chat_template, {{"user", r.prompt}}, true);
  } else {
    text = r.prompt;
  }
  std::vector<int32_t> ids = tokenizer.encode(text, true);
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

std::vector<Result> Engine::generate(const std::vector<Request>& requests,
                                     const GenerateCallbacks& cb) {
  stats_ = GenerationStats{};
  callbacks_ = &cb;
  stats_.requests = static_cast<int64_t>(requests.size());
  const auto t0 = Clock::now();
  const ModelConfig& c = model_->config();
  const LaneTimes lanes0 = executor_->times();
  const IoStats io0 = nvme_ ? nvme_->stats() : IoStats{};
  const int64_t h2d0 = weights_->h2d_bytes(), d2h0 = executor_->d2h_bytes();
  std::vector<Result> results(requests.size());
  std::deque<size_t> waiting;
  for (size_t i = 0; i < requests.size(); ++i) waiting.push_back(i);
  std::vector<std::unique_ptr<Sequence>> active;
  int64_t done = 0;
  TierBytes committed = weight_need_;  // weights + the KV of admitted sequences
  std::unique_ptr<Sequence> prepared;  // tokenised, waiting for KV space

  // Shared contexts: each distinct one (by its tokens) once, with the requests that name it.
  std::vector<std::unique_ptr<SharedContextJob>> jobs;
  std::vector<int64_t> job_of(requests.size(), -1);
  std::vector<std::vector<int32_t>> own(requests.size());  // a context request's own tokens
  std::vector<std::string> split_error(requests.size());
  {
    std::map<std::vector<int32_t>, int64_t> index;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (!requests[i].has_context()) continue;
      OFFGEN_CHECK(is_context_policy(options_.policy.kv.name), kConfig,
                   "--kv-policy {} cannot compress a shared context (request '{}' has one); use "
                   "one of: {}",
                   options_.policy.kv.name, requests[i].id, fmt::join(context_policy_names(), ", "));
      try {
        ContextSplit sp = split_at_context(*tokenizer_, requests[i]);
        auto [it, fresh] = index.try_emplace(sp.context_ids, static_cast<int64_t>(jobs.size()));
        if (fresh) {
          auto job = std::make_unique<SharedContextJob>();
          job->tokens.context_ids = std::move(sp.context_ids);
          job->tokens.protected_len = sp.protected_len;
          job->tokens.postfix_ids = std::move(sp.postfix_ids);
          job->tokens.question_ids = {sp.question_ids};
          jobs.push_back(std::move(job));
        }
        job_of[i] = it->second;
        ++jobs[it->second]->remaining;
        own[i] = std::move(sp.question_ids);
      } catch (const Error& e) {
        split_error[i] = e.what();
      }
    }
  }
  int64_t context_bytes = 0;  // shared contexts held now
  // Where a shared context's kept pairs live: RAM, or GPU memory.
  const auto context_tier = [&](int64_t b) {
    return backend_->device_is_host() ? TierBytes{0, b, 0} : TierBytes{b, 0, 0};
  };

  // Frees a sequence's KV table and its hold on a shared context.
  auto release = [&](Sequence& s) {
    if (s.kv >= 0) {
      kv_->remove(s.kv);
      committed += kv_need(s.capacity) * -1;
    }
    s.kv = -1;
    if (job_of[s.index] >= 0) {
      SharedContextJob& job = *jobs[job_of[s.index]];
      if (--job.remaining == 0 && job.shared) {  // its last request: release the context
        const int64_t b = job.shared->bytes();
        committed += context_tier(-b);
        context_bytes -= b;
        job.shared.reset();
      }
    }
  };
  auto finish = [&](Sequence& s) {
    release(s);
    s.result.completion_tokens = static_cast<int64_t>(s.result.tokens.size());
    stats_.completion_tokens += s.result.completion_tokens;
    if (s.result.finish_reason == FinishReason::kError) ++stats_.failed;
    results[s.index] = std::move(s.result);
    ++done;
    if (cb.on_result) cb.on_result(s.index, results[s.index]);
  };

  while (!waiting.empty() || !active.empty() || prepared) {
    if (cb.should_stop && cb.should_stop()) {  // interrupted: what has not finished stays so
      for (auto& s : active) {
        release(*s);
        s->result.finish_reason = FinishReason::kInterrupted;
        results[s->index] = std::move(s->result);
      }
      active.clear();
      if (prepared) waiting.push_front(prepared->index);
      prepared.reset();
      for (size_t i : waiting) {
        results[i].id = requests[i].id;
        results[i].finish_reason = FinishReason::kInterrupted;
      }
      waiting.clear();
      break;
    }
    // Admit waiting requests into free batch slots. A prepared request whose KV cache does not
    // fit the tier capacities next to the running ones waits until some of them finish.
    while (static_cast<int64_t>(active.size()) < max_active() &&
           (prepared || !waiting.empty())) {
      if (!prepared) {
        const size_t i = waiting.front();
        waiting.pop_front();
        const Request& r = requests[i];
        auto s = std::make_unique<Sequence>(r.sampling);
        s->index = i;
        s->req = &r;
        s->result.id = r.id;
        try {
          r.sampling.validate();
          OFFGEN_CHECK(split_error[i].empty(), kInput, "{}", split_error[i]);
          s->context = job_of[i];
          if (s->context >= 0) {
            SharedContextJob& job = *jobs[s->context];
            if (!job.shared && job.error.empty()) {
              try {
                build_context(job);
                const int64_t b = job.shared->bytes();
                committed += context_tier(b);
                context_bytes += b;
                stats_.context_peak_bytes = std::max(stats_.context_peak_bytes, context_bytes);
                if (cb.on_context) cb.on_context(*job.shared);
              } catch (const Error& e) {
                job.error = e.what();
              }
            }
            OFFGEN_CHECK(job.error.empty(), kInput, "shared context: {}", job.error);
            for (int32_t id : own[i])
              OFFGEN_CHECK(id >= 0 && id < c.vocab_size, kInput,
                           "prompt token id {} is outside the vocabulary of {}", id, c.vocab_size);
            s->prompt = own[i];
            s->shared = job.shared.get();
            s->pos0 = job.shared->context_length();
          } else {
            s->prompt = encode_prompt(r);
          }
          const int64_t p = static_cast<int64_t>(s->prompt.size());
          s->result.prompt_tokens = s->pos0 + p;
          OFFGEN_CHECK(s->pos0 + p < max_context_, kInput,
                       "prompt has {} tokens{}; the context window is {} (room is needed for at "
                       "least one generated token)",
                       s->pos0 + p, s->pos0 > 0 ? fmt::format(" ({} of its shared context)", s->pos0)
                                               : std::string(),
                       max_context_);
          s->max_tokens = std::min(r.forced.empty() ? r.sampling.max_tokens
                                                    : static_cast<int64_t>(r.forced.size()),
                                   max_context_ - s->pos0 - p);
          for (int32_t id : r.forced)
            OFFGEN_CHECK(id >= 0 && id < c.vocab_size, kInput,
                         "forced token id {} is outside the vocabulary of {}", id, c.vocab_size);
          if (s->context >= 0) {  // a request's own KV behind a shared context is never evicted
            s->capacity = std::max<int64_t>(1, p + s->max_tokens - 1);
            s->compact_to = s->capacity;
          } else {
            s->capacity = kv_capacity(p, s->max_tokens);
            s->compact_to = options_.policy.kv.compact_slots(p, s->max_tokens);
          }
        } catch (const Error& e) {
          s->result.finish_reason = FinishReason::kError;
          s->result.error = e.what();
          finish(*s);
          continue;
        }
        prepared = std::move(s);
      }
      auto& s = prepared;
      TierBytes after = committed;
      after += kv_need(s->capacity);
      if (!options_.policy.fits(after) && !active.empty()) break;
      try {
        options_.policy.check_fits(after, fmt::format("the model's weights and this request's KV "
                                                      "cache ({} tokens)", s->capacity));
        s->kv = kv_->add(s->capacity, s->compact_to);
        committed = after;
      } catch (const Error& e) {
        s->result.finish_reason = FinishReason::kError;
        s->result.error = e.what();
        finish(*s);
        prepared.reset();
        continue;
      }
      if (s->max_tokens == 0) {
        s->result.finish_reason = FinishReason::kLength;
        finish(*s);
        prepared.reset();
        continue;
      }
      active.push_back(std::move(s));
    }
    if (active.empty()) continue;

    std::vector<Sequence*> pre, dec;
    for (auto& s : active) (s->prefilling() ? pre : dec).push_back(s.get());
    if (!pre.empty()) run_prefill(pre);
    if (!dec.empty()) run_decode(dec);

    for (auto& s : active)
      if (s->finished) {
        finish(*s);
        s.reset();
      }
    std::erase_if(active, [](const auto& s) { return !s; });
    if (cb.on_progress)
      cb.on_progress(Progress{done, static_cast<int64_t>(requests.size()), stats_.completion_tokens,
                              seconds_since(t0)});
  }
  stats_.wall_seconds = seconds_since(t0);
  stats_.h2d_bytes = weights_->h2d_bytes() - h2d0;
  stats_.d2h_bytes = executor_->d2h_bytes() - d2h0;
  const LaneTimes& l = executor_->times();
  stats_.lanes = LaneTimes{l.load - lanes0.load, l.compute - lanes0.compute,
                           l.store - lanes0.store, l.wall - lanes0.wall};
  if (nvme_) {
    const IoStats io = nvme_->stats();
    stats_.io.bytes_read = io.bytes_read - io0.bytes_read;
    stats_.io.bytes_written = io.bytes_written - io0.bytes_written;
  }
  callbacks_ = nullptr;
  return results;
}

// Feeds each sequence's chunk of tokens, then samples from the last row of those that are due.
void Engine::forward(std::vector<Sequence*>& seqs, const std::vector<std::vector<int32_t>>& chunks) {
  // GPU batches of at most gpu_batch_size sequences; they share each unit's weight load.
  const size_t gbs = static_cast<size_t>(options_.policy.gpu_batch_size);
  std::vector<BatchInput> batches;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (i % gbs == 0) batches.emplace_back();
    BatchInput& b = batches.back();
    const int64_t n_pos = seqs[i]->pos0 + seqs[i]->n_pos;
    if (seqs[i]->shared) {
      b.prefix.resize(b.spans.size(), nullptr);
      b.prefix.push_back(seqs[i]->shared->layer(0));
    } else if (!b.prefix.empty()) {
      b.prefix.push_back(nullptr);
    }
    b.spans.push_back(SeqSpan{static_cast<int64_t>(b.ids.size()),
                              static_cast<int64_t>(chunks[i].size()), seqs[i]->n_used});
    b.ids.insert(b.ids.end(), chunks[i].begin(), chunks[i].end());
    for (size_t t = 0; t < chunks[i].size(); ++t)
      b.positions.push_back(static_cast<int32_t>(n_pos + static_cast<int64_t>(t)));
    b.kv.push_back(seqs[i]->kv);
  }
  // Greedy requests sample on the device (only the token ids come back) unless logits are wanted.
  greedy_ = !(callbacks_ && callbacks_->on_logits);
  for (const Sequence* s : seqs)
    greedy_ = greedy_ && s->req->sampling.temperature == 0.0f && s->req->forced.empty();
  if (greedy_) {
    argmax_.resize(seqs.size());
    executor_->run(batches, nullptr, argmax_.data());
  } else {
    logits_.resize(seqs.size() * model_->config().vocab_size);
    executor_->run(batches, logits_.data());
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = *seqs[i];
    const auto n = static_cast<int64_t>(chunks[i].size());
    s.n_pos += n;
    s.n_used = kv_slots_after(s.n_used, n, s.capacity, s.compact_to, kv_policy_ != nullptr);
  }
}

int32_t Engine::sample(Sequence& s, size_t g) {
  if (greedy_) return argmax_[g];  // the device's argmax (the sampler's greedy choice)
  const float* row = logits_.data() + g * model_->config().vocab_size;
  const std::span<const float> logits(row, static_cast<size_t>(model_->config().vocab_size));
  if (callbacks_ && callbacks_->on_logits)
    callbacks_->on_logits(s.index, static_cast<int64_t>(s.result.tokens.size()), logits);
  const std::vector<int32_t>& forced = s.req->forced;
  if (!forced.empty()) return forced[s.result.tokens.size()];
  return s.sampler.sample(logits);
}

ContextForward Engine::executor_forward() {
  return [this](const std::vector<int32_t>& ids, const std::vector<int32_t>& positions,
                const std::vector<SeqSpan>& seqs, const std::vector<std::vector<KvSeqView>>& views,
                const KvSlotPolicy* policy, std::vector<float>& logits) {
    std::vector<BatchInput> batches(1);
    BatchInput& b = batches[0];
    b.ids = ids;
    b.positions = positions;
    b.spans = seqs;
    b.external = &views;
    b.external_policy = policy;
    logits.resize(seqs.size() * model_->config().vocab_size);
    executor_->run(batches, logits.data());
  };
}

void Engine::build_context(SharedContextJob& job) {
  const auto t0 = Clock::now();
  const ModelConfig& c = model_->config();
  const std::vector<int32_t>& ids = job.tokens.context_ids;
  const auto n = static_cast<int64_t>(ids.size());
  for (int32_t id : ids)
    OFFGEN_CHECK(id >= 0 && id < c.vocab_size, kInput,
                 "context token id {} is outside the vocabulary of {}", id, c.vocab_size);
  OFFGEN_CHECK(n + 1 < max_context_, kInput,
               "the context has {} tokens; the context window is {} (room is needed for a "
               "question and an answer)",
               n, max_context_);
  if (!context_runner_)
    context_runner_ = std::make_unique<ContextRunner>(c, *backend_, executor_forward());
  // The full cache of the context (in RAM for the time of the build), then one compression.
  const ContextCache cache = context_runner_->prefill(ids);
  stats_.prefill_tokens += n;
  stats_.context_prefill_seconds += seconds_since(t0);
  if (!kvzip_repeat_) kvzip_repeat_ = std::make_unique<KvzipRepeat>(KvzipRepeat::from(*tokenizer_));
  ContextCompressor compressor(*context_runner_, cache, job.tokens, *kvzip_repeat_,
                               options_.policy.kv);
  const KvPolicyConfig& kv = options_.policy.kv;
  const double ratio = kv.name == "full" ? 1.0 : compressor.ratio_of_budget(kv.budget);
  const auto kept = compressor.keep(kv.name, ratio);
  job.shared = std::make_unique<SharedContext>(*backend_, c, cache, kept, n);
  const double dt = seconds_since(t0);
  ++stats_.contexts;
  stats_.context_tokens += n;
  stats_.context_seconds += dt;
  stats_.prefill_seconds += dt;
  stats_.context_pairs += c.n_layers * c.n_kv_heads * n;
  stats_.context_kept_pairs += job.shared->kept_pairs();
}

void Engine::check_fits(int64_t sequences, int64_t capacity) const {
  options_.policy.check_fits(
      block_need(facts_, options_.policy, capacity, sequences),
      fmt::format("the model's weights and the KV cache of {} sequences of {} tokens", sequences,
                  capacity));
}

TierBytes Engine::kv_need(int64_t capacity) const {
  return offgen::kv_need(facts_, options_.policy, capacity);
}

int64_t Engine::kv_capacity(int64_t prompt, int64_t max_tokens) const {
  return options_.policy.kv.table_slots(prompt, max_tokens);
}

int64_t Engine::fit_sequences(int64_t capacity) const {
  const TierBytes one = kv_need(capacity);
  const Policy& p = options_.policy;
  int64_t n = int64_t{1} << 20;
  auto limit = [&](int64_t cap, int64_t used, int64_t per) {
    if (cap == 0 || per == 0) return;
    n = std::min(n, cap > used ? (cap - used) / per : 0);
  };
  limit(p.gpu_mem, weight_need_.device, one.device);
  limit(p.cpu_mem, weight_need_.host, one.host);
  limit(p.disk_mem, weight_need_.disk, one.disk);
  return n;
}

int64_t Engine::max_active() const {
  const Policy& p = options_.policy;
  // Without given batch sizes a capacity limit decides how many sequences run (admission checks
  // each one's KV cache against it).
  return p.batch_given || !p.has_capacity_limit() ? p.block_size() : int64_t{1} << 20;
}

void Engine::accept(Sequence& s, int32_t tok) {
  const SamplingParams& sp = s.req->sampling;
  const bool forced = !s.req->forced.empty();
  if (!sp.ignore_eos && !forced && end_of_generation_.count(tok)) {
    s.result.finish_reason = FinishReason::kStop;
    s.finished = true;
    return;
  }
  s.result.tokens.push_back(tok);
  std::string& text = s.result.text;
  const size_t before = text.size();
  text += tokenizer_->token_bytes(tok);
  static const std::vector<std::string> kNoStops;
  for (const std::string& stop : forced ? kNoStops : sp.stop) {
    const size_t from = before >= stop.size() ? before - stop.size() + 1 : 0;
    const size_t at = text.find(stop, from);
    if (at != std::string::npos) {
      text.resize(at);
      s.result.finish_reason = FinishReason::kStop;
      s.finished = true;
      return;
    }
  }
  if (static_cast<int64_t>(s.result.tokens.size()) >= s.max_tokens) {
    s.result.finish_reason = FinishReason::kLength;
    s.finished = true;
    return;
  }
  s.pending = tok;
}

void Engine::run_prefill(std::vector<Sequence*>& seqs) {
  const auto t0 = Clock::now();
  // Group sequences into forwards of at most prefill_chunk tokens; long prompts go in pieces.
  size_t i = 0;
  while (i < seqs.size()) {
    std::vector<Sequence*> group;
    std::vector<std::vector<int32_t>> chunks;
    int64_t budget = options_.prefill_chunk;
    while (i < seqs.size() && budget > 0) {
      Sequence* s = seqs[i];
      const int64_t left = static_cast<int64_t>(s->prompt.size()) - s->n_pos;
      const int64_t take = std::min(left, budget);
      chunks.emplace_back(s->prompt.begin() + s->n_pos, s->prompt.begin() + s->n_pos + take);
      group.push_back(s);
      budget -= take;
      stats_.prefill_tokens += take;
      if (take == left) ++i;
      else break;  // the rest of this prompt goes in the next forward
    }
    forward(group, chunks);
    for (size_t g = 0; g < group.size(); ++g) {
      Sequence* s = group[g];
      if (s->prefilling()) continue;
      accept(*s, sample(*s, g));
    }
  }
  stats_.prefill_seconds += seconds_since(t0);
}

void Engine::run_decode(std::vector<Sequence*>& seqs) {
  const auto t0 = Clock::now();
  std::vector<std::vector<int32_t>> chunks;
  for (Sequence* s : seqs) chunks.push_back({s->pending});
  forward(seqs, chunks);
  stats_.decode_tokens += static_cast<int64_t>(seqs.size());
  for (size_t g = 0; g < seqs.size(); ++g)
    accept(*seqs[g], sample(*seqs[g], g));
  stats_.decode_seconds += seconds_since(t0);
}

}  // namespace offgen
