// Progress by blocks: the block in progress, its requests, its ETA from the steps left and the
// decode step time, and the job's ETA from finished blocks' times (or the block in progress').
#include <catch2/catch.hpp>
#include <cmath>

#include "jobs/progress.h"

using namespace offgen;

namespace {

Progress at(int64_t done, int64_t total, double elapsed, int64_t steps_left, double step) {
  Progress p;
  p.done = done;
  p.total = total;
  p.elapsed_seconds = elapsed;
  p.steps_left = steps_left;
  p.decode_step_seconds = step;
  p.running = 1;
  return p;
}

}  // namespace

TEST_CASE("block progress: position, block ETA and job ETA", "[progress]") {
  // 1000 requests in blocks of 256: the first block, 100 finished, 20 steps of 3 s left; it began
  // at 10 s and it is 70 s now: about 70 - 10 + 60 = 120 s a block.
  const BlockProgress b = block_progress(at(100, 1000, 70, 20, 3.0), 256, 10, {});
  CHECK(b.index == 1);
  CHECK(b.blocks == 4);
  CHECK(b.done == 100);
  CHECK(b.size == 256);
  CHECK(b.eta_seconds == Approx(60));
  // After it: 744 requests, 2.9 blocks' worth.
  CHECK(b.job_eta_seconds == Approx(60 + 120 * 744.0 / 256));
  // Third block, two finished in 100 s and 140 s: their mean estimates the rest.
  const BlockProgress c = block_progress(at(600, 1000, 300, 5, 2.0), 256, 240, {100, 140});
  CHECK(c.index == 3);
  CHECK(c.done == 600 - 512);
  CHECK(c.eta_seconds == Approx(10));
  CHECK(c.job_eta_seconds == Approx(10 + 120 * (1000 - 768) / 256.0));
  // The last, partial block.
  const BlockProgress d = block_progress(at(900, 1000, 500, 4, 1.0), 256, 400, {100, 140, 150});
  CHECK(d.index == 4);
  CHECK(d.size == 1000 - 768);
  CHECK(d.job_eta_seconds == Approx(4));
}

TEST_CASE("block progress: unknown until a decode step is timed; zero when done", "[progress]") {
  const BlockProgress b = block_progress(at(0, 10, 1, 8, 0), 4, 0, {});
  CHECK(b.index == 1);
  CHECK(std::isnan(b.eta_seconds));
  CHECK(std::isnan(b.job_eta_seconds));
  const BlockProgress done = block_progress(at(10, 10, 9, 0, 0.5), 4, 8, {3, 3});
  CHECK(done.index == 3);
  CHECK(done.done == 2);
  CHECK(done.job_eta_seconds == 0);
  CHECK(block_progress(at(1, 10, 1, 1, 1), 0, 0, {}).blocks == 0);  // no block: nothing
}
