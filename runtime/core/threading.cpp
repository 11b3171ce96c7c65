// TBB-backed compute context.
#include "runtime/core/threading.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <thread>

namespace offgen {

ThreadContext::ThreadContext(int threads)
    : threads_(threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))),
      arena_(std::make_unique<tbb::task_arena>(threads_)) {}

void ThreadContext::parallel_for(int64_t n, int64_t grain,
                                 const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (threads_ == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  arena_->execute([&] {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, std::max<int64_t>(1, grain)),
                      [&](const tbb::blocked_range<int64_t>& r) { fn(r.begin(), r.end()); });
  });
}

}  // namespace offgen
