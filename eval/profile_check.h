// A quick re-check of a cached hardware profile against this machine now — one short GEMM (the
// model's MLP unit at a row count the profile measured) and one disk read (at an op size it
// measured), each the best of three — that flags figures differing from now by more than 25%.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "policies/hardware_profile.h"
#include "runtime/model/decoder.h"

namespace offgen {

inline constexpr double kRecheckTolerance = 0.25;

// Written data awaiting write-back from which a re-checked disk read that differs says why.
inline constexpr int64_t kRecheckUnwrittenNote = int64_t{256} << 20;

struct RecheckPoint {
  std::string what;  // "MLP unit at 64 rows", "disk read 1 MiB"
  double profile_seconds = 0, now_seconds = 0;
  // Disk points: written data the kernel had yet to put on disk as the point was measured.
  int64_t unwritten_bytes = 0;
  double ratio() const { return profile_seconds > 0 ? now_seconds / profile_seconds : 0; }
  // |now / profile - 1| > kRecheckTolerance.
  bool differs() const;
};

struct ProfileRecheck {
  std::vector<RecheckPoint> points;
  std::vector<std::string> notes;  // what could not be re-checked, and why
  // One sentence per point that differs (empty: the profile matches this machine now).
  std::vector<std::string> warnings() const;
  nlohmann::json to_json() const;
};

// Times the two operations now: the GEMM against `compute` and the disk read against `hw` (null:
// not re-checked). The disk read uses `offload_dir` (empty: the profile's, else $TMPDIR or /tmp);
// a directory that cannot be used leaves a note instead of a point. Not thread-safe with other
// work on the model's backend.
ProfileRecheck recheck_profile(const DecoderModel& model, const ComputeProfile* compute,
                               const HardwareProfile* hw, const std::string& offload_dir);

}  // namespace offgen
