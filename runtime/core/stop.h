// Cooperative stop requests (SIGINT/SIGTERM in the CLI): a StopSource is set asynchronously (from
// a signal handler too); long work polls a StopToken passed down to it explicitly at checkpoints
// and unwinds with Stopped, which names the phase it stopped in.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <string>

namespace offgen {

class StopSource;

// A read-only view of a StopSource; the default token never stops. Cheap to copy; the source
// must outlive it. Thread-safe.
class StopToken {
 public:
  StopToken() = default;
  bool requested() const noexcept;
  // A checkpoint of long work in `phase` ("input", "prepare", "load", "prefill", "decode",
  // "output", ...): throws Stopped(phase) when a stop was requested. Call it often enough that
  // a stop is noticed well within a second.
  void check(const char* phase) const;

 private:
  friend class StopSource;
  explicit StopToken(const StopSource* source) : source_(source) {}
  const StopSource* source_ = nullptr;
};

class StopSource {
 public:
  StopSource() = default;
  StopSource(const StopSource&) = delete;
  StopSource& operator=(const StopSource&) = delete;

  // Asks the work to stop; `reason` (a signal number, or any other non-zero value) is kept, the
  // first one wins. Async-signal-safe: a lock-free atomic compare-exchange, nothing else.
  void request(int reason) noexcept;
  bool requested() const noexcept { return reason_.load(std::memory_order_relaxed) != 0; }
  int reason() const noexcept { return reason_.load(std::memory_order_relaxed); }
  StopToken token() const noexcept { return StopToken(this); }

  // Test hook (OFFGEN_DEBUG_PAUSE in the CLI): the `nth` (1-based) checkpoint of `phase` writes
  // "offgen: debug: paused in PHASE" to stderr and waits there until a stop is requested; the
  // work then goes on to its next checkpoint, which stops it. So a test delivers a signal while
  // the phase is observably in progress, and learns whether the phase checks again. Set it
  // before handing out tokens.
  void pause_at(std::string phase, int64_t nth);
  bool pausing() const noexcept { return pausing_.load(); }  // a checkpoint waits in the hook

 private:
  friend class StopToken;
  bool paused(const char* phase) const;  // the pause hook: true when it paused here

  std::atomic<int> reason_{0};
  std::string pause_phase_;
  int64_t pause_nth_ = 0;
  mutable std::atomic<int64_t> pause_seen_{0};
  mutable std::atomic<bool> pausing_{false};
};

// Thrown at a checkpoint after a stop request. Not an offgen::Error: a stop is no failure, so
// handlers of errors let it pass, and the caller that owns the job ends it as interrupted.
class Stopped : public std::exception {
 public:
  explicit Stopped(std::string phase);
  const std::string& phase() const noexcept { return phase_; }
  const char* what() const noexcept override { return message_.c_str(); }  // "stopped in PHASE"

 private:
  std::string phase_, message_;
};

}  // namespace offgen
