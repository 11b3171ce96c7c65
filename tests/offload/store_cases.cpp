// Shared NVMe store test bodies (see store_cases.h).
#include "tests/offload/store_cases.h"

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

#include "runtime/core/error.h"

namespace offgen::test {

namespace {

// Odd sizes: sub-block, block boundaries, multi-chunk (store max_op_bytes is 4 MiB).
const std::vector<uint64_t> kOddSizes = {
    1, 7, 4095, 4096, 4097, 8191, 12345, 65536, 100003, 1 << 20, (1 << 20) + 3, (9 << 20) + 17};

void require_clean(const std::set<std::string>& before, const std::string& dir) {
  CHECK(list_dir(dir) == before);
}

// Writes `data` through `write` into extent `e` with host pointers both aligned and not, reads
// it back, compares.
void round_trip(NvmeStore& store, const std::vector<uint64_t>& sizes, uint64_t seed) {
  const IoStats start = store.stats();
  uint64_t payload = 0;  // every transfer moves whole 4 KiB blocks
  for (uint64_t s : sizes) payload += align_up(s);
  std::vector<Extent> extents;
  std::vector<std::vector<uint8_t>> data;
  for (size_t i = 0; i < sizes.size(); ++i) {
    extents.push_back(store.allocate(sizes[i]));
    REQUIRE(extents.back().bytes == align_up(sizes[i]));
    REQUIRE(extents.back().offset % kDiskAlign == 0);
    data.push_back(random_bytes(sizes[i], seed + i));
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i % 2 == 0) {
      store.write(extents[i], data[i].data(), sizes[i]);  // vector storage: usually unaligned
    } else {
      AlignedHostBuffer b(sizes[i]);
      std::memcpy(b.data(), data[i].data(), sizes[i]);
      store.write(extents[i], b.data(), sizes[i]);
    }
  }
  // Read back in a shuffled order, alternating aligned and unaligned destinations.
  std::vector<size_t> order(sizes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(seed)));
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    if (k % 2 == 0) {
      std::vector<uint8_t> out(sizes[i] + 1);
      store.read(extents[i], out.data() + 1, sizes[i]);  // deliberately misaligned
      REQUIRE(std::memcmp(out.data() + 1, data[i].data(), sizes[i]) == 0);
    } else {
      AlignedHostBuffer b(extents[i].bytes);
      store.read(extents[i], b.data(), extents[i].bytes);  // whole extent: tail is zero-padded
      REQUIRE(std::memcmp(b.data(), data[i].data(), sizes[i]) == 0);
      REQUIRE(std::all_of(b.data() + sizes[i], b.data() + extents[i].bytes,
                          [](std::byte x) { return x == std::byte{0}; }));
    }
  }
  const IoStats end = store.stats();
  CHECK(end.bytes_written - start.bytes_written == payload);
  CHECK(end.bytes_read - start.bytes_read == payload);
}

}  // namespace

void check_round_trip_odd_sizes(EngineKind kind) {
  TempDir dir;
  const auto before = list_dir(dir.path());
  {
    NvmeStore store(store_options(dir.path(), kind));
    CHECK(list_dir(dir.path()) == before);  // the backing file is never visible
    round_trip(store, kOddSizes, 11);
    const IoStats s = store.stats();
    CHECK(s.errors == 0);
    CHECK(s.short_transfers == 0);
  }
  require_clean(before, dir.path());
}

void check_async_batch(EngineKind kind, uint32_t queue_depth) {
  TempDir dir;
  const auto before = list_dir(dir.path());
  {
    NvmeStoreOptions opt = store_options(dir.path(), kind);
    opt.queue_depth = queue_depth;
    opt.max_op_bytes = 256 << 10;  // big ops split into many engine ops
    NvmeStore store(opt);
    std::mt19937_64 rng(7);
    constexpr int kOps = 300;
    std::vector<AlignedHostBuffer> src, dst;
    std::vector<IoOp> writes, reads;
    uint64_t total = 0;
    for (int i = 0; i < kOps; ++i) {
      const uint64_t bytes = (i % 50 == 0) ? (3 << 20) + 8192 : (1 + rng() % 64) * kDiskAlign;
      const Extent e = store.allocate(bytes);
      src.emplace_back(bytes);
      dst.emplace_back(bytes);
      const auto r = random_bytes(bytes, 1000 + i);
      std::memcpy(src.back().data(), r.data(), bytes);
      writes.push_back(IoOp{IoKind::kWrite, e, src.back().data(), bytes, 0});
      reads.push_back(IoOp{IoKind::kRead, e, dst.back().data(), bytes, 0});
      total += bytes;
    }
    const IoStats before_stats = store.stats();
    // Two write tickets in flight at once, then one read ticket polled to completion.
    const size_t half = writes.size() / 2;
    const Ticket w1 = store.submit(std::span(writes).first(half));
    const Ticket w2 = store.submit(std::span(writes).subspan(half));
    store.wait(w2);
    store.wait(w1);
    const Ticket r = store.submit(reads);
    while (!store.poll(r)) {
    }
    store.wait(r);
    for (int i = 0; i < kOps; ++i) {
      REQUIRE(std::memcmp(src[i].data(), dst[i].data(), src[i].size()) == 0);
    }
    const IoStats s = store.stats();
    CHECK(s.bytes_written - before_stats.bytes_written == total);
    CHECK(s.bytes_read - before_stats.bytes_read == total);
    CHECK(s.engine_ops - before_stats.engine_ops >= 2 * kOps);
    CHECK(s.errors == 0);
    // Sub-extent ops: read the second 4 KiB block of an op alone.
    AlignedHostBuffer one(kDiskAlign);
    IoOp part{IoKind::kRead, writes[1].extent, one.data(), kDiskAlign, kDiskAlign};
    if (writes[1].extent.bytes >= 2 * kDiskAlign) {
      store.wait(store.submit(std::span(&part, 1)));
      CHECK(std::memcmp(one.data(), src[1].data() + kDiskAlign, kDiskAlign) == 0);
    }
  }
  require_clean(before, dir.path());
}

