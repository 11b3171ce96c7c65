// Explicit compute context: a TBB arena with a fixed thread count, passed to every op (no
// hidden global pool). Thread-safe: parallel_for may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace offgen {

class ThreadContext {
 public:
  // threads <= 0 means all hardware threads.
  explicit ThreadContext(int threads = 0);
  ~ThreadContext();
  int threads() const { return threads_; }
  // Runs fn(begin, end) over [0, n) in chunks of at least `grain`, inside this context's arena.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  struct Arena;  // the TBB arena (threading.cpp: TBB's headers stay out of every backend op's)
  int threads_;
  std::unique_ptr<Arena> arena_;
};

}  // namespace offgen
