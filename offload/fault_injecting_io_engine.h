// FaultInjectingIoEngine: wraps another IoEngine and, on a deterministic schedule of op ordinals,
// returns short transfers, -EAGAIN or an errno (-EIO, -ENOSPC, ...) — for testing the store's
// completion handling identically over every engine.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "offload/io_engine.h"

namespace offgen {

enum class FaultAction {
  kShort,   // transfer and report half the bytes rounded down to 4 KiB; ops too small for that
            // transfer fully but report an odd count just over half
  kEagain,  // complete with -EAGAIN without touching the file
  kFail,    // complete with -error without touching the file
};

// Each rule counts the ops it matches (kind selected, op ending past `min_end_offset`), 1-based,
// resubmissions included, and fires on matches first, first+period, first+2*period, ... (period 0:
// only `first`), at most `max_fires` times. When several rules fire on one op the first wins.
struct FaultRule {
  FaultAction action = FaultAction::kFail;
  uint64_t first = 1;
  uint64_t period = 0;
  bool reads = true;
  bool writes = true;
  uint64_t min_end_offset = 0;
  uint64_t max_fires = std::numeric_limits<uint64_t>::max();
  int error = 5;  // EIO

  static FaultRule short_op(uint64_t nth, uint64_t period = 0);
  static FaultRule eagain(uint64_t nth, uint64_t period = 0);
  static FaultRule fail(uint64_t nth, int error);
  // Every write that reaches past `limit` bytes of the file gets -ENOSPC.
  static FaultRule enospc_past(uint64_t limit);
  FaultRule& only_reads() {
    reads = true, writes = false;
    return *this;
  }
  FaultRule& only_writes() {
    reads = false, writes = true;
    return *this;
  }
  FaultRule& at_most(uint64_t n) {
    max_fires = n;
    return *this;
  }
};

// The end-to-end test hook OFFGEN_DEBUG_IO_FAULT=KIND@N[,KIND@N...]: the disk tier's Nth engine op
// (1-based, reads and writes counted together) completes with KIND, one of eio or enospc, instead
// of reaching the file (the NVMe store then wraps its engine: NvmeStore). Empty when unset.
// Throws Error(kConfig) naming the variable on a malformed value.
std::vector<FaultRule> fault_rules_from_env();

struct FaultStats {
  uint64_t ops = 0, shorts = 0, eagains = 0, failures = 0;
};

// Not thread-safe (as every IoEngine). Owns the wrapped engine.
class FaultInjectingIoEngine final : public IoEngine {
 public:
  FaultInjectingIoEngine(std::unique_ptr<IoEngine> inner, std::vector<FaultRule> rules);
  ~FaultInjectingIoEngine() override;
  const char* name() const override { return name_.c_str(); }
  uint32_t capacity() const override { return inner_->capacity(); }
  void submit(std::span<const EngineOp> ops) override;
  size_t reap(std::span<EngineCompletion> out, size_t min_complete) override;
  bool register_buffers(std::span<const HostRegion> regions) override {
    return inner_->register_buffers(regions);
  }
  const FaultStats& fault_stats() const { return stats_; }
  IoEngine& inner() { return *inner_; }

 private:
  struct Impl;
  std::unique_ptr<IoEngine> inner_;
  std::unique_ptr<Impl> impl_;
  std::string name_;
  FaultStats stats_;
};

}  // namespace offgen
