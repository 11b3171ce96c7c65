// NVMe store test helpers.
#include "tests/offload/store_test_util.h"

#include <dirent.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <random>

#include "offload/uring_io_engine.h"

namespace offgen::test {

std::set<std::string> list_dir(const std::string& dir) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.insert(e.path().filename().string());
  }
  return names;
}

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t x = rng();
    std::memcpy(v.data() + i, &x, 8);
  }
  for (; i < n; ++i) v[i] = static_cast<uint8_t>(rng());
  return v;
}

const char* engine_kind_name(EngineKind k) {
  switch (k) {
    case EngineKind::kSync:
      return "sync";
    case EngineKind::kUring:
      return "io_uring";
  }
  return "?";
}

IoEngineFactory make_factory(EngineKind kind, std::vector<FaultRule> rules,
                             FaultInjectingIoEngine** injector) {
  return [=](const IoEngineConfig& cfg) -> std::unique_ptr<IoEngine> {
    std::unique_ptr<IoEngine> e;
    switch (kind) {
      case EngineKind::kSync:
        e = std::make_unique<SyncIoEngine>(cfg);
        break;
      case EngineKind::kUring: {
        int err = 0;
        e = UringIoEngine::try_create(cfg, &err);
        REQUIRE(e != nullptr);
        break;
      }
    }
    if (rules.empty()) return e;
    auto f = std::make_unique<FaultInjectingIoEngine>(std::move(e), rules);
    if (injector) *injector = f.get();
    return f;
  };
}

NvmeStoreOptions store_options(const std::string& dir, EngineKind kind,
                               std::vector<FaultRule> rules, FaultInjectingIoEngine** injector) {
  NvmeStoreOptions o;
  o.dir = dir;
  o.queue_depth = 16;
  o.engine_factory = make_factory(kind, std::move(rules), injector);
  return o;
}

}  // namespace offgen::test
