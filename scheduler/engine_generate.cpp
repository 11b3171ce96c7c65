// Engine::generate: the continuous-batching loop split into its steps — shared-context planning,
// admission (tokenise, check, reserve KV within the memory limits), one prefill/decode step over
// the running sequences, and finishing (results, KV and contexts released).
#include <algorithm>
#include <map>

#include "runtime/core/argmax.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/core/memory_info.h"
#include "runtime/text/chat_template.h"
#include "scheduler/context_prompt.h"
#include "scheduler/engine_state.h"

namespace offgen {
namespace {

// Failures of the machine rather than of a request (disk full, I/O error, out of memory, a bug):
// they stop generate() instead of becoming the request's final result, so a resumed job redoes
// the request.
bool machine_failure(const Error& e) {
  switch (e.category()) {
    case ErrorCategory::kResource:
    case ErrorCategory::kIo:
    case ErrorCategory::kInternal: return true;
    case ErrorCategory::kConfig:
    case ErrorCategory::kInput: return false;
  }
  return true;
}

}  // namespace

std::vector<Result> Engine::generate(const std::vector<Request>& requests,
                                     const GenerateCallbacks& cb) {
  stats_ = GenerationStats{};
  callbacks_ = &cb;
  phase_ = "prepare";
  stats_.requests = static_cast<int64_t>(requests.size());
  const LaneTimes lanes0 = executor_->times();
  const IoStats io0 = nvme_ ? nvme_->stats() : IoStats{};
  const int64_t h2d0 = weights_->h2d_bytes(), d2h0 = executor_->d2h_bytes();
  const int64_t forwards0 = executor_->forwards();
  const int64_t on_demand0 = executor_->on_demand_forwards();
  const WeightLoadStats loads0 = weights_->load_stats();
  const BlockExecutor::AheadStats ahead0 = executor_->ahead();
  const BlockExecutor::ExpertRunStats runs0 = executor_->expert_runs();
  Run run(requests, cb);
  run.committed = weight_need_;
  for (size_t i = 0; i < requests.size(); ++i) run.waiting.push_back(i);
  // The figures of this call, also when a failure ends it.
  auto close = [&] {
    abandon(run);  // what an interruption or a failure left unfinished
    stats_.wall_seconds = seconds_since(run.t0);
    stats_.h2d_bytes = weights_->h2d_bytes() - h2d0;
    stats_.d2h_bytes = executor_->d2h_bytes() - d2h0;
    stats_.forwards = executor_->forwards() - forwards0;
    stats_.on_demand_forwards = executor_->on_demand_forwards() - on_demand0;
    const WeightLoadStats loads = weights_->load_stats();
    stats_.expert_loads = loads.ranges - loads0.ranges;
    stats_.expert_load_bytes = loads.range_bytes - loads0.range_bytes;
    stats_.experts_ahead = executor_->ahead().fetched - ahead0.fetched;
    stats_.experts_ahead_used = executor_->ahead().used - ahead0.used;
    const BlockExecutor::ExpertRunStats runs = executor_->expert_runs();
    stats_.expert_unit_runs = runs.runs - runs0.runs;
    stats_.expert_unit_batches = runs.batches - runs0.batches;
    stats_.expert_unit_rows = runs.rows - runs0.rows;
    const LaneTimes& l = executor_->times();
    stats_.lanes = LaneTimes{l.load - lanes0.load, l.compute - lanes0.compute,
                             l.store - lanes0.store, l.wall - lanes0.wall, l.bound - lanes0.bound};
    if (nvme_) {
      const IoStats io = nvme_->stats();
      stats_.io.bytes_read = io.bytes_read - io0.bytes_read;
      stats_.io.bytes_written = io.bytes_written - io0.bytes_written;
    }
    callbacks_ = nullptr;
  };
  try {
    plan_contexts(run);
    while (run.pending()) {
      checkpoint(true);
      phase_ = "prepare";
      admit(run);
      if (run.active.empty()) continue;
      step(run);
      sample_anon_peak();
      if (cb.on_progress) cb.on_progress(progress(run));
    }
  } catch (const Stopped& e) {
    stats_.interrupted = true;
    stats_.stopped_in = e.phase();
  } catch (...) {
    stats_.stopped_in = phase_;
    close();
    throw;
  }
  close();
  const RssBytes rss = rss_bytes();
  log_debug("memory after generate: anonymous {}, file pages {}; forwards reserved for {} rows, "
            "{} sequences",
            format_bytes(rss.anon), format_bytes(rss.file), forward_reserved_.rows,
            forward_reserved_.sequences);
  return std::move(run.results);
}

void Engine::checkpoint(bool between_steps) const {
  const GenerateCallbacks* cb = callbacks_;
  if (cb == nullptr) return;
  cb->stop.check(phase_);
  if (between_steps && cb->should_stop && cb->should_stop()) throw Stopped(phase_);
}

Progress Engine::progress(const Run& run) const {
  Progress p{run.done, static_cast<int64_t>(run.requests.size()), stats_.completion_tokens,
             seconds_since(run.t0)};
  p.running = static_cast<int64_t>(run.active.size());
  for (const auto& s : run.active)
    p.steps_left = std::max(p.steps_left, s->max_tokens -
                                              static_cast<int64_t>(s->result.tokens.size()) +
                                              (s->prefilling() ? 1 : 0));
  p.decode_step_seconds = run.decode_step_seconds;
  return p;
}

void Engine::plan_contexts(Run& run) {
  std::map<std::vector<int32_t>, int64_t> index;
  for (size_t i = 0; i < run.requests.size(); ++i) {
    const Request& r = run.requests[i];
    // Under a policy that cannot compress a context such requests fail in prepare(); the rest run.
    if (!r.has_context() || !options_.policy.kv.info().compresses_context()) continue;
    checkpoint(false);  // each context is tokenised
    try {
      ContextSplit sp = split_at_context(*tokenizer_, r);
      auto [it, fresh] = index.try_emplace(sp.context_ids, static_cast<int64_t>(run.jobs.size()));
      if (fresh) {
        auto job = std::make_unique<SharedContextJob>();
        job->tokens.context_ids = std::move(sp.context_ids);
        job->tokens.protected_len = sp.protected_len;
        job->tokens.postfix_ids = std::move(sp.postfix_ids);
        job->tokens.question_ids = {sp.question_ids};
        run.jobs.push_back(std::move(job));
      }
      run.job_of[i] = it->second;
      ++run.jobs[it->second]->remaining;
      run.own[i] = std::move(sp.question_ids);
    } catch (const Error& e) {
      if (machine_failure(e)) throw;
      run.split_error[i] = e.what();
      if (dynamic_cast<const ChatTemplateError*>(&e))
        run.split_kind[i] = RequestErrorKind::kInvalidRequest;
    }
  }
}

TierBytes Engine::context_tier(int64_t bytes) const {
  return backend_->device_is_host() ? TierBytes{0, bytes, 0} : TierBytes{bytes, 0, 0};
}

bool Engine::fits_memory(const TierBytes& need) const {
  if (!options_.policy.fits(need, backend_->device_is_host())) return false;
  if (ram_limit_ == 0) return true;
  return ram_part(need) <= ram_limit_;
}

void Engine::check_memory(const TierBytes& need, const std::string& what) const {
  options_.policy.check_fits(need, backend_->device_is_host(), what);
  OFFGEN_CHECK(ram_limit_ == 0 || ram_part(need) <= ram_limit_, kConfig,
               "{} need {} of RAM but {} is available to this job (the default limit without "
               "--cpu-mem): raise --cpu-mem if the machine has more, lower max_tokens, or move "
               "more to disk (--percent)",
               what, format_bytes(ram_part(need)), format_bytes(ram_limit_));
}

int64_t Engine::ram_part(const TierBytes& need) const {
  return backend_->device_is_host() ? need.device + need.host : need.host;
}

std::unique_ptr<Engine::Sequence> Engine::prepare(Run& run, size_t i) {
  const Request& r = run.requests[i];
  const ModelConfig& c = model_->config();
  auto s = std::make_unique<Sequence>(r.sampling);
  s->index = i;
  s->req = &r;
  s->result.id = r.id;
  try {
    r.sampling.validate();
    s->result.error_in_context =
        r.has_context() && !options_.policy.kv.info().compresses_context();
    OFFGEN_CHECK(!s->result.error_in_context, kInput,
                 "--kv-policy {} cannot compress a shared context; run requests with a context "
                 "under one of: {}",
                 options_.policy.kv.name(), fmt::join(context_policy_names(), ", "));
    if (!run.split_error[i].empty()) s->result.error_kind = run.split_kind[i];
    OFFGEN_CHECK(run.split_error[i].empty(), kInput, "{}", run.split_error[i]);
    s->context = run.job_of[i];
    if (s->context >= 0) {
      SharedContextJob& job = *run.jobs[s->context];
      if (!job.shared && job.error.empty()) {
        try {
          build_context(job);
          const int64_t b = job.shared->bytes();
          run.committed += context_tier(b);
          run.context_bytes += b;
          stats_.context_peak_bytes = std::max(stats_.context_peak_bytes, run.context_bytes);
          if (run.cb.on_context) run.cb.on_context(*job.shared);
        } catch (const Error& e) {
          if (machine_failure(e)) throw;
          job.error = e.what();
        }
      }
      s->result.error_in_context = !job.error.empty();
      OFFGEN_CHECK(job.error.empty(), kInput, "shared context: {}", job.error);
      for (int32_t id : run.own[i])
        OFFGEN_CHECK(id >= 0 && id < c.vocab_size, kInput,
                     "prompt token id {} is outside the vocabulary of {}", id, c.vocab_size);
      s->prompt = run.own[i];
      s->shared = job.shared.get();
      s->pos0 = job.shared->context_length();
    } else {
      s->prompt = encode_prompt(r);
    }
    const int64_t p = static_cast<int64_t>(s->prompt.size());
    s->result.prompt_tokens = s->pos0 + p;
    if (s->pos0 + p >= max_context_) {
      s->result.error_kind = RequestErrorKind::kPromptTooLong;
      OFFGEN_THROW(kInput,
                   "prompt has {} tokens{}; the context window is {} (room is needed for at "
                   "least one generated token)",
                   s->pos0 + p,
                   s->pos0 > 0 ? fmt::format(" ({} of its shared context)", s->pos0)
                               : std::string(),
                   max_context_);
    }
    const int64_t wanted =
        r.forced.empty() ? r.sampling.max_tokens : static_cast<int64_t>(r.forced.size());
    s->max_tokens = std::min(wanted, max_context_ - s->pos0 - p);
    if (s->max_tokens < wanted) ++stats_.max_tokens_clamped;
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
    if (machine_failure(e)) throw;
    s->result.finish_reason = FinishReason::kError;
    s->result.error = e.what();
    if (dynamic_cast<const ChatTemplateError*>(&e))
      s->result.error_kind = RequestErrorKind::kInvalidRequest;
    if (s->result.error_kind == RequestErrorKind::kNone)
      s->result.error_kind = RequestErrorKind::kFailed;
    finish(run, *s);
    return nullptr;
  }
  return s;
}

void Engine::admit(Run& run) {
  // Admit waiting requests into free batch slots. A prepared request whose KV cache does not fit
  // the memory limits next to the running ones waits until some of them finish.
  // The forwards' buffers are reserved once, at the round's largest shape: reserved request by
  // request they would be re-allocated and zeroed as each admitted prompt grows the shape
  // (quadratic in a block of many prompts). Where a reservation can fail for want of disk room
  // (activation homes on disk), each request's comes before it is admitted, as a request's KV
  // extent does.
  const bool reserve_each = options_.policy.act_disk_percent() > 0;
  ForwardShape round = forward_reserved_;
  while (static_cast<int64_t>(run.active.size()) < max_active() &&
         (run.prepared || !run.waiting.empty())) {
    checkpoint(false);  // preparing many requests (templates, tokenisers) can take long
    if (!run.prepared) {
      const size_t i = run.waiting.front();
      run.waiting.pop_front();
      run.prepared = prepare(run, i);
      if (!run.prepared) continue;
    }
    Sequence& s = *run.prepared;
    TierBytes after = run.committed;
    after += kv_need(s.capacity);
    // The forwards' buffers grow with the running sequences (hidden rows, logits) and the
    // largest prompt chunk and table (scratch, scores, KV staging); they are kept at their most.
    const ForwardShape shape = round.max(forward_shape_with(run, s));
    const TierBytes need = after + forward_need(shape);
    if (!fits_memory(need) && !run.active.empty()) break;
    try {
      check_memory(need, fmt::format("the model's weights and this request's KV cache ({} "
                                     "tokens) and forwards",
                                     s.capacity));
    } catch (const Error& e) {  // this request alone does not fit: its own record says so
      s.result.finish_reason = FinishReason::kError;
      s.result.error = e.what();
      s.result.error_kind = RequestErrorKind::kDoesNotFit;
      const auto done = std::move(run.prepared);  // out of the run before its callback
      finish(run, *done);
      continue;
    }
    try {
      if (reserve_each) reserve_forward(shape);
      s.kv = kv_->add(s.capacity, s.compact_to);
    } catch (const Error& e) {
      // The disk tier had no extent for it (free space split among running sequences', or the
      // filesystem full): with sequences running it waits for theirs; alone, the job stops.
      if (e.category() != ErrorCategory::kResource || run.active.empty()) throw;
      break;
    }
    run.committed = after;
    round = shape;
    const auto p = static_cast<int64_t>(s.prompt.size());
    run.prompt_tokens += p;
    run.longest_prompt = std::max(run.longest_prompt, p);
    run.max_capacity = std::max(run.max_capacity, s.capacity);
    run.samplers += s.samples() ? 1 : 0;
    if (s.max_tokens == 0) {
      s.result.finish_reason = FinishReason::kLength;
      const auto done = std::move(run.prepared);
      finish(run, *done);
      continue;
    }
    run.active.push_back(std::move(run.prepared));
    stats_.peak_active = std::max(stats_.peak_active, static_cast<int64_t>(run.active.size()));
  }
  reserve_forward(round);
}

void Engine::step(Run& run) {
  std::vector<Sequence*> pre, dec;
  for (auto& s : run.active) (s->prefilling() ? pre : dec).push_back(s.get());
  if (!pre.empty()) {
    phase_ = "prefill";
    run_prefill(pre);
  }
  if (!dec.empty()) {
    phase_ = "decode";
    const auto t0 = EngineClock::now();
    run_decode(dec);
    run.decode_step_seconds = seconds_since(t0);
  }
  for (auto& s : run.active)
    if (s->finished) {
      const auto done = std::move(s);  // out of the run before its callback (it may throw)
      finish(run, *done);
    }
  std::erase_if(run.active, [](const auto& s) { return !s; });
}

ForwardShape Engine::forward_shape_with(const Run& run, const Sequence& s) const {
  const auto p = static_cast<int64_t>(s.prompt.size());
  return forward_shape(options_.policy, options_.prefill_chunk,
                       static_cast<int64_t>(run.active.size()) + 1, run.prompt_tokens + p,
                       std::max(run.longest_prompt, p), std::max(run.max_capacity, s.capacity),
                       run.samplers + (s.samples() ? 1 : 0));
}

void Engine::release(Run& run, Sequence& s) {
  if (s.kv >= 0) {
    kv_->remove(s.kv);
    run.committed += kv_need(s.capacity) * -1;
    run.prompt_tokens -= static_cast<int64_t>(s.prompt.size());
    run.samplers -= s.samples() ? 1 : 0;
  }
  s.kv = -1;
  if (run.job_of[s.index] >= 0) {
    SharedContextJob& job = *run.jobs[run.job_of[s.index]];
    if (--job.remaining == 0 && job.shared) {  // its last request: release the context
      const int64_t b = job.shared->bytes();
      run.committed += context_tier(-b);
      run.context_bytes -= b;
      job.shared.reset();
    }
  }
}

void Engine::finish(Run& run, Sequence& s) {
  release(run, s);
  s.result.completion_tokens = static_cast<int64_t>(s.result.tokens.size());
  stats_.completion_tokens += s.result.completion_tokens;
  if (s.result.finish_reason == FinishReason::kError) ++stats_.failed;
  run.results[s.index] = std::move(s.result);
  ++run.done;
  if (run.cb.on_result) {
    const char* was = phase_;
    phase_ = "output";
    run.cb.on_result(s.index, run.results[s.index]);
    phase_ = was;
  }
}

void Engine::abandon(Run& run) {
  // Unfinished requests (an interruption or a failure of the machine) keep no result: their KV
  // and contexts are released so that the engine can run again.
  auto drop = [&](std::unique_ptr<Sequence>& s) {
    if (!s) return;
    release(run, *s);
    run.results[s->index].id = s->req->id;
    run.results[s->index].finish_reason = FinishReason::kInterrupted;
    s.reset();
  };
  for (auto& s : run.active) drop(s);
  run.active.clear();
  drop(run.prepared);
  for (size_t i : run.waiting) {
    run.results[i].id = run.requests[i].id;
    run.results[i].finish_reason = FinishReason::kInterrupted;
  }
  run.waiting.clear();
  for (auto& job : run.jobs) job->shared.reset();
  stats_.unfinished = static_cast<int64_t>(run.requests.size()) - run.done;
}

}  // namespace offgen
