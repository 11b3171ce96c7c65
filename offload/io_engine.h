// IoEngine: the raw asynchronous block-I/O interface under the NVMe store (submit read/write ops
// on one file, reap completions with raw results). Engines never retry or throw on I/O results;
// the store above them does. Implementations: SyncIoEngine (pread/pwrite), UringIoEngine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

namespace offgen {

enum class IoKind { kRead, kWrite };
const char* io_kind_name(IoKind k);

// One transfer on the engine's file. `bytes` fits one syscall (the store splits larger ops).
struct EngineOp {
  IoKind kind = IoKind::kRead;
  uint64_t offset = 0;  // file offset
  void* buf = nullptr;  // host memory, owned by the caller until the op completes
  uint32_t bytes = 0;
  uint64_t tag = 0;  // returned unchanged in the completion
};

// result: bytes transferred (may be short), or -errno (e.g. -EAGAIN, -EIO, -ENOSPC).
struct EngineCompletion {
  uint64_t tag = 0;
  int64_t result = 0;
};

// A host memory region for buffer registration.
struct HostRegion {
  void* data = nullptr;
  uint64_t bytes = 0;
};

struct IoEngineConfig {
  int fd = -1;                // open file; the engine does not own or close it
  std::string path;           // for messages
  uint32_t queue_depth = 64;  // most ops in flight
};

// Not thread-safe: one thread (the store, under its lock) drives an engine.
class IoEngine {
 public:
  virtual ~IoEngine() = default;
  virtual const char* name() const = 0;
  // Most ops that may be in flight (submitted, not yet reaped) at once.
  virtual uint32_t capacity() const = 0;
  // Queues and issues ops; ops.size() <= capacity() - in-flight. Does not wait for completions.
  // Buffers must stay valid until their completion is reaped. Throws Error(kIo) only when the
  // engine cannot take the batch at all, and then none of it is (or will be) performed.
  virtual void submit(std::span<const EngineOp> ops) = 0;
  // Writes up to out.size() completions, blocking until at least min_complete are available
  // (min_complete <= ops in flight). min_complete == 0 polls. Returns the number written.
  virtual size_t reap(std::span<EngineCompletion> out, size_t min_complete) = 0;
  // Replaces the set of registered (pinned, fixed) buffers; ops whose buffer lies inside one use
  // the fixed-buffer path. Only call with nothing in flight. Returns false when unsupported or
  // refused (the engine then keeps working without registration).
  virtual bool register_buffers(std::span<const HostRegion> regions) { return false; }
};

using IoEngineFactory = std::function<std::unique_ptr<IoEngine>(const IoEngineConfig&)>;

// pread/pwrite, performed one after another inside reap() (also when polled with min_complete 0,
// so over this engine the store's poll()/wait() do the transfers inline). The fallback when
// io_uring is unavailable.
class SyncIoEngine final : public IoEngine {
 public:
  explicit SyncIoEngine(const IoEngineConfig& config);
  ~SyncIoEngine() override;
  const char* name() const override { return "sync"; }
  uint32_t capacity() const override { return capacity_; }
  void submit(std::span<const EngineOp> ops) override;
  size_t reap(std::span<EngineCompletion> out, size_t min_complete) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint32_t capacity_;
};

// The default engine: io_uring when `use_io_uring` and the environment allows it (not
// OFFGEN_NO_IO_URING=1, io_uring_queue_init succeeds), else SyncIoEngine; a fallback is said once
// per process on stderr.
std::unique_ptr<IoEngine> make_default_io_engine(const IoEngineConfig& config, bool use_io_uring);

// True when OFFGEN_NO_IO_URING is set to a non-empty value other than "0".
bool io_uring_disabled_by_env();

}  // namespace offgen
