// SyncIoEngine and default engine selection (io_uring with a pread/pwrite fallback).
#include "offload/io_engine.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>

#include "offload/uring_io_engine.h"
#include "runtime/core/log.h"

namespace offgen {

const char* io_kind_name(IoKind k) {
  switch (k) {
    case IoKind::kRead:
      return "read";
    case IoKind::kWrite:
      return "write";
  }
  return "?";
}

struct SyncIoEngine::Impl {
  int fd;
  std::deque<EngineOp> queued;
};

SyncIoEngine::SyncIoEngine(const IoEngineConfig& config)
    : impl_(std::make_unique<Impl>(Impl{config.fd, {}})),
      capacity_(config.queue_depth > 0 ? config.queue_depth : 1) {}

SyncIoEngine::~SyncIoEngine() = default;

void SyncIoEngine::submit(std::span<const EngineOp> ops) {
  for (const EngineOp& op : ops) impl_->queued.push_back(op);
}

size_t SyncIoEngine::reap(std::span<EngineCompletion> out, size_t min_complete) {
  // Every queued op completes here; pread/pwrite results go back raw (short counts, -errno).
  size_t n = 0;
  while (n < out.size() && !impl_->queued.empty()) {
    const EngineOp op = impl_->queued.front();
    impl_->queued.pop_front();
    ssize_t r = op.kind == IoKind::kRead
                    ? ::pread(impl_->fd, op.buf, op.bytes, static_cast<off_t>(op.offset))
                    : ::pwrite(impl_->fd, op.buf, op.bytes, static_cast<off_t>(op.offset));
    out[n++] = EngineCompletion{op.tag, r < 0 ? -static_cast<int64_t>(errno) : r};
  }
  return n;
}

bool io_uring_disabled_by_env() {
  const char* e = std::getenv("OFFGEN_NO_IO_URING");
  return e != nullptr && e[0] != '\0' && std::strcmp(e, "0") != 0;
}

std::unique_ptr<IoEngine> make_default_io_engine(const IoEngineConfig& config, bool use_io_uring) {
  if (use_io_uring && io_uring_disabled_by_env()) {
    static std::once_flag once;
    std::call_once(once, [] {
      log_warn("io_uring disabled by OFFGEN_NO_IO_URING; NVMe store uses pread/pwrite");
    });
  } else if (use_io_uring) {
    int err = 0;
    if (auto e = UringIoEngine::try_create(config, &err)) return e;
    static std::once_flag once;
    std::call_once(once, [err] {
      log_warn("io_uring unavailable (io_uring_queue_init: {}); NVMe store uses pread/pwrite",
               std::strerror(err));
    });
  }
  return std::make_unique<SyncIoEngine>(config);
}

}  // namespace offgen
