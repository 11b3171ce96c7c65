// NvmeStore: allocation, op validation/splitting, the completion loop (requeue -EAGAIN, resubmit
// short transfers, raise errors with path + offset) and the blocking staging path.
#include "offload/nvme_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "offload/fault_injecting_io_engine.h"
#include "offload/offload_file.h"
#include "runtime/core/error.h"

namespace offgen {

void NvmeStoreOptions::validate() const {
  OFFGEN_CHECK(!dir.empty(), kConfig, "--offload-dir is empty: the NVMe store needs a directory");
  OFFGEN_CHECK(queue_depth >= 1 && queue_depth <= 4096, kConfig,
               "NVMe store queue_depth {} out of range [1, 4096]", queue_depth);
  OFFGEN_CHECK(
      max_op_bytes >= kDiskAlign && max_op_bytes <= (1ull << 30) && max_op_bytes % kDiskAlign == 0,
      kConfig, "NVMe store max_op_bytes {} must be a multiple of 4096 in [4 KiB, 1 GiB]",
      max_op_bytes);
  OFFGEN_CHECK(staging_bytes >= kDiskAlign && staging_bytes % kDiskAlign == 0, kConfig,
               "NVMe store staging_bytes {} must be a positive multiple of 4096", staging_bytes);
  OFFGEN_CHECK(max_retries >= 1, kConfig, "NVMe store max_retries must be >= 1");
}

namespace {

struct Chunk {
  Ticket ticket = 0;
  IoKind kind = IoKind::kRead;
  uint64_t file_offset = 0;
  std::byte* buf = nullptr;
  uint64_t bytes = 0;  // still to transfer
  uint32_t retries = 0;
};

struct TicketState {
  uint64_t outstanding = 0;  // chunks not yet finished (pending or in flight)
  bool waited = false;       // a wait() is under way (a second one is misuse)
  bool failed = false;
  ErrorCategory category = ErrorCategory::kIo;
  std::string message;
};

struct AtomicStats {
  std::atomic<uint64_t> bytes_read{0}, bytes_written{0}, engine_ops{0}, retries{0},
      short_transfers{0}, eagain{0}, errors{0};
};

}  // namespace

struct NvmeStore::Impl {
  NvmeStoreOptions opt;
  OffloadFile file;
  std::string dir;
  std::unique_ptr<IoEngine> engine;
  uint32_t depth = 1;

  std::mutex alloc_mu;
  std::atomic<uint64_t> allocated{0};  // the end of the file's extents (high-water mark)
  std::map<uint64_t, uint64_t> free;   // released extents: offset -> bytes, adjacent ones merged
  bool preallocate = true;

  // Reserves [allocated, allocated + bytes) at the end of the file for an allocation of
  // `requested` bytes (caller holds alloc_mu).
  void grow(uint64_t bytes, uint64_t requested);
  // Bytes of the released extents (caller holds alloc_mu).
  uint64_t released() const {
    uint64_t n = 0;
    for (const auto& [offset, bytes] : free) n += bytes;
    return n;
  }

  // The engine is driven by one thread at a time: the holder of io_mu while no reaper is blocked,
  // or the reaper, which blocks in engine->reap() with io_mu released (`reaping` set) so that
  // other threads keep submitting; their chunks wait in `pending` until the reaper wakes (at the
  // next completion) and issues them. Threads waiting for their tickets meanwhile sleep on
  // `reaped`, notified after each round of completions and when the reaper leaves.
  std::mutex io_mu;  // everything below
  std::condition_variable reaped;
  bool reaping = false;
  std::deque<Chunk> pending;
  std::vector<Chunk> slots;
  std::vector<uint32_t> free_slots;
  uint32_t in_flight = 0;
  std::unordered_map<Ticket, TicketState> tickets;
  Ticket next_ticket = 1;
  std::vector<EngineOp> batch;
  std::vector<EngineCompletion> completions;

  std::mutex staging_mu;  // the blocking path's bounce buffer
  AlignedHostBuffer staging;

