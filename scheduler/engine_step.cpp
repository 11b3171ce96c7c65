// Engine steps over the block executor: one forward of a ragged batch, sampling (greedy on the
// device or the sampler on the host), accepting a token (EOS, stop strings, lengths), prefill in
// chunks, one decode step, and building a shared context.
#include <algorithm>

#include "runtime/core/argmax.h"
#include "runtime/core/error.h"
#include "scheduler/context_compression.h"
#include "scheduler/engine_state.h"

namespace offgen {

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
  const auto check = [this] { checkpoint(false); };  // between the forward's units
  // Where device memory is host memory the logits rows are written here in place (the one copy
  // the memory accounting counts); on a GPU only sampled ones come back.
  const bool host_logits = !greedy_ || backend_->device_is_host();
  if (host_logits) logits_.resize(seqs.size() * model_->config().vocab_size);
  if (greedy_) argmax_.resize(seqs.size());
  executor_->run(batches, host_logits ? logits_.data() : nullptr,
                 greedy_ ? argmax_.data() : nullptr, check);
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = *seqs[i];
    const auto n = static_cast<int64_t>(chunks[i].size());
    // Slots held during this forward: a replacement overwrites within the table; an append or an
    // overflowing chunk (attended in scratch, then compacted) adds the chunk to the slots in use.
    const bool evicts = kv_policy_ != nullptr;
    const int64_t held =
        kv_write_kind(s.n_used, n, s.capacity, s.compact_to, evicts) == KvWrite::kReplace
            ? s.capacity
            : s.n_used + n;
    stats_.peak_kv_tokens = std::max(stats_.peak_kv_tokens, held);
    s.n_pos += n;
    s.n_used = kv_slots_after(s.n_used, n, s.capacity, s.compact_to, kv_policy_ != nullptr);
  }
}

int32_t Engine::sample(Sequence& s, size_t g) {
  if (greedy_) return argmax_[g];  // the device's argmax (kNonFiniteRow for a bad row)
  const float* row = logits_.data() + g * model_->config().vocab_size;
  const std::span<const float> logits(row, static_cast<size_t>(model_->config().vocab_size));
  if (callbacks_ && callbacks_->on_logits)
    callbacks_->on_logits(s.index, static_cast<int64_t>(s.result.tokens.size()), logits);
  if (!all_finite(logits)) return kNonFiniteRow;
  const std::vector<int32_t>& forced = s.req->forced;
  if (!forced.empty()) return forced[s.result.tokens.size()];
  return s.sampler.sample(logits);
}

void Engine::build_context(SharedContextJob& job) {
  const auto t0 = EngineClock::now();
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
  if (!context_runner_) {
    // The context's forwards run on the block executor, with the engine's placement.
    ContextForward forward =
        [this](const std::vector<int32_t>& ids, const std::vector<int32_t>& positions,
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
          executor_->run(batches, logits.data(), nullptr, [this] { checkpoint(false); });
        };
    context_runner_ = std::make_unique<ContextRunner>(c, *backend_, std::move(forward),
                                                      kv_->kv_dtype());
  }
  // The full cache of the context (in RAM for the time of the build), then one compression.
  phase_ = "prefill";  // admission resumes after it
  const ContextCache cache = context_runner_->prefill(ids);
  stats_.prefill_tokens += n;
  stats_.context_prefill_seconds += seconds_since(t0);
  if (!kvzip_repeat_) kvzip_repeat_ = std::make_unique<KvzipRepeat>(KvzipRepeat::from(*tokenizer_));
  ContextCompressor compressor(*context_runner_, cache, job.tokens, *kvzip_repeat_,
                               options_.policy.kv);
  const KvPolicyConfig& kv = options_.policy.kv;
  // A policy without a budget (full) keeps the whole context.
  const double ratio =
      kv.info().takes(KvParam::kBudget) ? compressor.ratio_of_budget(kv.budget) : 1.0;
  const auto kept = compressor.keep(kv.kind, ratio);
  job.shared = std::make_unique<SharedContext>(*backend_, c, cache, kept, n);
  const double dt = seconds_since(t0);
  ++stats_.contexts;
  stats_.context_tokens += n;
  stats_.context_seconds += dt;
  stats_.prefill_seconds += dt;
  // Counted on the layers the policy compresses (sliding-window layers keep their window).
  stats_.context_pairs += static_cast<int64_t>(policy_layers(c).size()) * c.n_kv_heads * n;
  stats_.context_kept_pairs += policy_pairs(c, kept);
  phase_ = "prepare";
}

void Engine::accept(Sequence& s, int32_t tok) {
  if (tok == kNonFiniteRow) {
    s.result.finish_reason = FinishReason::kError;
    s.result.error_kind = RequestErrorKind::kNonFiniteLogits;
    s.result.error = fmt::format(
        "the model produced non-finite logits (NaN or infinity) at completion token {}: the "
        "model's weights are probably corrupt (see `offgen inspect`)",
        s.result.tokens.size());
    s.finished = true;
    return;
  }
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
  // Cut at the earliest occurrence of any stop string (each one ends in the new bytes: none
  // occurred before), whatever their order.
  static const std::vector<std::string> kNoStops;
  size_t cut = std::string::npos;
  for (const std::string& stop : forced ? kNoStops : sp.stop) {
    const size_t from = before >= stop.size() ? before - stop.size() + 1 : 0;
    cut = std::min(cut, text.find(stop, from));
  }
  if (cut != std::string::npos) {
    text.resize(cut);
    s.result.finish_reason = FinishReason::kStop;
    s.finished = true;
    return;
  }
  if (static_cast<int64_t>(s.result.tokens.size()) >= s.max_tokens) {
    s.result.finish_reason = FinishReason::kLength;
    s.finished = true;
    return;
  }
  s.pending = tok;
}

void Engine::run_prefill(std::vector<Sequence*>& seqs) {
  const auto t0 = EngineClock::now();
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
    // A stop request is honoured between forwards (and inside them), not after the whole
    // batch's prompts (many forwards): generate() ends the run.
    if (i < seqs.size()) checkpoint(true);
  }
  stats_.prefill_seconds += seconds_since(t0);
}

void Engine::run_decode(std::vector<Sequence*>& seqs) {
  const auto t0 = EngineClock::now();
  std::vector<std::vector<int32_t>> chunks;
  for (Sequence* s : seqs) chunks.push_back({s->pending});
  forward(seqs, chunks);
  stats_.decode_tokens += static_cast<int64_t>(seqs.size());
  for (size_t g = 0; g < seqs.size(); ++g)
    accept(*seqs[g], sample(*seqs[g], g));
  stats_.decode_seconds += seconds_since(t0);
}

}  // namespace offgen
