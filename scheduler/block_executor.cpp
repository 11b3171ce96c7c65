// Block-schedule execution over lanes.
#include "scheduler/block_executor.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "runtime/core/error.h"

namespace offgen {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

BlockExecutor::BlockExecutor(const LlamaModel& model, WeightStore& weights, KvStore& kv,
                             bool overlap)
    : model_(model), weights_(weights), kv_(kv), overlap_(overlap) {}

float* BlockExecutor::stage(int slot, size_t seq, int which) {
  return reinterpret_cast<float*>(kv_stage_[slot][seq * 2 + which].data());
}

std::vector<KvSeqView> BlockExecutor::kv_views(const BatchInput& b, int64_t layer, int slot) {
  std::vector<KvSeqView> views(b.kv.size());
  for (size_t i = 0; i < b.kv.size(); ++i) {
    const int64_t h = b.kv[i];
    views[i] = kv_.resident(h) ? kv_.home_view(h, layer)
                               : KvSeqView{stage(slot, i, 0), stage(slot, i, 1), kv_.capacity(h)};
  }
  return views;
}

void BlockExecutor::execute(const Task& t, const std::vector<BatchInput>& batches, float* logits) {
  const ModelConfig& c = model_.config();
  switch (t.kind) {
    case TaskKind::kLoadWeight:
      weights_.load(t.unit, t.slot);
      return;
    case TaskKind::kLoadCache: {
      const BatchInput& b = batches[t.batch];
      const int64_t layer = LlamaModel::unit_layer(t.unit);
      for (size_t i = 0; i < b.kv.size(); ++i)
        if (!kv_.resident(b.kv[i]))
          kv_.load(b.kv[i], layer, b.spans[i].n_past, stage(t.slot, i, 0), stage(t.slot, i, 1));
      return;
    }
    case TaskKind::kCompute: {
      const BatchInput& b = batches[t.batch];
      std::vector<float>& h = hidden_[t.batch];
      const int64_t rows = static_cast<int64_t>(b.ids.size());
      if (t.unit == 0) {
        h.resize(rows * c.d_model);
        model_.embed(b.ids, h.data());
      }
      std::vector<KvSeqView> views;
      if (LlamaModel::unit_has_cache(t.unit))
        views = kv_views(b, LlamaModel::unit_layer(t.unit), t.slot);
      const UnitBatch ub{rows, b.spans, b.positions.data(), views};
      model_.run_unit(t.unit, weights_.blob(t.unit, t.unit % 2), h.data(), ub, scratch_);
      if (t.unit + 1 == model_.num_units()) {
        std::vector<int64_t> last;
        for (const auto& sp : b.spans) last.push_back(sp.row_begin + sp.n_new - 1);
        model_.output_step(h.data(), last, logits + logits_offset_[t.batch] * c.vocab_size,
                           scratch_);
      }
      return;
    }
    case TaskKind::kStoreCache: {
      const BatchInput& b = batches[t.batch];
      const int64_t layer = LlamaModel::unit_layer(t.unit);
      for (size_t i = 0; i < b.kv.size(); ++i)
        if (!kv_.resident(b.kv[i]))
          kv_.store(b.kv[i], layer, b.spans[i].n_past, b.spans[i].n_past + b.spans[i].n_new,
                    stage(t.slot, i, 0), stage(t.slot, i, 1));
      return;
    }
    case TaskKind::kLoadHidden:
    case TaskKind::kStoreHidden:
      OFFGEN_THROW(kInternal, "activation offloading is not planned by this executor");
  }
}

void BlockExecutor::run(const std::vector<BatchInput>& batches, float* logits) {
  const auto t_wall = Clock::now();
  const int64_t K = static_cast<int64_t>(batches.size());
  StepShape shape;
  shape.num_units = model_.num_units();
  shape.num_batches = K;
  for (int64_t u = 0; u < shape.num_units; ++u) shape.unit_has_cache.push_back(LlamaModel::unit_has_cache(u));
  shape.load_weights = weights_.needs_load();
  shape.load_cache = false;
  int64_t max_seqs = 0, max_cap = 0;
  hidden_.resize(K);
  logits_offset_.assign(K, 0);
  int64_t off = 0;
  for (int64_t k = 0; k < K; ++k) {
    logits_offset_[k] = off;
    off += static_cast<int64_t>(batches[k].kv.size());
    max_seqs = std::max<int64_t>(max_seqs, static_cast<int64_t>(batches[k].kv.size()));
    for (int64_t h : batches[k].kv)
      if (!kv_.resident(h)) {
        shape.load_cache = true;
        max_cap = std::max(max_cap, kv_.capacity(h));
      }
  }
  if (shape.load_cache) {
    const int64_t need = kv_.staging_bytes(max_cap);
    for (int slot = 0; slot < 2; ++slot) {
      auto& v = kv_stage_[slot];
      if (need > stage_bytes_) v.clear();
      while (static_cast<int64_t>(v.size()) < 2 * max_seqs) v.emplace_back(std::max(need, stage_bytes_));
    }
    stage_bytes_ = std::max(stage_bytes_, need);
  }
  const std::vector<Task> plan = plan_step(shape);

  const bool lanes = overlap_ && (shape.load_weights || shape.load_cache);
  if (!lanes) {
    for (const Task& t : plan) {
      const auto t0 = Clock::now();
      execute(t, batches, logits);
      const double dt = since(t0);
      (t.lane == Lane::kLoad ? times_.load : t.lane == Lane::kStore ? times_.store : times_.compute) += dt;
    }
    times_.wall += since(t_wall);
    return;
  }

  // Overlapped: each lane runs its own tasks in plan order, waiting for their dependencies.
  std::vector<char> done(plan.size(), 0);
  std::mutex mu;
  std::condition_variable cv;
  std::exception_ptr error;
  bool failed = false;
  auto lane_fn = [&](Lane lane, double& busy) {
    for (size_t i = 0; i < plan.size(); ++i) {
      const Task& t = plan[i];
      if (t.lane != lane) continue;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] {
          if (failed) return true;
          for (int64_t d : t.deps)
            if (!done[d]) return false;
          return true;
        });
        if (failed) return;
      }
      const auto t0 = Clock::now();
      try {
        execute(t, batches, logits);
      } catch (...) {
        std::lock_guard lock(mu);
        if (!failed) error = std::current_exception();
        failed = true;
        cv.notify_all();
        return;
      }
      busy += since(t0);
      std::lock_guard lock(mu);
      done[i] = 1;
      cv.notify_all();
    }
  };
  double load_busy = 0, store_busy = 0, compute_busy = 0;
  std::thread load_thread(lane_fn, Lane::kLoad, std::ref(load_busy));
  std::thread store_thread(lane_fn, Lane::kStore, std::ref(store_busy));
  lane_fn(Lane::kCompute, compute_busy);
  load_thread.join();
  store_thread.join();
  times_.load += load_busy;
  times_.store += store_busy;
  times_.compute += compute_busy;
  times_.wall += since(t_wall);
  if (error) std::rethrow_exception(error);
}

}  // namespace offgen