  AtomicStats st;

  Impl(NvmeStoreOptions o)
      : opt(std::move(o)),
        file(OffloadFileOptions{opt.dir, opt.direct, opt.use_tmpfile}),
        dir(opt.dir),
        preallocate(opt.preallocate) {}

  // Ends a chunk with an error; the first error of a batch is the one wait() raises. err is a
  // positive errno; `detail` is appended to the message.
  void fail(const Chunk& c, int err, const std::string& detail = {}) {
    st.errors.fetch_add(1, std::memory_order_relaxed);
    TicketState& t = tickets.at(c.ticket);
    --t.outstanding;
    if (t.failed) return;
    t.failed = true;
    const std::string suffix = detail.empty() ? "" : " (" + detail + ")";
    if (err == ENOSPC || err == EDQUOT || err == EFBIG) {
      t.category = ErrorCategory::kResource;
      t.message = fmt::format(
          "NVMe store: no space left writing {} bytes at offset {} of {} ({}; {} bytes free "
          "there): free disk space, lower --disk-mem, or choose another --offload-dir{}",
          c.bytes, c.file_offset, file.path(), std::strerror(err), filesystem_free_bytes(dir),
          suffix);
    } else {
      t.category = ErrorCategory::kIo;
      t.message = fmt::format("NVMe store: {} of {} bytes at offset {} of {} failed: {}{}",
                              io_kind_name(c.kind), c.bytes, c.file_offset, file.path(),
                              std::strerror(err), suffix);
    }
    // Chunks of a failed batch that were not issued yet are dropped.
    std::erase_if(pending, [&](const Chunk& p) {
      if (p.ticket != c.ticket) return false;
      --t.outstanding;
      return true;
    });
  }

  // Requeues a chunk (at the front: it is the oldest work). Chunks of a failed batch are dropped.
  void retry(Chunk& c, bool no_progress, const char* why) {
    TicketState& t = tickets.at(c.ticket);
    if (t.failed) {
      --t.outstanding;
      return;
    }
    st.retries.fetch_add(1, std::memory_order_relaxed);
    if (no_progress && ++c.retries > opt.max_retries) {
      return fail(c, EAGAIN, fmt::format("{} {} times in a row", why, opt.max_retries));
    }
    if (no_progress && c.retries > 4) {  // back off a persistently busy device
      std::this_thread::sleep_for(
          std::chrono::microseconds(std::min<uint32_t>(c.retries, 20) * 50));
    }
    pending.push_front(c);
  }

  void complete(const EngineCompletion& cqe) {
    const uint32_t slot = static_cast<uint32_t>(cqe.tag);
    Chunk c = slots[slot];
    free_slots.push_back(slot);
    --in_flight;
    const int64_t r = cqe.result;
    if (r == -EAGAIN || r == -EINTR) {
      st.eagain.fetch_add(1, std::memory_order_relaxed);
      retry(c, true, "-EAGAIN");
      return;
    }
    if (r < 0) return fail(c, static_cast<int>(-r), fmt::format("{} engine", engine->name()));
    const uint64_t done = static_cast<uint64_t>(r);
    if (done > c.bytes) {
      return fail(c, EIO, fmt::format("engine reported {} bytes transferred", done));
    }
    if (done == 0) {  // EOF, or a write that cannot progress: an error, never a retry loop
      return fail(c, EIO, "0 bytes transferred: unexpected end of file");
    }
    // O_DIRECT needs the remainder aligned: count only whole blocks, redo the partial one.
    const uint64_t progress = done == c.bytes || !file.direct() ? done : align_down(done);
    (c.kind == IoKind::kRead ? st.bytes_read : st.bytes_written)
        .fetch_add(progress, std::memory_order_relaxed);
    if (done == c.bytes) {
      --tickets.at(c.ticket).outstanding;
      return;
    }
    st.short_transfers.fetch_add(1, std::memory_order_relaxed);
    c.file_offset += progress;
    c.buf += progress;
    c.bytes -= progress;
    retry(c, progress == 0, "short transfer without progress");
  }