void check_short_reads(EngineKind kind) {
  TempDir dir;
  const auto before = list_dir(dir.path());
  {
    FaultInjectingIoEngine* inj = nullptr;
    // The 3rd op returns half its bytes; then every 4th read is short.
    auto opt = store_options(
        dir.path(), kind,
        {FaultRule::short_op(3).only_reads(), FaultRule::short_op(1, 4).only_reads()}, &inj);
    NvmeStore store(opt);
    round_trip(store, kOddSizes, 21);
    REQUIRE(inj != nullptr);
    CHECK(inj->fault_stats().shorts > 5);
    CHECK(store.stats().short_transfers >= inj->fault_stats().shorts);
    CHECK(store.stats().errors == 0);
  }
  require_clean(before, dir.path());
}

void check_short_writes(EngineKind kind) {
  TempDir dir;
  const auto before = list_dir(dir.path());
  {
    FaultInjectingIoEngine* inj = nullptr;
    auto opt = store_options(dir.path(), kind, {FaultRule::short_op(1, 2).only_writes()}, &inj);
    NvmeStore store(opt);
    round_trip(store, kOddSizes, 31);
    CHECK(inj->fault_stats().shorts > 5);
    CHECK(store.stats().short_transfers >= inj->fault_stats().shorts);
    CHECK(store.stats().errors == 0);
  }
  require_clean(before, dir.path());
}

void check_eagain(EngineKind kind) {
  TempDir dir;
  const auto before = list_dir(dir.path());
  {
    FaultInjectingIoEngine* inj = nullptr;
    // Every 5th op -EAGAIN, plus a burst on ops 2..4 (each resubmission is a new op).
    auto opt = store_options(dir.path(), kind,
                             {FaultRule::eagain(5, 5), FaultRule::eagain(2, 1).at_most(3)}, &inj);
    NvmeStore store(opt);
    round_trip(store, kOddSizes, 41);
    CHECK(inj->fault_stats().eagains > 5);
    CHECK(store.stats().eagain == inj->fault_stats().eagains);
    CHECK(store.stats().errors == 0);
  }
  {
    // A device that answers -EAGAIN forever: a clear error after max_retries, not a hang.
    auto opt = store_options(dir.path(), kind, {FaultRule::eagain(1, 1)});
    opt.max_retries = 3;
    NvmeStore store(opt);
    const Extent e = store.allocate(4096);
    std::vector<uint8_t> buf(4096, 1);
    try {
      store.write(e, buf.data(), buf.size());
      FAIL("expected an error");
    } catch (const Error& err) {
      CHECK(err.category() == ErrorCategory::kIo);
      CHECK_THAT(err.what(), Catch::Contains(store.path()) && Catch::Contains("offset 0") &&
                                 Catch::Contains("EAGAIN"));
    }
  }
  require_clean(before, dir.path());
}

void check_eio(EngineKind kind) {
  TempDir dir;
  const auto before = list_dir(dir.path());
  {
    // Op 7 fails with -EIO: with one op per blocking 4 KiB write that is the 7th extent.
    auto opt = store_options(dir.path(), kind, {FaultRule::fail(7, EIO)});
    NvmeStore store(opt);
    std::vector<Extent> extents;
    for (int i = 0; i < 10; ++i) extents.push_back(store.allocate(4096));
    AlignedHostBuffer buf(4096);
    std::memset(buf.data(), 0x5a, 4096);
    for (int i = 0; i < 10; ++i) {
      if (i != 6) {
        store.write(extents[i], buf.data(), 4096);
        continue;
      }
      try {
        store.write(extents[i], buf.data(), 4096);
        FAIL("expected an EIO error");
      } catch (const Error& err) {
        CHECK(err.category() == ErrorCategory::kIo);
        const std::string msg = err.what();
        CHECK_THAT(msg, Catch::Contains(store.path()));
        CHECK_THAT(msg, Catch::Contains(fmt::format("offset {}", extents[6].offset)));
        CHECK_THAT(msg, Catch::Contains(std::strerror(EIO)));
      }
    }
    // The store stays usable: a retry of the failed write and a read of everything succeed.
    store.write(extents[6], buf.data(), 4096);
    for (int i = 0; i < 10; ++i) {
      AlignedHostBuffer in(4096);
      store.read(extents[i], in.data(), 4096);
      REQUIRE(std::memcmp(in.data(), buf.data(), 4096) == 0);
    }
    CHECK(store.stats().errors == 1);
  }
  require_clean(before, dir.path());
}

