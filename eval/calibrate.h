// `offgen calibrate`: measures this machine through the runtime's own paths — blocking NvmeStore
// reads and writes (O_DIRECT, io_uring) and one-thread memcpy at several sizes, and the model's
// attention / MLP / output units at several shapes — into a HardwareProfile (policies/).
#pragma once

#include <functional>
#include <string>

#include "policies/cost_model.h"
#include "policies/hardware_profile.h"
#include "policies/model_facts.h"
#include "runtime/model/decoder.h"

namespace offgen {

struct CalibrateOptions {
  std::string offload_dir;  // disk to measure; empty: $TMPDIR or /tmp
  bool quick = false;       // fewer sizes and repetitions (tests; rougher figures)
  // RAM the measurements may hold at once beside the model (0: no limit): buffers, KV tables,
  // activations, logits. Shapes past it are left out (the curves extrapolate them); the sizes
  // measured always include the smallest ones.
  int64_t memory_limit = 0;
  // Disk bytes the transfer measurements may write into the offload dir (0: no limit).
  int64_t disk_limit = 0;
  // Rounds of every measurement, the best of which is kept per point (0: 3, quick: 2).
  int rounds = 0;
  int round_count() const;
  // Called before each measurement with a short description (progress on stderr).
  std::function<void(const std::string&)> on_step;
};

// Disk read/write and RAM copy curves, the best of o.round_count() rounds per point, with their
// provenance (the machine, its load, the spread between rounds); keeps `base`'s compute entries.
// Throws Error(kIo/kConfig) naming the directory when it cannot be used.
HardwareProfile measure_transfers(const CalibrateOptions& o, HardwareProfile base = {});

// Unit times of `model` on its backend (whose thread count is recorded), the attention over KV
// tables stored as kv_dtype (the profile's key names it: compute_key), measured the same way
// (derived per-pair attention figures: the median of the rounds). Not thread-safe with other work
// on the same backend.
ComputeProfile measure_compute(const DecoderModel& model, const std::string& weight_dtype,
                               DType kv_dtype, const CalibrateOptions& o);

// The machine's load over `seconds` of sleep (provenance with rounds = 0): whether measuring now
// would be measuring on a busy machine.
ProfileProvenance probe_machine(double seconds);
// Throws Error(kResource) when `p` says the machine was busy (measured_busy), naming the load and
// while what ("the disk and RAM figures were measured").
void check_quiet(const ProfileProvenance& p, const std::string& what);

}  // namespace offgen
