// Calibration within limits: a memory limit leaves out the measurements whose buffers would not
// fit (keeping the smallest shapes) and is recorded in the profile; a disk limit bounds the file
// region the transfer measurements cycle over and the op sizes.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "eval/calibrate.h"
#include "runtime/backend/backend.h"
#include "runtime/loaders/model_loader.h"
#include "tests/temp_dir.h"

using namespace offgen;

namespace {

ComputeProfile measure(int64_t memory_limit) {
  auto backend = make_cpu_backend(1, WeightMode::native_mode());
  OpenedModel opened = open_model(std::string(OFFGEN_TEST_DATA) + "/hf_models/llama");
  const DecoderModel model(*opened.source, *backend);
  CalibrateOptions o;
  o.quick = true;
  o.memory_limit = memory_limit;
  return measure_compute(model, "native", model.backend().caps().default_kv_dtype, o);
}

}  // namespace

TEST_CASE("calibration: a memory limit leaves out the shapes that do not fit", "[calibrate]") {
  const ComputeProfile all = measure(0);
  CHECK(all.memory_limit == 0);
  CHECK(all.mlp.x == std::vector<double>{1, 16, 128});
  CHECK(all.prefill_pair.x == std::vector<double>{32, 128});
  CHECK(all.output.x == std::vector<double>{1, 16});
  // No room at all: the smallest shapes only, still a usable profile.
  const ComputeProfile tight = measure(1);
  CHECK(tight.memory_limit == 1);
  CHECK(tight.mlp.x == std::vector<double>{1, 16});
  CHECK(tight.attn_base.x == std::vector<double>{1, 16});
  CHECK(tight.prefill_pair.x == std::vector<double>{32});
  CHECK(tight.output.x == std::vector<double>{1, 16});
  for (double s : tight.mlp.seconds) CHECK(s > 0);
  CHECK(tight.decode_pair > 0);
  // Figures measured within a limit serve plans within it, not plans with more RAM.
  CHECK(tight.covers(1));
  CHECK_FALSE(tight.covers(2));
  CHECK_FALSE(tight.covers(0));
  CHECK(all.covers(0));
  CHECK(all.covers(int64_t{1} << 40));
}

TEST_CASE("calibration: a disk limit bounds the transfer measurements", "[calibrate][io]") {
  const test::TempDir dir;
  CalibrateOptions o;
  o.quick = true;
  o.offload_dir = dir.path();
  o.disk_limit = 64 * 1024;  // room for 4 KiB ops only (ops are at most half the region)
  const HardwareProfile p = measure_transfers(o);
  CHECK(p.disk_read.x == std::vector<double>{4096});
  CHECK(p.disk_write.x == std::vector<double>{4096});
  CHECK(p.ram_copy.x.size() == 2);
  o.disk_limit = 0;
  CHECK(measure_transfers(o).disk_read.x == std::vector<double>{4096, 1 << 20});
}