  // Hands pending chunks to the engine up to the queue depth; leaves them queued while a reaper
  // holds the engine (it issues them when it wakes). If the engine throws, the batch is back in
  // `pending` and nothing of it is in flight.
  void issue() {
    if (reaping) return;
    batch.clear();
    while (!pending.empty() && in_flight + batch.size() < depth) {
      Chunk c = pending.front();
      pending.pop_front();
      const uint32_t slot = free_slots.back();
      free_slots.pop_back();
      slots[slot] = c;
      batch.push_back(EngineOp{c.kind, c.file_offset, c.buf, static_cast<uint32_t>(c.bytes), slot});
    }
    if (batch.empty()) return;
    try {
      engine->submit(batch);
    } catch (...) {
      for (auto it = batch.rbegin(); it != batch.rend(); ++it) {
        free_slots.push_back(static_cast<uint32_t>(it->tag));
        pending.push_front(slots[it->tag]);
      }
      throw;
    }
    in_flight += batch.size();
    st.engine_ops.fetch_add(batch.size(), std::memory_order_relaxed);
  }

  // Issues, then handles the completions that are there (never blocks; nothing while a reaper
  // holds the engine).
  void pump() {
    if (reaping) return;
    issue();
    if (in_flight == 0) return;
    const size_t n = engine->reap(completions, 0);
    for (size_t i = 0; i < n; ++i) complete(completions[i]);
  }

  // issue() for the reaper: a batch that the engine refuses fails the tickets it belongs to (their
  // waiters raise it) instead of going to whichever thread happens to reap.
  void issue_or_fail() {
    try {
      issue();
    } catch (const std::exception& e) {
      std::vector<Chunk> refused(pending.begin(), pending.begin() + batch.size());
      pending.erase(pending.begin(), pending.begin() + batch.size());
      for (const Chunk& c : refused) fail(c, EIO, e.what());
    }
  }