void check_enospc(EngineKind kind) {
  TempDir dir;
  const auto before = list_dir(dir.path());
  {
    constexpr uint64_t kLimit = 64 << 10;
    auto opt = store_options(dir.path(), kind, {FaultRule::enospc_past(kLimit)});
    NvmeStore store(opt);
    const Extent small = store.allocate(kLimit);
    const Extent big = store.allocate(1 << 20);  // lies past the limit
    const auto data = random_bytes(1 << 20, 5);
    store.write(small, data.data(), kLimit);
    try {
      store.write(big, data.data(), 1 << 20);
      FAIL("expected ENOSPC");
    } catch (const Error& err) {
      CHECK(err.category() == ErrorCategory::kResource);
      const std::string msg = err.what();
      CHECK_THAT(msg, Catch::Contains(store.path()));
      CHECK_THAT(msg, Catch::Contains(fmt::format("offset {}", big.offset)));
      CHECK_THAT(msg, Catch::Contains("--disk-mem"));
      CHECK_THAT(msg, Catch::Contains("free"));
    }
    std::vector<uint8_t> back(kLimit);
    store.read(small, back.data(), kLimit);
    CHECK(std::memcmp(back.data(), data.data(), kLimit) == 0);
  }
  require_clean(before, dir.path());
}

void check_eio_in_async_batch(EngineKind kind) {
  TempDir dir;
  const auto before = list_dir(dir.path());
  {
    // Op 20 of a deep batch fails while others are in flight; a second ticket is unaffected.
    auto opt = store_options(dir.path(), kind, {FaultRule::fail(20, EIO).only_reads()});
    opt.max_op_bytes = 64 << 10;
    NvmeStore store(opt);
    const Extent e = store.allocate(8 << 20);
    AlignedHostBuffer src(8 << 20), dst(8 << 20);
    const auto r = random_bytes(8 << 20, 9);
    std::memcpy(src.data(), r.data(), r.size());
    IoOp w{IoKind::kWrite, e, src.data(), src.size(), 0};
    store.wait(store.submit(std::span(&w, 1)));
    IoOp rd{IoKind::kRead, e, dst.data(), dst.size(), 0};
    const Ticket t = store.submit(std::span(&rd, 1));
    try {
      store.wait(t);
      FAIL("expected EIO");
    } catch (const Error& err) {
      CHECK(err.category() == ErrorCategory::kIo);
      CHECK_THAT(err.what(), Catch::Contains(store.path()) &&
                                 Catch::Contains(fmt::format("offset {}", 19 * (64 << 10))));
    }
    CHECK_THROWS_AS(store.wait(t), Error);  // a ticket is consumed by its wait
    store.wait(store.submit(std::span(&rd, 1)));
    CHECK(std::memcmp(src.data(), dst.data(), src.size()) == 0);
  }
  require_clean(before, dir.path());
}

void check_concurrent_threads(EngineKind kind) {
  TempDir dir;
  const auto before = list_dir(dir.path());
  {
    // Blocking and async calls from several threads at once (the store serialises them).
    NvmeStore store(store_options(dir.path(), kind));
    std::vector<std::thread> threads;
    std::atomic<int> mismatches{0};
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937_64 rng(t);
        for (int i = 0; i < 20; ++i) {
          const uint64_t bytes = 1 + rng() % (300 << 10);
          const Extent e = store.allocate(bytes);
          const auto data = random_bytes(bytes, t * 100 + i);
          std::vector<uint8_t> back(bytes);
          if (i % 2 == 0) {
            store.write(e, data.data(), bytes);
            store.read(e, back.data(), bytes);
          } else {
            AlignedHostBuffer src(bytes), dst(bytes);
            std::memcpy(src.data(), data.data(), bytes);
            const IoOp w{IoKind::kWrite, e, src.data(), src.capacity(), 0};
            store.wait(store.submit(std::span(&w, 1)));
            const IoOp r{IoKind::kRead, e, dst.data(), dst.capacity(), 0};
            const Ticket tk = store.submit(std::span(&r, 1));
            while (!store.poll(tk)) std::this_thread::yield();
            store.wait(tk);
            std::memcpy(back.data(), dst.data(), bytes);
          }
          if (back != data) ++mismatches;
        }
      });
    }
    for (auto& th : threads) th.join();
    CHECK(mismatches.load() == 0);
    CHECK(store.stats().errors == 0);
  }
  require_clean(before, dir.path());
}

}  // namespace offgen::test
