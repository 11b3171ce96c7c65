// GGUF block-format weights kept native (--weight-dtype native): a row's logits are bitwise the
// same alone, in a batch, in any split, placement or overlap setting (integer GEMM paths
// included), and a forward reads exactly the unit blobs, whose bytes are the file's tensor bytes
// plus alignment.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "runtime/loaders/gguf.h"
#include "scheduler/engine.h"
#include "tests/engine_run.h"
#include "tests/model_path.h"
#include "tests/temp_dir.h"

using namespace offgen;

namespace {

std::vector<Request> prompts(int64_t max_tokens) {
  // Prompt lengths differ so the batched prefill crosses the integer GEMM's row thresholds
  // (AMX from 32 rows) while each prompt alone stays below them.
  const std::vector<std::string> texts = {
      "The history of the printing press begins in the fifteenth century, when",
      "def add(a, b):", "Snow falls on the quiet village and the children",
      "A list of prime numbers: 2, 3, 5, 7, 11,", "Hello"};
  std::vector<Request> reqs;
  for (size_t i = 0; i < texts.size(); ++i) {
    Request r;
    r.id = std::to_string(i);
    r.prompt = texts[i];
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    reqs.push_back(r);
  }
  return reqs;
}

EngineOptions native_options(const std::string& model, const std::string& offload_dir,
                             int64_t gbs, int64_t ngb, double weight_ram, bool overlap) {
  EngineOptions eo;
  eo.model = model;
  eo.weight_dtype = WeightMode::native_mode();
  eo.policy.gpu_batch_size = gbs;
  eo.policy.num_gpu_batches = ngb;
  eo.policy.weight_gpu_percent = weight_ram;  // the CPU backend's "device" is RAM
  eo.policy.weight_cpu_percent = 0;
  eo.policy.overlap = overlap;
  eo.policy.offload_dir = offload_dir;
  return eo;
}

void check_schedule_invariance(const std::string& model, int64_t max_tokens) {
  const test::TempDir dir;
  const auto reqs = prompts(max_tokens);
  const test::EngineRun alone =
      test::run_engine(native_options(model, dir.path(), 1, 1, 100, false), reqs);
  REQUIRE(alone.logits.size() == reqs.size() * static_cast<size_t>(max_tokens));
  struct Case {
    const char* name;
    int64_t gbs, ngb;
    double weight_ram;
    bool overlap;
  };
  for (const Case& c : {Case{"one batch of 5, in RAM", 5, 1, 100, false},
                        Case{"3 x 2, weights on disk, overlap", 3, 2, 0, true},
                        Case{"2 x 3, 40% of weights in RAM, no overlap", 2, 3, 40, false}}) {
    INFO(c.name);
    test::require_same_run(
        alone, test::run_engine(native_options(model, dir.path(), c.gbs, c.ngb, c.weight_ram,
                                               c.overlap),
                                reqs));
  }
}

}  // namespace

TEST_CASE("native Q4_1/Q8_0 weights: logits bitwise equal alone, batched, split, on disk",
          "[model][native]") {
  check_schedule_invariance(test::default_model_path(), 4);
}

TEST_CASE("native k-quant weights (Gemma 3 Q4_K_M): logits bitwise equal across schedules",
          "[model][native]") {
  const std::string model = test::gemma3_model_path();
  if (model.empty()) {
    WARN("gemma-3-270m-q4_k_m.gguf is not in the model cache (tools/get-model gemma3-270m): "
         "the k-quant schedule check did not run");
    return;
  }
  check_schedule_invariance(model, 3);
}

TEST_CASE("a forward with native weights on disk reads the file's tensor bytes", "[model][io]") {
  const std::string model = test::default_model_path();
  int64_t layer_tensor_bytes = 0, layer_tensors = 0;
  {
    const GgufFile f = GgufFile::open(model);
    for (const GgufTensor& t : f.tensors())
      if (t.name.rfind("blk.", 0) == 0) layer_tensor_bytes += t.bytes, ++layer_tensors;
  }
  const test::TempDir dir;
  Request r;
  r.id = "io";
  r.prompt = "Counting bytes is";
  r.sampling.max_tokens = 5;
  r.sampling.ignore_eos = true;
  Engine engine(native_options(model, dir.path(), 1, 1, 0, true));
  engine.generate({r});
  const EngineStats s = engine.stats();
  const int64_t units = 2 * engine.config().n_layers;
  // The unit blobs hold every layer tensor in the file's own format; beyond those bytes only
  // alignment: 64 bytes per part or vector, 4 KiB per blob.
  CHECK(s.weights.disk_bytes >= layer_tensor_bytes);
  CHECK(s.weights.disk_bytes - layer_tensor_bytes <= layer_tensors * 64 + units * 4096);
  // One prefill forward plus one per further token, each loading every unit once.
  CHECK(static_cast<int64_t>(s.disk.io.bytes_read) ==
        r.sampling.max_tokens * s.weights.disk_bytes);
  const double ratio = static_cast<double>(s.weights.disk_bytes) / layer_tensor_bytes;
  INFO("disk bytes per forward / file tensor bytes = " << ratio);
  CHECK(ratio < 1.01);
}
