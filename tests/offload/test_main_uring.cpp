// Catch2 main for io_uring-only NVMe tests: exits 77 (CTest "skipped") with the reason when the
// kernel or environment refuses io_uring, instead of passing silently.
#include "tests/catch_session.h"
#include <cstdio>
#include <cstring>

#include "offload/io_engine.h"
#include "offload/uring_io_engine.h"

int main(int argc, char** argv) {
  if (offgen::io_uring_disabled_by_env()) {
    std::printf("SKIP: io_uring disabled by OFFGEN_NO_IO_URING\n");
    return 77;
  }
  const int r = offgen::io_uring_probe();
  if (r < 0) {
    std::printf("SKIP: io_uring unavailable (io_uring_queue_init: %s)\n", std::strerror(-r));
    return 77;
  }
  return offgen::test::run_catch_session(argc, argv);
}