  // As the reaper: issues what is pending, blocks for at least one completion with `lock`
  // released, handles the completions and issues what was queued meanwhile. Sleeping waiters are
  // woken when it returns or throws.
  void reap_blocking(std::unique_lock<std::mutex>& lock) {
    struct WakeWaiters {
      std::condition_variable& cv;
      ~WakeWaiters() { cv.notify_all(); }
    } wake{reaped};
    issue_or_fail();
    if (in_flight == 0) return;
    reaping = true;
    size_t n = 0;
    std::exception_ptr failure;
    lock.unlock();
    try {
      n = engine->reap(completions, 1);
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    reaping = false;
    if (failure) std::rethrow_exception(failure);
    for (size_t i = 0; i < n; ++i) complete(completions[i]);
    issue_or_fail();
  }

  void check_extent(const Extent& e, uint64_t offset, uint64_t bytes, const char* what) const {
    OFFGEN_CHECK(e.offset % kDiskAlign == 0 && e.bytes % kDiskAlign == 0 &&
                     e.offset + e.bytes <= allocated.load(),
                 kInput, "NVMe store {}: extent [{}, +{}) is not an allocated extent of {}", what,
                 e.offset, e.bytes, file.path());
    OFFGEN_CHECK(offset <= e.bytes && bytes <= e.bytes - offset, kInput,
                 "NVMe store {}: {} bytes at offset {} exceed the {}-byte extent at {} of {}", what,
                 bytes, offset, e.bytes, e.offset, file.path());
  }

  Ticket submit_locked(std::span<const IoOp> ops) {
    for (const IoOp& op : ops) {
      check_extent(op.extent, op.offset, op.bytes, io_kind_name(op.kind));
      OFFGEN_CHECK(is_aligned(op.host) && op.offset % kDiskAlign == 0 && op.bytes % kDiskAlign == 0,
                   kInput,
                   "NVMe store {} op: host {} / offset {} / bytes {} must be 4 KiB aligned (use "
                   "AlignedHostBuffer)",
                   io_kind_name(op.kind), op.host, op.offset, op.bytes);
    }
    const Ticket id = next_ticket++;
    TicketState& t = tickets[id];
    for (const IoOp& op : ops) {
      for (uint64_t off = 0; off < op.bytes; off += opt.max_op_bytes) {
        const uint64_t n = std::min(opt.max_op_bytes, op.bytes - off);
        pending.push_back(Chunk{id, op.kind, op.extent.offset + op.offset + off,
                                static_cast<std::byte*>(op.host) + off, n, 0});
        ++t.outstanding;
      }
    }
    try {
      issue();  // completions are handled by wait()/poll(), where errors reach the right caller
    } catch (...) {
      // Nothing of this batch reached the device: forget it, so the caller may free its buffers.
      std::erase_if(pending, [&](const Chunk& p) { return p.ticket == id; });
      tickets.erase(id);
      throw;
    }
    return id;
  }

  // Returns when the ticket's ops are done: as the reaper when none is blocked, else asleep until
  // the reaper's next round. Other threads add tickets while the lock is released: a reference
  // to the entry survives the map's rehashing, an iterator would not.
  void wait_locked(Ticket id, std::unique_lock<std::mutex>& lock) {
    auto it = tickets.find(id);
    OFFGEN_CHECK(it != tickets.end() && !it->second.waited, kInput,
                 "NVMe store {}: unknown or already waited ticket {}", file.path(), id);
    it->second.waited = true;
    TicketState& state = it->second;
    while (state.outstanding > 0) {
      if (reaping) {
        reaped.wait(lock);
        continue;
      }
      OFFGEN_CHECK(in_flight > 0 || !pending.empty(), kInternal,
                   "NVMe store {}: ticket {} has {} outstanding ops but nothing is queued",
                   file.path(), id, state.outstanding);
      reap_blocking(lock);
    }
    TicketState t = std::move(state);
    tickets.erase(id);
    if (t.failed) throw Error(t.category, t.message);
  }
};

NvmeStore::NvmeStore(NvmeStoreOptions options) {
  options.validate();
  impl_ = std::make_unique<Impl>(std::move(options));
  Impl& m = *impl_;
  IoEngineConfig cfg{m.file.fd(), m.file.path(), m.opt.queue_depth};
  m.engine = m.opt.engine_factory ? m.opt.engine_factory(cfg)
                                  : make_default_io_engine(cfg, m.opt.use_io_uring);
  OFFGEN_CHECK(m.engine != nullptr, kConfig, "NVMe store {}: engine factory returned null",
               m.file.path());
  if (!m.opt.engine_factory)  // the end-to-end tests' fault injection (OFFGEN_DEBUG_IO_FAULT)
    if (std::vector<FaultRule> rules = fault_rules_from_env(); !rules.empty())
      m.engine = std::make_unique<FaultInjectingIoEngine>(std::move(m.engine), std::move(rules));
  m.depth = std::max<uint32_t>(1, std::min(m.opt.queue_depth, m.engine->capacity()));
  m.slots.resize(m.depth);
  for (uint32_t i = m.depth; i-- > 0;) m.free_slots.push_back(i);
  m.completions.resize(m.depth);
  m.batch.reserve(m.depth);  // issue() cannot throw before its batch is back in `pending`
  m.staging = AlignedHostBuffer(m.opt.staging_bytes);
  register_buffers({});
}

NvmeStore::~NvmeStore() {
  if (!impl_ || !impl_->engine) return;
  std::lock_guard lock(impl_->io_mu);
  // Buffers must not be written by the kernel after we return: drain what is in flight.
  try {
    while (impl_->in_flight > 0) {
      impl_->in_flight -= static_cast<uint32_t>(impl_->engine->reap(impl_->completions, 1));
    }
  } catch (...) {
  }
  impl_->engine.reset();
}

void NvmeStore::Impl::grow(uint64_t bytes, uint64_t requested) {
  const uint64_t offset = allocated.load();
  if (opt.capacity_bytes != 0 && offset + bytes > opt.capacity_bytes) {
    OFFGEN_THROW(kResource,
                 "NVMe store {}: allocating {} bytes would exceed the disk capacity (--disk-mem) "
                 "of {} bytes ({} in use, {} of them released but in pieces too small)",
                 file.path(), requested, opt.capacity_bytes, offset, released());
  }
  int rc = -1;
  if (preallocate) {
    rc = ::fallocate(file.fd(), 0, static_cast<off_t>(offset), static_cast<off_t>(bytes));
    if (rc != 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) preallocate = false;
  }
  if (!preallocate) rc = ::ftruncate(file.fd(), static_cast<off_t>(offset + bytes));
  if (rc != 0) {
    const int err = errno;
    if (err == ENOSPC || err == EDQUOT || err == EFBIG) {
      OFFGEN_THROW(kResource,
                   "NVMe store: cannot reserve {} bytes at offset {} of {} ({}; {} bytes free "
                   "there): free disk space, lower --disk-mem, or choose another --offload-dir",
                   bytes, offset, file.path(), std::strerror(err), filesystem_free_bytes(dir));
    }
    OFFGEN_THROW(kIo, "NVMe store: reserving {} bytes at offset {} of {} failed: {}", bytes,
                 offset, file.path(), std::strerror(err));
  }
  allocated.store(offset + bytes);
}

Extent NvmeStore::allocate(uint64_t bytes) {
  Impl& m = *impl_;
  const uint64_t rounded = align_up(bytes);
  std::lock_guard lock(m.alloc_mu);
  if (rounded == 0) return Extent{m.allocated.load(), 0};
  // The smallest released extent that is large enough; its rest stays free.
  auto best = m.free.end();
  for (auto it = m.free.begin(); it != m.free.end(); ++it)
    if (it->second >= rounded && (best == m.free.end() || it->second < best->second)) best = it;
  if (best != m.free.end()) {
    const auto [offset, len] = *best;
    m.free.erase(best);
    if (len > rounded) m.free.emplace(offset + rounded, len - rounded);
    return Extent{offset, rounded};
  }
  // Released space at the end of the file grows in place; otherwise new space.
  if (!m.free.empty()) {
    const auto last = std::prev(m.free.end());
    if (last->first + last->second == m.allocated.load()) {
      const uint64_t offset = last->first;
      m.grow(rounded - last->second, rounded);
      m.free.erase(last);
      return Extent{offset, rounded};
    }
  }
  const uint64_t offset = m.allocated.load();
  m.grow(rounded, rounded);
  return Extent{offset, rounded};
}

void NvmeStore::release(const Extent& extent) {
  if (extent.bytes == 0) return;
  Impl& m = *impl_;
  m.check_extent(extent, 0, extent.bytes, "release");
  std::lock_guard lock(m.alloc_mu);
  uint64_t offset = extent.offset, bytes = extent.bytes;
  auto next = m.free.lower_bound(offset);
  const bool overlaps =
      (next != m.free.end() && next->first < offset + bytes) ||
      (next != m.free.begin() && std::prev(next)->first + std::prev(next)->second > offset);
  OFFGEN_CHECK(!overlaps, kInternal, "NVMe store {}: extent [{}, +{}) released twice",
               m.file.path(), offset, bytes);
  if (next != m.free.end() && next->first == offset + bytes) {  // merge the following one
    bytes += next->second;
    next = m.free.erase(next);
  }
  if (next != m.free.begin()) {  // merge the preceding one
    const auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      bytes += prev->second;
      m.free.erase(prev);
    }
  }
  m.free.emplace(offset, bytes);
}

uint64_t NvmeStore::free_bytes() const {
  std::lock_guard lock(impl_->alloc_mu);
  return impl_->released();
}

void NvmeStore::write(const Extent& extent, const void* src, uint64_t bytes) {
  Impl& m = *impl_;
  m.check_extent(extent, 0, bytes, "write");
  const auto* s = static_cast<const std::byte*>(src);
  std::lock_guard staging_lock(m.staging_mu);
  std::vector<IoOp> ops;
  uint64_t off = is_aligned(src) ? align_down(bytes) : 0;
  if (off > 0) ops.push_back(IoOp{IoKind::kWrite, extent, const_cast<std::byte*>(s), off, 0});
  do {
    if (off < bytes) {
      const uint64_t n = std::min(m.staging.capacity(), bytes - off);
      std::memcpy(m.staging.data(), s + off, n);
      std::memset(m.staging.data() + n, 0, align_up(n) - n);
      ops.push_back(IoOp{IoKind::kWrite, extent, m.staging.data(), align_up(n), off});
      off += n;
    }
    if (!ops.empty()) wait(submit(ops));
    ops.clear();
  } while (off < bytes);
}

void NvmeStore::read(const Extent& extent, void* dst, uint64_t bytes) {
  Impl& m = *impl_;
  m.check_extent(extent, 0, bytes, "read");
  auto* d = static_cast<std::byte*>(dst);
  std::lock_guard staging_lock(m.staging_mu);
  std::vector<IoOp> ops;
  uint64_t off = is_aligned(dst) ? align_down(bytes) : 0;
  if (off > 0) ops.push_back(IoOp{IoKind::kRead, extent, d, off, 0});
  do {
    uint64_t n = 0;
    if (off < bytes) {
      n = std::min(m.staging.capacity(), bytes - off);
      ops.push_back(IoOp{IoKind::kRead, extent, m.staging.data(), align_up(n), off});
    }
    if (!ops.empty()) wait(submit(ops));
    ops.clear();
    if (n > 0) std::memcpy(d + off, m.staging.data(), n);
    off += n;
  } while (off < bytes);
}

Ticket NvmeStore::submit(std::span<const IoOp> ops) {
  std::lock_guard lock(impl_->io_mu);
  return impl_->submit_locked(ops);
}

void NvmeStore::wait(Ticket ticket) {
  std::unique_lock lock(impl_->io_mu);
  impl_->wait_locked(ticket, lock);
}

bool NvmeStore::poll(Ticket ticket) {
  std::lock_guard lock(impl_->io_mu);
  auto it = impl_->tickets.find(ticket);
  OFFGEN_CHECK(it != impl_->tickets.end(), kInput, "NVMe store {}: unknown ticket {}",
               impl_->file.path(), ticket);
  if (it->second.outstanding > 0) impl_->pump();
  return impl_->tickets.at(ticket).outstanding == 0;
}

bool NvmeStore::register_buffers(std::span<const HostRegion> regions) {
  Impl& m = *impl_;
  std::lock_guard lock(m.io_mu);
  OFFGEN_CHECK(m.in_flight == 0 && m.pending.empty() && !m.reaping, kInput,
               "NVMe store {}: register_buffers while I/O is in flight", m.file.path());
  std::vector<HostRegion> all{HostRegion{m.staging.data(), m.staging.capacity()}};
  all.insert(all.end(), regions.begin(), regions.end());
  return m.engine->register_buffers(all);
}

IoStats NvmeStore::stats() const {
  const AtomicStats& s = impl_->st;
  return IoStats{s.bytes_read.load(), s.bytes_written.load(),   s.engine_ops.load(),
                 s.retries.load(),    s.short_transfers.load(), s.eagain.load(),
                 s.errors.load()};
}

const std::string& NvmeStore::path() const { return impl_->file.path(); }
const std::string& NvmeStore::dir() const { return impl_->dir; }
const char* NvmeStore::engine_name() const { return impl_->engine->name(); }
bool NvmeStore::direct() const { return impl_->file.direct(); }
bool NvmeStore::tmpfile() const { return impl_->file.tmpfile(); }
uint64_t NvmeStore::allocated_bytes() const { return impl_->allocated.load(); }
uint32_t NvmeStore::queue_depth() const { return impl_->depth; }

}  // namespace offgen
