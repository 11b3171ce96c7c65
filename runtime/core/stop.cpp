// Stop requests: the flag, the checkpoint and its test hook.
#include "runtime/core/stop.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

namespace offgen {

static_assert(std::atomic<int>::is_always_lock_free, "StopSource::request must be signal-safe");

bool StopToken::requested() const noexcept { return source_ != nullptr && source_->requested(); }

void StopToken::check(const char* phase) const {
  if (source_ == nullptr) return;
  if (source_->paused(phase)) return;  // the test hook: the next checkpoint stops
  if (source_->requested()) throw Stopped(phase);
}

void StopSource::request(int reason) noexcept {
  int none = 0;
  reason_.compare_exchange_strong(none, reason == 0 ? -1 : reason, std::memory_order_relaxed);
}

void StopSource::pause_at(std::string phase, int64_t nth) {
  pause_phase_ = std::move(phase);
  pause_nth_ = nth;
}

bool StopSource::paused(const char* phase) const {
  if (pause_nth_ <= 0 || pause_phase_ != phase) return false;
  if (pause_seen_.fetch_add(1, std::memory_order_relaxed) + 1 != pause_nth_) return false;
  std::fprintf(stderr, "offgen: debug: paused in %s\n", phase);
  std::fflush(stderr);
  pausing_.store(true);
  while (!requested()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  pausing_.store(false);
  return true;
}

Stopped::Stopped(std::string phase)
    : phase_(std::move(phase)), message_("stopped in " + phase_) {}

}  // namespace offgen
