// NvmeStore: the disk tier. 4 KiB-aligned extents in one unlinked backing file in the offload dir,
// O_DIRECT, batched async I/O over an IoEngine (io_uring or pread/pwrite) with every completion
// checked: -EAGAIN requeued, short transfers resubmitted, other errors raised with path + offset.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "offload/aligned_buffer.h"
#include "offload/io_engine.h"
#include "offload/io_stats.h"

namespace offgen {

struct NvmeStoreOptions {
  std::string dir;                      // --offload-dir: an existing, writable directory
  uint32_t queue_depth = 64;            // most engine ops in flight (1..4096)
  bool use_io_uring = true;             // false: pread/pwrite (also OFFGEN_NO_IO_URING=1)
  bool direct = true;                   // O_DIRECT; buffered when the filesystem refuses it
  bool use_tmpfile = true;              // O_TMPFILE; false forces open + immediate unlink
  bool preallocate = true;              // fallocate in allocate(): ENOSPC shows up early
  uint64_t capacity_bytes = 0;          // --disk-mem: cap on allocated bytes, 0 = no cap
  uint64_t max_op_bytes = 4ull << 20;   // larger ops are split into engine ops of this size
  uint64_t staging_bytes = 4ull << 20;  // bounce buffer of the blocking read()/write()
  uint32_t max_retries = 1000;          // per engine op: EAGAIN/EINTR/no-progress retries
  IoEngineFactory engine_factory;       // replaces the default engine (tests: fault injection)
  // Throws Error(kConfig) naming the offending field.
  void validate() const;
};

// A region of the backing file; offset and bytes are multiples of kDiskAlign.
struct Extent {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// One async transfer between `host` and bytes [offset, offset + bytes) of `extent`. host must be
// 4 KiB aligned, offset and bytes multiples of 4 KiB (use AlignedHostBuffer and its capacity()).
struct IoOp {
  IoKind kind = IoKind::kRead;
  Extent extent;
  void* host = nullptr;
  uint64_t bytes = 0;
  uint64_t offset = 0;  // within the extent
};

using Ticket = uint64_t;

// Thread-safety: every member function may be called from any thread. I/O calls (read, write,
// submit, wait, poll, register_buffers) take an internal mutex. wait() does not hold it while it
// blocks for completions: one waiting thread at a time drives the device with the mutex released,
// the other waiters sleep until its round ends, and submissions made meanwhile queue and reach
// the device (up to the queue depth) at its next completion. Over the pread/pwrite engine, poll()
// and that round perform the queued transfers inline. The blocking read() and write() are
// serialised among themselves by their staging buffer. allocate(), stats() and the accessors do
// not take the mutex. Errors: Error(kIo) for I/O failures, Error(kResource) for ENOSPC/EDQUOT
// and capacity, each naming path() and the file offset; Error(kInput) for misuse (misaligned op,
// bad extent, a ticket waited for twice).
// The backing file never has a visible name (see OffloadFile); destroying the store drains
// in-flight I/O and releases the space.
class NvmeStore {
 public:
  explicit NvmeStore(NvmeStoreOptions options);
  ~NvmeStore();
  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;

  // Allocates align_up(bytes): the smallest released extent that is large enough (its rest stays
  // free), else released space at the end of the file grown in place, else new space at the end
  // (reserved with fallocate when preallocate). Throws Error(kResource) when the file would pass
  // capacity_bytes or the filesystem is full.
  Extent allocate(uint64_t bytes);
  // Gives an allocated extent back for later allocate() calls (adjacent free space merges). No
  // I/O on it may be in flight or follow. Error(kInternal) for an extent released twice.
  void release(const Extent& extent);

  // Blocking transfers of the first `bytes` (<= extent.bytes) of an extent. Any host pointer and
  // length: unaligned parts go through an internal staging buffer; the rest of the last 4 KiB
  // block on disk is zero-filled by write().
  void write(const Extent& extent, const void* src, uint64_t bytes);
  void read(const Extent& extent, void* dst, uint64_t bytes);

  // Queues a batch and starts it; returns at once. The host buffers must stay valid and untouched
  // until wait() returns or throws. Validates every op first (Error(kInput), nothing queued).
  Ticket submit(std::span<const IoOp> ops);
  // Blocks until every op of the ticket completed; throws the first error of the batch (after the
  // rest of its in-flight ops finished). Each ticket must be waited for exactly once.
  void wait(Ticket ticket);
  // Makes progress without blocking; true when the ticket is complete (wait() then returns or
  // throws at once).
  bool poll(Ticket ticket);

  // Registers host regions with the engine (io_uring fixed buffers; ops inside them use
  // read_fixed/write_fixed). Replaces earlier registrations; the regions must outlive the store or
  // the next call. Requires no I/O in flight. Returns false when the engine does not register.
  bool register_buffers(std::span<const HostRegion> regions);

  IoStats stats() const;
  const std::string& path() const;
  const std::string& dir() const;
  const char* engine_name() const;
  bool direct() const;   // false when the filesystem refused O_DIRECT (or not asked)
  bool tmpfile() const;  // backing file made with O_TMPFILE
  uint64_t allocated_bytes() const;  // the end of the file's extents (released ones included)
  uint64_t free_bytes() const;       // released bytes not allocated again
  uint32_t queue_depth() const;  // effective: min(options.queue_depth, engine capacity)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace offgen
