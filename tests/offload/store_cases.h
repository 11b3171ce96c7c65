// NVMe store test bodies shared by the sync and io_uring test binaries, so both engines run the
// same checks (the retry/resubmit logic lives in the store, above the engine).
#pragma once

#include "tests/offload/store_test_util.h"

namespace offgen::test {

void check_round_trip_odd_sizes(EngineKind kind);
void check_async_batch(EngineKind kind, uint32_t queue_depth);
void check_short_reads(EngineKind kind);
void check_short_writes(EngineKind kind);
void check_eagain(EngineKind kind);
void check_eio(EngineKind kind);
void check_enospc(EngineKind kind);
void check_eio_in_async_batch(EngineKind kind);
void check_concurrent_threads(EngineKind kind);

}  // namespace offgen::test
