// liburing engine: submissions, completion reaping and fixed buffers. Results are passed up raw.
#include "offload/uring_io_engine.h"

#include <liburing.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/log.h"

namespace offgen {

namespace {
constexpr uint64_t kMaxRegisteredBuffer = 1ull << 30;  // kernel limit per registered buffer
constexpr uint64_t kIgnoredTag = ~0ull;                // NOPs of a refused batch

struct FixedRange {
  uintptr_t begin, end;
  int index;
};
}  // namespace

struct UringIoEngine::Impl {
  io_uring ring{};
  IoEngineConfig config;
  bool file_registered = false;
  bool buffers_registered = false;
  std::vector<FixedRange> fixed;  // sorted by begin
  uint64_t fixed_ops = 0;
  std::vector<io_uring_sqe*> prepared;  // SQEs of the current submit() call

  int fixed_index(const void* buf, uint32_t bytes) const {
    const uintptr_t b = reinterpret_cast<uintptr_t>(buf);
    auto it = std::upper_bound(fixed.begin(), fixed.end(), b,
                               [](uintptr_t v, const FixedRange& r) { return v < r.begin; });
    if (it == fixed.begin()) return -1;
    --it;
    return (b >= it->begin && b + bytes <= it->end) ? it->index : -1;
  }
};

int io_uring_probe() {
  io_uring ring{};
  const int r = io_uring_queue_init(4, &ring, 0);
  if (r == 0) io_uring_queue_exit(&ring);
  return r;
}

std::unique_ptr<UringIoEngine> UringIoEngine::try_create(const IoEngineConfig& config, int* err) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  const unsigned entries = std::max<uint32_t>(1, config.queue_depth);
  const int r = io_uring_queue_init(entries, &impl->ring, 0);
  if (r < 0) {
    if (err) *err = -r;
    return nullptr;
  }
  // A fixed file saves an fget/fput per op; without it the raw fd works just as well.
  impl->file_registered = io_uring_register_files(&impl->ring, &config.fd, 1) == 0;
  return std::unique_ptr<UringIoEngine>(new UringIoEngine(std::move(impl)));
}

UringIoEngine::UringIoEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

UringIoEngine::~UringIoEngine() { io_uring_queue_exit(&impl_->ring); }

uint32_t UringIoEngine::capacity() const { return impl_->ring.sq.ring_entries; }

uint64_t UringIoEngine::fixed_ops() const { return impl_->fixed_ops; }

void UringIoEngine::submit(std::span<const EngineOp> ops) {
  io_uring* ring = &impl_->ring;
  const int fd = impl_->file_registered ? 0 : impl_->config.fd;
  std::vector<io_uring_sqe*>& prepared = impl_->prepared;
  prepared.clear();
  for (const EngineOp& op : ops) {
    io_uring_sqe* sqe = io_uring_get_sqe(ring);
    if (sqe == nullptr) {  // SQ full of not-yet-submitted entries: flush and retry
      io_uring_submit(ring);
      sqe = io_uring_get_sqe(ring);
      OFFGEN_CHECK(sqe != nullptr, kInternal, "io_uring SQ full on {} (capacity {})",
                   impl_->config.path, capacity());
    }
    const int idx = impl_->buffers_registered ? impl_->fixed_index(op.buf, op.bytes) : -1;
    if (op.kind == IoKind::kRead) {
      if (idx >= 0)
        io_uring_prep_read_fixed(sqe, fd, op.buf, op.bytes, op.offset, idx);
      else
        io_uring_prep_read(sqe, fd, op.buf, op.bytes, op.offset);
    } else {
      if (idx >= 0)
        io_uring_prep_write_fixed(sqe, fd, op.buf, op.bytes, op.offset, idx);
      else
        io_uring_prep_write(sqe, fd, op.buf, op.bytes, op.offset);
    }
    if (idx >= 0) ++impl_->fixed_ops;
    if (impl_->file_registered) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, op.tag);
    prepared.push_back(sqe);
  }
  for (;;) {
    const int r = io_uring_submit(ring);
    if (r >= 0 || r == -EAGAIN || r == -EBUSY) return;  // leftovers are flushed by reap()
    if (r == -EINTR) continue;
    // The ring refused the batch: turn its entries into ignored NOPs so none of these transfers
    // can happen later, then report. The caller treats the batch as never submitted.
    for (io_uring_sqe* sqe : prepared) {
      io_uring_prep_nop(sqe);
      io_uring_sqe_set_data64(sqe, kIgnoredTag);
    }
    OFFGEN_THROW(kIo, "io_uring_submit failed on {}: {}", impl_->config.path, std::strerror(-r));
  }
}

size_t UringIoEngine::reap(std::span<EngineCompletion> out, size_t min_complete) {
  io_uring* ring = &impl_->ring;
  size_t n = 0;
  for (;;) {
    unsigned head;
    io_uring_cqe* cqe;
    unsigned seen = 0;
    io_uring_for_each_cqe(ring, head, cqe) {
      if (n == out.size()) break;
      ++seen;
      if (io_uring_cqe_get_data64(cqe) == kIgnoredTag) continue;
      out[n++] = EngineCompletion{io_uring_cqe_get_data64(cqe), cqe->res};
    }
    io_uring_cq_advance(ring, seen);
    if (n >= min_complete || n == out.size()) {
      if (io_uring_sq_ready(ring) > 0) io_uring_submit(ring);  // flush deferred submissions
      return n;
    }
    const int r = io_uring_submit_and_wait(ring, 1);
    if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY && r != -ETIME) {
      OFFGEN_THROW(kIo, "io_uring_enter (wait) failed on {}: {}", impl_->config.path,
                   std::strerror(-r));
    }
  }
}

bool UringIoEngine::register_buffers(std::span<const HostRegion> regions) {
  if (impl_->buffers_registered) {
    io_uring_unregister_buffers(&impl_->ring);
    impl_->buffers_registered = false;
    impl_->fixed.clear();
  }
  std::vector<iovec> iovs;
  std::vector<FixedRange> ranges;
  for (const HostRegion& r : regions) {
    for (uint64_t off = 0; off < r.bytes; off += kMaxRegisteredBuffer) {
      const uint64_t len = std::min(kMaxRegisteredBuffer, r.bytes - off);
      char* base = static_cast<char*>(r.data) + off;
      ranges.push_back({reinterpret_cast<uintptr_t>(base), reinterpret_cast<uintptr_t>(base) + len,
                        static_cast<int>(iovs.size())});
      iovs.push_back(iovec{base, static_cast<size_t>(len)});
    }
  }
  if (iovs.empty()) return true;
  const int r = io_uring_register_buffers(&impl_->ring, iovs.data(), iovs.size());
  if (r < 0) {
    static std::once_flag once;
    std::call_once(once, [&] {
      log_warn("io_uring_register_buffers refused on {} ({}); using unregistered buffers",
               impl_->config.path, std::strerror(-r));
    });
    return false;
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const FixedRange& a, const FixedRange& b) { return a.begin < b.begin; });
  impl_->fixed = std::move(ranges);
  impl_->buffers_registered = true;
  return true;
}

}  // namespace offgen
