// Helpers for the NVMe store tests: scratch offload dirs with before/after listings, random data,
// and engine factories (sync or io_uring, optionally behind a FaultInjectingIoEngine).
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "offload/fault_injecting_io_engine.h"
#include "offload/io_engine.h"
#include "offload/nvme_store.h"
#include "tests/temp_dir.h"  // TempDir: the store tests' scratch dirs

namespace offgen::test {

// Names of the entries of `dir` (without . and ..).
std::set<std::string> list_dir(const std::string& dir);

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed);

enum class EngineKind { kSync, kUring };
const char* engine_kind_name(EngineKind k);

// Makes the base engine of `kind`; with rules wraps it into a FaultInjectingIoEngine and, when
// `injector` is given, stores a pointer to it there (owned by the store).
IoEngineFactory make_factory(EngineKind kind, std::vector<FaultRule> rules = {},
                             FaultInjectingIoEngine** injector = nullptr);

NvmeStoreOptions store_options(const std::string& dir, EngineKind kind,
                               std::vector<FaultRule> rules = {},
                               FaultInjectingIoEngine** injector = nullptr);

}  // namespace offgen::test
