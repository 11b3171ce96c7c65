// TBB-backed compute context.
#include "runtime/core/threading.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <thread>

// ThreadSanitizer cannot see the synchronisation inside libtbb.so (not instrumented), so it would
// report every hand-off between the caller and TBB's workers as a race. The annotations below
// state what TBB guarantees: the caller's writes happen before each chunk, and each chunk's
// writes happen before parallel_for returns. They compile to nothing without TSan.
#if defined(__SANITIZE_THREAD__)
#define OFFGEN_TSAN_ANNOTATE 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define OFFGEN_TSAN_ANNOTATE 1
#endif
#endif
#ifdef OFFGEN_TSAN_ANNOTATE
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace offgen {
namespace {

inline void happens_before(void* sync) {
#ifdef OFFGEN_TSAN_ANNOTATE
  __tsan_release(sync);
#endif
}

inline void happens_after(void* sync) {
#ifdef OFFGEN_TSAN_ANNOTATE
  __tsan_acquire(sync);
#endif
}

}  // namespace

struct ThreadContext::Arena {
  explicit Arena(int threads) : arena(threads) {}
  tbb::task_arena arena;
};

ThreadContext::ThreadContext(int threads)
    : threads_(threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))),
      arena_(std::make_unique<Arena>(threads_)) {}

ThreadContext::~ThreadContext() = default;

void ThreadContext::parallel_for(int64_t n, int64_t grain,
                                 const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (threads_ == 1 || n <= grain) {
    fn(0, n);
    return;
  }
  char started = 0, finished = 0;  // sync addresses for the TSan annotations
  happens_before(&started);
  arena_->arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, std::max<int64_t>(1, grain)),
                      [&](const tbb::blocked_range<int64_t>& r) {
                        happens_after(&started);
                        fn(r.begin(), r.end());
                        happens_before(&finished);
                      });
  });
  happens_after(&finished);
}

}  // namespace offgen
