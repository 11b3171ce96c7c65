// Weight homes and staging.
#include "offload/weight_store.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <future>
#include <optional>
#include <system_error>
#include <utility>

#include "runtime/core/error.h"

namespace offgen {

WeightStore::WeightStore(Backend& backend, int64_t num_units,
                         const std::function<int64_t(int64_t)>& unit_bytes,
                         const std::function<void(int64_t, void*)>& build,
                         const Placement& placement, NvmeStore* disk, int staging_slots,
                         const std::function<int64_t(int64_t)>& lazy_from)
    : backend_(backend), units_(num_units), disk_(disk), slots_(staging_slots) {
  OFFGEN_CHECK(staging_slots >= 2, kInternal, "weight store: {} staging slots", staging_slots);
  const bool split = split_ = !backend_.device_is_host();
  OFFGEN_CHECK(placement.device_is_host() == !split, kInternal,
               "weight placement for a backend whose device memory {} host memory, on {}",
               placement.device_is_host() ? "is" : "is not", backend_.name());
  std::vector<int64_t> sizes(static_cast<size_t>(num_units));
  for (int64_t u = 0; u < num_units; ++u) sizes[u] = unit_bytes(u);
  const WeightSplit plan = placement.weight_blobs(sizes, staging_slots);
  // Two temporaries when units go to disk: the next unit is built while the last one's disk part
  // is written (an async write; a part the engine cannot queue as it is is written blocking). A
  // thread waits for each write: the store issues a write's ops beyond its queue depth only as a
  // waiter reaps the earlier ones, so without one the rest of a large unit's part (past 64 x
  // 4 MiB) would wait for the temporary's next use. (Declared after tmp: a pending waiter is
  // joined before the temporaries go.)
  Buffer tmp[2];
  std::future<void> writing[2];
  // Where device memory is host memory, the temporaries become two of the staging slots after
  // the build (their pages touched once instead of twice): then each has a slot's size.
  const int reused = !split ? static_cast<int>(std::min<int64_t>(2, plan.staging_slots)) : 0;
  for (int i = 0; i < reused; ++i) tmp[i] = backend_.alloc(plan.staging_slot_bytes, Tier::kHost);
  auto finish_writes = [&](bool rethrow) {
    std::exception_ptr first;
    for (std::future<void>& w : writing) {
      if (!w.valid()) continue;
      try {
        w.get();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (rethrow && first) std::rethrow_exception(first);
  };
  int cur = 0;
  try {
    for (int64_t u = 0; u < num_units; ++u) {
      Unit& x = units_[u];
      x.bytes = sizes[u];
      const TierBytes home = placement.weight_home(x.bytes);
      x.device_bytes = home.device;
      x.ram_bytes = home.host;
      x.disk_bytes = home.disk;
      if (writing[cur].valid()) writing[cur].get();
      Buffer& t = tmp[cur];
      if (t.bytes() < x.bytes) t = backend_.alloc(x.bytes, Tier::kHost);
      auto* blob = static_cast<std::byte*>(t.data());
      build(u, blob);
      if (x.device_bytes > 0) {
        x.device = backend_.alloc(x.device_bytes, Tier::kDevice);
        backend_.copy(x.device.data(), blob, x.device_bytes);
        backend_.synchronize();  // the temporary is reused
      }
      if (x.ram_bytes > 0) {
        x.ram = backend_.alloc(x.ram_bytes, Tier::kHost);
        std::memcpy(x.ram.data(), blob + x.device_bytes, x.ram_bytes);
      }
      if (x.disk_bytes > 0) {
        OFFGEN_CHECK(disk_ != nullptr, kInternal, "weights placed on disk without an NVMe store");
        x.disk = disk_->allocate(x.disk_bytes);
        std::byte* part = blob + x.device_bytes + x.ram_bytes;
        if (is_aligned(part) && x.disk_bytes % kDiskAlign == 0) {
          const IoOp op{IoKind::kWrite, x.disk, part, static_cast<uint64_t>(x.disk_bytes), 0};
          const Ticket k = disk_->submit({&op, 1});
          try {
            writing[cur] = std::async(std::launch::async, [this, k] { disk_->wait(k); });
          } catch (const std::system_error&) {  // no thread to be had: wait here
            disk_->wait(k);
          }
          cur ^= 1;
        } else {
          disk_->write(x.disk, part, x.disk_bytes);
        }
      }
      x.in_place = placement.weight_in_place(home);
      any_staged_ = any_staged_ || !x.in_place;
      x.lazy_from = x.bytes;
      if (lazy_from && !x.in_place && !split) {
        x.lazy_from = std::min(x.bytes, lazy_from(u));
        OFFGEN_CHECK(x.lazy_from >= 0 && x.lazy_from % 4096 == 0, kInternal,
                     "weight store: unit {}'s lazy tail starts at {}", u, x.lazy_from);
        any_lazy_ = any_lazy_ || x.lazy_from < x.bytes;
      }
      stats_.device_bytes += x.device_bytes;
      stats_.ram_bytes += x.ram_bytes;
      stats_.disk_bytes += x.disk_bytes;
    }
    finish_writes(true);
  } catch (...) {
    finish_writes(false);  // the temporaries must outlive the writes that read them
    throw;
  }
  // Those not becoming staging slots go before the slots and bounce buffers are allocated.
  for (int i = reused; i < 2; ++i) tmp[i] = Buffer{};
  for (int64_t i = 0; i < plan.staging_slots; ++i) {
    // (A slot's contents before its first load do not matter.)
    if (i < reused)
      staging_.push_back(std::move(tmp[i]));
    else
      staging_.push_back(backend_.alloc(plan.staging_slot_bytes, Tier::kDevice));
    loaded_.push_back(backend_.make_event());
    free_.push_back(backend_.make_event());
    stats_.staging_bytes += plan.staging_slot_bytes;
  }
  for (int64_t i = 0; i < plan.bounce_buffers; ++i) {
    bounce_.push_back(backend_.alloc(plan.bounce_buffer_bytes, Tier::kHost));
    bounce_free_.push_back(backend_.make_event());
    stats_.bounce_bytes += plan.bounce_buffer_bytes;
  }
}

void WeightStore::load(int64_t unit, int slot, Stream& stream, bool whole) {
  Unit& x = units_[unit];
  if (x.in_place) return;
  auto* dst = static_cast<std::byte*>(staging_[slot].data());
  stream.wait(*free_[slot]);  // the compute that read this slot last
  // Each home's part up to the lazy tail (the whole part without one: lazy tails are CPU-only).
  const int64_t upto = whole ? x.bytes : x.lazy_from;
  const int64_t ram = std::clamp<int64_t>(upto - x.device_bytes, 0, x.ram_bytes);
  const int64_t disk = std::clamp<int64_t>(upto - x.device_bytes - x.ram_bytes, 0, x.disk_bytes);
  if (x.device_bytes > 0) stream.copy(dst, x.device.data(), x.device_bytes);
  if (ram > 0) {
    stream.copy(dst + x.device_bytes, x.ram.data(), ram);
    if (!backend_.device_is_host()) h2d_bytes_ += ram;
  }
  if (disk > 0) {
    std::byte* at = dst + x.device_bytes + x.ram_bytes;
    if (backend_.device_is_host()) {
      free_[slot]->synchronize();  // the read below writes the slot from this thread
      disk_->read(x.disk, at, disk);
    } else {
      const int b = next_bounce_;
      next_bounce_ ^= 1;
      bounce_free_[b]->synchronize();  // its previous copy to the device has finished
      disk_->read(x.disk, bounce_[b].data(), x.disk_bytes);
      stream.copy(at, bounce_[b].data(), x.disk_bytes);
      stream.record(*bounce_free_[b]);
      h2d_bytes_ += x.disk_bytes;
    }
  }
  stream.record(*loaded_[slot]);
}

void WeightStore::load_ranges(int64_t unit, int slot,
                              std::span<const std::pair<int64_t, int64_t>> ranges) {
  wait_ranges(fetch_ranges(unit, slot, ranges));
}

void WeightStore::wait_ranges(std::optional<Ticket> ticket) {
  if (ticket) disk_->wait(*ticket);
}

std::optional<Ticket> WeightStore::fetch_ranges(
    int64_t unit, int slot, std::span<const std::pair<int64_t, int64_t>> ranges) {
  const Unit& x = units_[unit];
  auto* dst = static_cast<std::byte*>(staging_[slot].data());
  // Each range's part in RAM (after the device part, which is empty where device memory is host
  // memory), then its part on disk, whose offsets in the extent stay 4 KiB multiples.
  const int64_t disk_from = x.device_bytes + x.ram_bytes;
  std::vector<IoOp> ops;
  for (const auto& [offset, bytes] : ranges) {
    const int64_t end = offset + bytes;
    OFFGEN_CHECK(offset >= x.lazy_from && end <= x.bytes && offset % 4096 == 0 &&
                     bytes % 4096 == 0 && backend_.device_is_host(),
                 kInternal, "weight store: range [{}, {}) of unit {} is not in its lazy tail",
                 offset, end, unit);
    if (offset < disk_from)
      std::memcpy(dst + offset,
                  static_cast<const std::byte*>(x.ram.data()) + (offset - x.device_bytes),
                  std::min(end, disk_from) - offset);
    if (end > disk_from) {
      const int64_t from = std::max(offset, disk_from);
      ops.push_back(IoOp{IoKind::kRead, x.disk, dst + from, static_cast<uint64_t>(end - from),
                         static_cast<uint64_t>(from - disk_from)});
    }
    ++lazy_ranges_;
    lazy_range_bytes_ += bytes;
  }
  if (ops.empty()) return std::nullopt;
  return disk_->submit(ops);
}

const void* WeightStore::acquire(int64_t unit, int slot) {
  const Unit& x = units_[unit];
  if (x.in_place) return split_ ? x.device.data() : x.ram.data();
  backend_.compute_stream().wait(*loaded_[slot]);
  return staging_[slot].data();
}

void WeightStore::release(int64_t unit, int slot) {
  if (units_[unit].in_place) return;
  backend_.compute_stream().record(*free_[slot]);
}

}  // namespace offgen
