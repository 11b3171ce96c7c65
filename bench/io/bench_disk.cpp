// Sequential read/write throughput of the NVMe store (O_DIRECT, one store file) in fixed-size ops
// at several queue depths, for the io_uring and pread/pwrite engines; prints GB/s (1e9 B/s).
// Compare with: fio --name=seq --rw=read --direct=1 --bs=4M --size=1G --ioengine=io_uring
//                   --iodepth=16 --directory=DIR
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "offload/nvme_store.h"
#include "runtime/core/error.h"

namespace {

using Clock = std::chrono::steady_clock;

double run_pass(offgen::NvmeStore& store, offgen::IoKind kind, const offgen::Extent& extent,
                offgen::AlignedHostBuffer& host, uint64_t block, uint64_t nbuf) {
  std::vector<offgen::IoOp> ops;
  for (uint64_t off = 0; off < extent.bytes; off += block) {
    const uint64_t slot = (off / block) % nbuf;
    ops.push_back(
        {kind, extent, host.data() + slot * block, std::min(block, extent.bytes - off), off});
  }
  const auto t0 = Clock::now();
  store.wait(store.submit(ops));
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace offgen;
  CLI::App app{"bench_disk: sequential O_DIRECT throughput of the NVMe store"};
  std::string dir = "/tmp";
  uint64_t size = 1ull << 30, block = 4ull << 20;
  std::vector<uint32_t> depths = {1, 4, 16, 64};
  std::vector<std::string> engines = {"io_uring", "sync"};
  int reps = 3;
  bool buffered = false, no_register = false;
  app.add_option("--dir", dir, "Offload dir to measure");
  app.add_option("--size", size, "Bytes per pass (e.g. 1G)")->transform(CLI::AsSizeValue(false));
  app.add_option("--block", block, "Bytes per op (e.g. 4M)")->transform(CLI::AsSizeValue(false));
  app.add_option("--qd", depths, "Queue depths")->delimiter(',');
  app.add_option("--engines", engines, "io_uring,sync")->delimiter(',');
  app.add_option("--reps", reps, "Passes per setting (best is reported)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--buffered", buffered, "Buffered I/O instead of O_DIRECT");
  app.add_flag("--no-register", no_register, "Do not register host buffers with io_uring");
  CLI11_PARSE(app, argc, argv);
  try {
    OFFGEN_CHECK(block % kDiskAlign == 0 && block > 0 && size >= block, kConfig,
                 "--block must be a multiple of 4096 and <= --size");
    std::printf("dir %s, %.2f GiB per pass, %llu KiB ops, best of %d\n", dir.c_str(),
                size / double(1ull << 30), static_cast<unsigned long long>(block >> 10), reps);
    std::printf("%-9s %5s %7s %10s %10s\n", "engine", "qd", "direct", "write GB/s", "read GB/s");
    for (const std::string& engine : engines) {
      OFFGEN_CHECK(engine == "io_uring" || engine == "sync", kConfig, "unknown engine {}", engine);
      for (uint32_t qd : depths) {
        NvmeStoreOptions opt;
        opt.dir = dir;
        opt.queue_depth = qd;
        opt.use_io_uring = engine == "io_uring";
        opt.direct = !buffered;
        opt.max_op_bytes = std::min<uint64_t>(block, 1ull << 30);
        NvmeStore store(opt);
        if (opt.use_io_uring && std::string(store.engine_name()) != "io_uring") {
          std::printf("%-9s %5u  (io_uring unavailable, skipped)\n", engine.c_str(), qd);
          break;
        }
        const uint64_t nbuf = std::min<uint64_t>(qd, size / block);
        AlignedHostBuffer host(nbuf * block);
        std::mt19937_64 rng(1);
        for (uint64_t i = 0; i + 8 <= host.size(); i += 8) {
          const uint64_t x = rng();
          std::memcpy(host.data() + i, &x, 8);
        }
        if (!no_register) {
          const HostRegion region{host.data(), host.capacity()};
          store.register_buffers(std::span(&region, 1));
        }
        const Extent extent = store.allocate(align_down(size, block));
        double best_w = 1e30, best_r = 1e30;
        for (int r = 0; r < reps; ++r) {
          best_w = std::min(best_w, run_pass(store, IoKind::kWrite, extent, host, block, nbuf));
          best_r = std::min(best_r, run_pass(store, IoKind::kRead, extent, host, block, nbuf));
        }
        std::printf("%-9s %5u %7s %10.3f %10.3f\n", store.engine_name(), store.queue_depth(),
                    store.direct() ? "yes" : "no", extent.bytes / best_w / 1e9,
                    extent.bytes / best_r / 1e9);
        std::fflush(stdout);
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_disk: %s\n", e.what());
    return 1;
  }
  return 0;
}
