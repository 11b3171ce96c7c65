// Stop requests: StopSource/StopToken semantics, the pause hook tests use, and the dummy model
// source noticing a stop inside one large tensor (its pieces leave the values unchanged).
#include <catch2/catch.hpp>

#include <cmath>
#include <csignal>
#include <cstring>
#include <vector>

#include "runtime/core/dtype.h"
#include "runtime/core/hash.h"
#include "runtime/core/quant_blocks.h"
#include "runtime/core/stop.h"
#include "runtime/loaders/dummy_source.h"

using namespace offgen;

TEST_CASE("a stop token throws Stopped naming the phase once its source is asked", "[stop]") {
  StopToken none;
  CHECK_FALSE(none.requested());
  CHECK_NOTHROW(none.check("load"));
  StopSource source;
  const StopToken token = source.token();
  CHECK_FALSE(token.requested());
  CHECK_NOTHROW(token.check("load"));
  source.request(SIGTERM);
  source.request(SIGINT);  // the first reason stays
  CHECK(token.requested());
  CHECK(source.reason() == SIGTERM);
  try {
    token.check("decode");
    FAIL("no Stopped");
  } catch (const Stopped& e) {
    CHECK(e.phase() == "decode");
    CHECK(std::string(e.what()) == "stopped in decode");
  }
}

TEST_CASE("the pause hook lets the paused checkpoint pass and the next one stop", "[stop]") {
  StopSource source;
  source.pause_at("prefill", 2);
  source.request(SIGTERM);  // already asked: the pause returns at once
  const StopToken token = source.token();
  CHECK_THROWS_AS(token.check("load"), Stopped);     // another phase: not counted
  CHECK_THROWS_AS(token.check("prefill"), Stopped);  // the first of its phase
  CHECK_NOTHROW(token.check("prefill"));             // the second: paused, passes
  CHECK_THROWS_AS(token.check("prefill"), Stopped);  // the next one stops
}

TEST_CASE("a dummy model's large tensor is generated in pieces with stop checks", "[stop]") {
  // llama-7b's MLP matrices in q8_0: ~47 MB each, many 4 MiB pieces.
  const std::string name = "blk.0.ffn_down.weight";
  StopSource source;
  const DummyWeightSource src("llama-7b:q8_0", source.token());
  const TensorRef t = src.tensor(name);
  REQUIRE(t.dtype == DType::kQ8_0);
  // The pieces continue one stream: the values are those of one random_blocks call.
  const int64_t blocks = t.n_elems() / dtype_block_elems(t.dtype);
  std::vector<uint8_t> whole(dtype_bytes(t.dtype, t.n_elems()));
  uint64_t x = fnv1a64(name) | 1;
  random_blocks(t.dtype, x, std::sqrt(3.0f / static_cast<float>(t.dims[0])), whole.data(), blocks);
  CHECK(std::memcmp(whole.data(), t.data, whole.size()) == 0);
  // A stop inside the tensor: the first checkpoint (paused, passing) is not its last one.
  source.pause_at("load", 1);
  source.request(SIGTERM);
  try {
    src.tensor(name);
    FAIL("no Stopped");
  } catch (const Stopped& e) {
    CHECK(e.phase() == "load");
  }
  // fp32 tensors too.
  const DummyWeightSource f32("llama-7b", source.token());
  CHECK_THROWS_AS(f32.tensor(name), Stopped);
}
