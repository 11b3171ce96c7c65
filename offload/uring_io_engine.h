// UringIoEngine: IoEngine over liburing (one ring per store, the file registered as a fixed file,
// optional registered buffers used through read_fixed/write_fixed).
#pragma once

#include <memory>

#include "offload/io_engine.h"

namespace offgen {

class UringIoEngine final : public IoEngine {
 public:
  // Returns nullptr and sets *err (a positive errno) when the kernel refuses io_uring
  // (io_uring_queue_init fails: ENOSYS, EPERM, ENOMEM, ...).
  static std::unique_ptr<UringIoEngine> try_create(const IoEngineConfig& config, int* err);
  ~UringIoEngine()
      override;  // io_uring_queue_exit; ops still in flight are waited for by the kernel

  const char* name() const override { return "io_uring"; }
  uint32_t capacity() const override;
  // Throws Error(kIo) only when io_uring_enter itself fails with an unexpected error.
  void submit(std::span<const EngineOp> ops) override;
  size_t reap(std::span<EngineCompletion> out, size_t min_complete) override;
  // Regions over 1 GiB are registered as several 1 GiB pieces (the kernel's per-buffer cap).
  bool register_buffers(std::span<const HostRegion> regions) override;
  // Number of ops so far issued through read_fixed/write_fixed (for tests and benchmarks).
  uint64_t fixed_ops() const;

 private:
  struct Impl;
  explicit UringIoEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// 0 when this process may set up an io_uring, else -errno from io_uring_queue_init.
int io_uring_probe();

}  // namespace offgen
