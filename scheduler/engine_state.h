// Engine internals shared by its translation units: a running sequence, a shared context being
// served, and the state of one generate() call. Not part of the public API.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "offload/kv_store.h"
#include "offload/nvme_store.h"
#include "offload/weight_store.h"
#include "policies/cost_model.h"
#include "runtime/backend/backend.h"
#include "runtime/model/decoder.h"
#include "runtime/text/tokenizer.h"
#include "scheduler/block_executor.h"
#include "scheduler/context_compression.h"
#include "scheduler/engine.h"
#include "scheduler/shared_context.h"

namespace offgen {

using EngineClock = std::chrono::steady_clock;
inline double seconds_since(EngineClock::time_point t0) {
  return std::chrono::duration<double>(EngineClock::now() - t0).count();
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

  explicit Sequence(const SamplingParams& p) : sampler(p) {}
  bool prefilling() const { return n_pos < static_cast<int64_t>(prompt.size()); }
  // Whether it samples on the host (its Sampler keeps a candidate per token), not greedily.
  bool samples() const { return req->sampling.temperature != 0.0f && req->forced.empty(); }
};

// A distinct shared context of one generate() call and the requests that name it.
struct Engine::SharedContextJob {
  MultiqueryPrompt tokens;  // context ids, protected prefix, chat postfix, the first question
  int64_t remaining = 0;    // its requests not yet finished
  std::unique_ptr<SharedContext> shared;  // while built
  std::string error;        // why it could not be built (its requests fail with it)
};

// One generate() call: the requests, their results, the queue, the running sequences and the
// memory they hold.
struct Engine::Run {
  Run(const std::vector<Request>& r, const GenerateCallbacks& c)
      : requests(r), cb(c), results(r.size()), job_of(r.size(), -1), own(r.size()),
        split_error(r.size()), split_kind(r.size(), RequestErrorKind::kFailed) {}
  bool pending() const { return !waiting.empty() || !active.empty() || prepared != nullptr; }

  const std::vector<Request>& requests;
  const GenerateCallbacks& cb;
  EngineClock::time_point t0 = EngineClock::now();
  std::vector<Result> results;
  std::deque<size_t> waiting;
  std::vector<std::unique_ptr<Sequence>> active;
  std::unique_ptr<Sequence> prepared;  // tokenised, waiting for KV space
  int64_t done = 0;
  TierBytes committed;  // weights + the KV of admitted sequences + shared contexts held
  // Shared contexts: each distinct one (by its tokens) once, with the requests that name it.
  std::vector<std::unique_ptr<SharedContextJob>> jobs;
  std::vector<int64_t> job_of;               // per request: its job, or -1
  std::vector<std::vector<int32_t>> own;     // a context request's own tokens
  std::vector<std::string> split_error;      // why a request's context could not be split off
  std::vector<RequestErrorKind> split_kind;  // and the error kind it gives the request
  int64_t context_bytes = 0;                 // shared contexts held now
  // The running sequences' prompt tokens, and (over the run) the longest prompt and KV table:
  // the forwards' shape (forward_shape) follows from them.
  int64_t prompt_tokens = 0, longest_prompt = 0, max_capacity = 0;
  int64_t samplers = 0;  // running sequences that sample on the host (Sequence::samples)
  double decode_step_seconds = 0;            // the last decode step's (Progress)
};

}  // namespace offgen
