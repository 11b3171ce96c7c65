// NVMe store tests over the io_uring engine (own CTest entry, skipped with a reason when the
// kernel refuses io_uring): the shared store checks, registered (fixed) buffers, default engine.
#include <sys/resource.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "offload/nvme_store.h"
#include "offload/uring_io_engine.h"
#include "runtime/core/error.h"
#include "tests/offload/store_cases.h"

using namespace offgen;
using namespace offgen::test;

TEST_CASE("io_uring: round trip of odd sizes", "[nvme]") {
  check_round_trip_odd_sizes(EngineKind::kUring);
}

TEST_CASE("io_uring: big multi-op async batch", "[nvme]") {
  check_async_batch(EngineKind::kUring, 1);
  check_async_batch(EngineKind::kUring, 4);
  check_async_batch(EngineKind::kUring, 64);
}

TEST_CASE("io_uring: concurrent callers", "[nvme]") {
  check_concurrent_threads(EngineKind::kUring);
}

TEST_CASE("io_uring: injected faults", "[nvme]") {
  SECTION("short reads") { check_short_reads(EngineKind::kUring); }
  SECTION("short writes") { check_short_writes(EngineKind::kUring); }
  SECTION("EAGAIN") { check_eagain(EngineKind::kUring); }
  SECTION("EIO") { check_eio(EngineKind::kUring); }
  SECTION("ENOSPC") { check_enospc(EngineKind::kUring); }
  SECTION("EIO inside an async batch") { check_eio_in_async_batch(EngineKind::kUring); }
}

TEST_CASE("io_uring: default engine and registered buffers", "[nvme]") {
  TempDir dir;
  const auto before = list_dir(dir.path());
  {
    NvmeStoreOptions plain;
    plain.dir = dir.path();
    NvmeStore def(plain);
    CHECK(std::string(def.engine_name()) == "io_uring");
  }
  {
    UringIoEngine* engine = nullptr;
    NvmeStoreOptions opt;
    opt.dir = dir.path();
    opt.queue_depth = 8;
    opt.engine_factory = [&](const IoEngineConfig& cfg) -> std::unique_ptr<IoEngine> {
      int err = 0;
      auto e = UringIoEngine::try_create(cfg, &err);
      engine = e.get();
      return e;
    };
    NvmeStore store(opt);
    REQUIRE(engine != nullptr);
    AlignedHostBuffer pool(4 << 20), loose(1 << 20);
    const HostRegion region{pool.data(), pool.capacity()};
    const bool registered = store.register_buffers(std::span(&region, 1));
    rlimit lim{};
    ::getrlimit(RLIMIT_MEMLOCK, &lim);
    if (!registered) {
      // Only acceptable where pinning is really limited (unprivileged, small RLIMIT_MEMLOCK).
      REQUIRE(::geteuid() != 0);
      REQUIRE(lim.rlim_cur < (8u << 20));
      WARN("io_uring_register_buffers refused (RLIMIT_MEMLOCK " << lim.rlim_cur << ")");
    }
    const Extent e = store.allocate(5 << 20);
    const auto data = random_bytes(5 << 20, 77);
    std::memcpy(pool.data(), data.data(), 4 << 20);
    std::memcpy(loose.data(), data.data() + (4 << 20), 1 << 20);
    const uint64_t fixed_before = engine->fixed_ops();
    const IoOp writes[] = {{IoKind::kWrite, e, pool.data(), 4 << 20, 0},
                           {IoKind::kWrite, e, loose.data(), 1 << 20, 4 << 20}};
    store.wait(store.submit(writes));
    std::memset(pool.data(), 0, pool.capacity());
    std::memset(loose.data(), 0, loose.capacity());
    const IoOp reads[] = {{IoKind::kRead, e, pool.data(), 4 << 20, 0},
                          {IoKind::kRead, e, loose.data(), 1 << 20, 4 << 20}};
    store.wait(store.submit(reads));
    CHECK(std::memcmp(pool.data(), data.data(), 4 << 20) == 0);
    CHECK(std::memcmp(loose.data(), data.data() + (4 << 20), 1 << 20) == 0);
    if (registered) CHECK(engine->fixed_ops() - fixed_before == 2);  // pool ops only
    // The blocking path's staging buffer is registered too.
    std::vector<uint8_t> odd(12345, 3), back(12345);
    const uint64_t fixed_mid = engine->fixed_ops();
    store.write(e, odd.data(), odd.size());
    store.read(e, back.data(), back.size());
    CHECK(back == odd);
    if (registered) CHECK(engine->fixed_ops() > fixed_mid);
  }
  CHECK(list_dir(dir.path()) == before);
}
