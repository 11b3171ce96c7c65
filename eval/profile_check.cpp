// Profile re-check: one GEMM and one disk read, compared with the profile's curves.
#include "eval/profile_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "offload/aligned_buffer.h"
#include "offload/nvme_store.h"
#include "policies/policy.h"
#include "runtime/core/buffer.h"
#include "runtime/core/error.h"
#include "runtime/core/memory_info.h"

namespace offgen {
namespace {

using Clock = std::chrono::steady_clock;

// Best of three timed runs after one warm-up.
template <typename Fn>
double best_of_three(Fn&& fn) {
  fn();
  double best = 1e300;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

// The measured x of `c` nearest `want` from below (else its first).
double point_at_most(const TimeCurve& c, double want) {
  double x = c.x.front();
  for (double v : c.x)
    if (v <= want) x = v;
  return x;
}

RecheckPoint gemm_point(const DecoderModel& model, const ComputeProfile& c) {
  const ModelConfig& cfg = model.config();
  const int64_t unit = 1;  // an MLP unit: its GEMMs are most of a forward's compute
  const int64_t rows = static_cast<int64_t>(point_at_most(c.mlp, 256));
  // As calibrate streams it: copies cycled through, so weights come from RAM, not the cache.
  const int64_t bytes = model.unit_bytes(unit);
  const int64_t copies = std::clamp<int64_t>((int64_t{64} << 20) / bytes, 1, 64);
  std::vector<Buffer> blobs;
  for (int64_t i = 0; i < copies; ++i) {
    blobs.emplace_back(bytes);
    if (i == 0)
      model.build_unit(unit, blobs[0].data());
    else
      std::memcpy(blobs[i].data(), blobs[0].data(), bytes);
  }
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  std::vector<float> hidden0(rows * cfg.d_model), hidden;
  for (float& x : hidden0) x = u(rng);
  std::vector<int32_t> positions(rows);
  for (int64_t t = 0; t < rows; ++t) positions[t] = static_cast<int32_t>(t);
  const SeqSpan span{0, rows, 0};
  const UnitBatch batch{rows, std::span<const SeqSpan>(&span, 1), positions.data(), {}, nullptr};
  DecoderScratch scratch;
  size_t next = 0;
  const double now = best_of_three([&] {
    hidden = hidden0;
    model.run_unit(unit, blobs[next++ % blobs.size()].data(), hidden.data(), batch, scratch);
  });
  return RecheckPoint{fmt::format("MLP unit at {} rows", rows), c.mlp.at(static_cast<double>(rows)),
                      now};
}

RecheckPoint disk_point(const HardwareProfile& hw, const std::string& dir) {
  const uint64_t size = static_cast<uint64_t>(point_at_most(hw.disk_read, 1 << 20));
  NvmeStoreOptions no;
  no.dir = dir;
  NvmeStore store(no);
  // Four ops' worth, written once, read at walking offsets (no drive cache of the last op).
  const uint64_t span = 4 * size;
  const Extent e = store.allocate(span);
  AlignedHostBuffer buf(size);
  std::memset(buf.data(), 0x5a, size);
  for (uint64_t off = 0; off < span; off += size)
    store.write(Extent{e.offset + off, size}, buf.data(), size);
  uint64_t off = 0;
  const int64_t unwritten = unwritten_page_bytes();
  const double now = best_of_three([&] {
    store.read(Extent{e.offset + off, size}, buf.data(), size);
    off = (off + size) % span;
  });
  return RecheckPoint{fmt::format("disk read {}", format_bytes(static_cast<int64_t>(size))),
                      hw.disk_read.at(static_cast<double>(size)), now, unwritten};
}

}  // namespace

bool RecheckPoint::differs() const {
  return profile_seconds > 0 && std::abs(ratio() - 1) > kRecheckTolerance;
}

std::vector<std::string> ProfileRecheck::warnings() const {
  std::vector<std::string> out;
  for (const RecheckPoint& p : points)
    if (p.differs())
      out.push_back(fmt::format(
          "the profile's {} takes {:.3g} ms; it takes {:.3g} ms now ({:.2f}x, beyond the {:.0f}% "
          "the re-check allows): plans from this profile are off by as much; run `offgen "
          "calibrate` when the machine is quiet{}",
          p.what, p.profile_seconds * 1e3, p.now_seconds * 1e3, p.ratio(),
          kRecheckTolerance * 100,
          p.unwritten_bytes >= kRecheckUnwrittenNote
              ? fmt::format(" ({} of data written just before was still being written to the "
                            "disk: it shares the disk with the job's first reads)",
                            format_bytes(p.unwritten_bytes))
              : std::string()));
  return out;
}

nlohmann::json ProfileRecheck::to_json() const {
  nlohmann::json pts = nlohmann::json::array();
  for (const RecheckPoint& p : points)
    pts.push_back({{"what", p.what},
                   {"profile_seconds", p.profile_seconds},
                   {"now_seconds", p.now_seconds},
                   {"ratio", p.ratio()},
                   {"unwritten_bytes", p.unwritten_bytes},
                   {"differs", p.differs()}});
  return {{"points", pts}, {"notes", notes}, {"tolerance", kRecheckTolerance}};
}

ProfileRecheck recheck_profile(const DecoderModel& model, const ComputeProfile* compute,
                               const HardwareProfile* hw, const std::string& offload_dir) {
  ProfileRecheck r;
  if (compute && !compute->mlp.empty()) r.points.push_back(gemm_point(model, *compute));
  if (!hw || hw->disk_read.empty()) return r;
  std::string dir = offload_dir;
  std::error_code ec;
  if (dir.empty() && !hw->offload_dir.empty() && std::filesystem::is_directory(hw->offload_dir, ec))
    dir = hw->offload_dir;
  if (dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    dir = tmp && *tmp ? tmp : "/tmp";
  }
  try {
    r.points.push_back(disk_point(*hw, dir));
  } catch (const Error& e) {
    r.notes.push_back(fmt::format("disk read not re-checked: {}", e.what()));
  }
  return r;
}

}  // namespace offgen
