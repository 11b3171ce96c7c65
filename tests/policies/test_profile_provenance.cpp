// Profile provenance: JSON round trips (absent in old profiles; measured expert routing too),
// timestamps, the busy-machine rule on injected loads, and the warnings a plan prints for busy,
// unstable, foreign and old figures.
#include <catch2/catch.hpp>

#include "policies/hardware_profile.h"
#include "runtime/core/error.h"

using namespace offgen;

namespace {

const int64_t kNow = parse_utc_timestamp("2026-12-03T12:00:00Z");

ProfileProvenance quiet() {
  ProfileProvenance p;
  p.measured_at = "2026-12-03T10:00:00Z";
  p.cpu_model = "Example CPU";
  p.kernel = "6.1.0";
  p.cpus = 2;
  p.loadavg = 0.1;
  p.others_cpu = 0.02;
  p.rounds = 3;
  p.spread = 0.05;
  return p;
}

MachineInfo here() { return MachineInfo{"Example CPU", "6.1.0", 2, 0.2}; }

bool any_contains(const std::vector<std::string>& lines, const std::string& what) {
  for (const std::string& l : lines)
    if (l.find(what) != std::string::npos) return true;
  return false;
}

}  // namespace

TEST_CASE("provenance: timestamps round trip; malformed ones are refused", "[provenance]") {
  CHECK(utc_timestamp(kNow) == "2026-12-03T12:00:00Z");
  CHECK(parse_utc_timestamp("2026-12-03T12:00:00Z") - parse_utc_timestamp("2026-12-02T12:00:00Z") ==
        86400);
  for (const char* bad : {"", "2026-12-03", "2026-13-03T12:00:00Z", "2026-12-03T12:00:00Zx"})
    CHECK(parse_utc_timestamp(bad) == -1);
}

TEST_CASE("provenance: busy by other processes' CPU share, else by the load average",
          "[provenance]") {
  ProfileProvenance p = quiet();
  CHECK_FALSE(measured_busy(p));
  p.others_cpu = 0.9;  // two busy loops on two cores
  CHECK(measured_busy(p));
  p.others_cpu = -1;  // no probe: 1-minute load average per CPU
  p.loadavg = 2.0;
  CHECK(measured_busy(p));
  p.loadavg = 0.5;
  CHECK_FALSE(measured_busy(p));
}

TEST_CASE("provenance: a quiet profile of this machine gives no warning", "[provenance]") {
  CHECK(provenance_warnings(quiet(), "figures", here(), kNow).empty());
  CHECK_THAT(provenance_line(quiet(), kNow), Catch::Contains("(2 h ago) on Example CPU (2 CPUs)"));
  CHECK_THAT(provenance_line(quiet(), kNow), Catch::Contains("best of 3 rounds (spread 5%)"));
}

TEST_CASE("provenance: busy, unstable, foreign, old and unknown figures are flagged",
          "[provenance]") {
  ProfileProvenance busy = quiet();
  busy.others_cpu = 0.8;
  busy.loadavg = 3.9;
  CHECK(any_contains(provenance_warnings(busy, "disk figures", here(), kNow),
                     "the disk figures were measured on a busy machine (other processes used 80%"));
  ProfileProvenance unstable = quiet();
  unstable.spread = 0.6;
  unstable.spread_at = "disk read 16 MiB";
  CHECK(any_contains(provenance_warnings(unstable, "f", here(), kNow),
                     "moved by 60% between measurement rounds (disk read 16 MiB)"));
  MachineInfo other = here();
  other.cpu_model = "Another CPU";
  CHECK(any_contains(provenance_warnings(quiet(), "f", other, kNow), "measured on another CPU"));
  other = here();
  other.cpus = 8;
  CHECK(any_contains(provenance_warnings(quiet(), "f", other, kNow), "this machine has 8"));
  other = here();
  other.kernel = "6.12.0";
  CHECK(any_contains(provenance_warnings(quiet(), "f", other, kNow),
                     "under kernel 6.1.0 (now 6.12.0)"));
  CHECK(any_contains(provenance_warnings(quiet(), "f", here(), kNow + 200 * int64_t{86400}),
                     "200 days old"));
  CHECK(any_contains(provenance_warnings(ProfileProvenance{}, "f", here(), kNow),
                     "have no provenance"));
}

TEST_CASE("provenance: JSON round trip in the profile; absent in older profiles", "[provenance]") {
  HardwareProfile hw;
  hw.disk_read = hw.disk_write = hw.ram_copy = TimeCurve{{4096}, {1e-3}};
  hw.provenance = quiet();
  ComputeProfile c;
  c.model_key = "m";
  c.threads = 1;
  c.mlp = c.attn_base = c.output = c.prefill_pair = c.prefill_pair_evict = TimeCurve{{1}, {1e-3}};
  c.provenance = quiet();
  c.provenance.others_cpu = 0.7;
  hw.compute.push_back(c);
  const HardwareProfile back = HardwareProfile::from_json(hw.to_json(), "p.json");
  CHECK(back.provenance.to_json() == hw.provenance.to_json());
  CHECK(measured_busy(back.compute[0].provenance));
  nlohmann::json old = hw.to_json();
  old.erase("provenance");
  old["compute"][0].erase("provenance");
  const HardwareProfile o = HardwareProfile::from_json(old, "old.json");
  CHECK_FALSE(o.provenance.known());
  CHECK_FALSE(o.compute[0].provenance.known());
  nlohmann::json bad = hw.to_json();
  bad["compute"][0]["provenance"]["others_cpu"] = "busy";
  CHECK_THROWS_WITH(
      HardwareProfile::from_json(bad, "p.json"),
      Catch::Contains("p.json (compute[0]): 'provenance.others_cpu' must be a number"));
  bad = hw.to_json();
  bad["provenance"]["measured_at"] = "yesterday";
  CHECK_THROWS_WITH(HardwareProfile::from_json(bad, "p.json"), Catch::Contains("measured_at"));
}

TEST_CASE("profile: measured expert routing round trips by model; absent in older profiles",
          "[provenance][moe]") {
  HardwareProfile hw;
  hw.disk_read = hw.disk_write = hw.ram_copy = TimeCurve{{4096}, {1e-3}};
  RoutingProfile r;
  r.model_id = "gguf:abc";
  r.model = "m.gguf";
  r.sample = "built-in sample";
  r.counts.rows = {3, 3};
  r.counts.counts = {{2, 1, 2, 1}, {0, 6, 0, 0}};
  r.provenance = quiet();
  hw.put_routing(r);
  r.counts.counts[1] = {6, 0, 0, 0};
  hw.put_routing(r);  // the same model: replaced
  CHECK(hw.routing.size() == 1);
  const HardwareProfile back = HardwareProfile::from_json(hw.to_json(), "p.json");
  REQUIRE(back.find_routing("gguf:abc") != nullptr);
  CHECK(back.find_routing("gguf:other") == nullptr);
  CHECK(back.find_routing("gguf:abc")->counts.counts == r.counts.counts);
  CHECK(back.find_routing("gguf:abc")->counts.rows == r.counts.rows);
  CHECK_THAT(back.routing[0].summary(kNow), Catch::Contains("3 rows (built-in sample)"));
  // Layer 0's hottest quarter (one expert) takes 2 of 6 choices, layer 1's all of them.
  CHECK_THAT(back.routing[0].summary(kNow), Catch::Contains("takes 67%"));
  // Measured in halves: kept, and the summary adds the held-out share that plans use.
  CHECK(back.routing[0].first_half.empty());
  r.first_half.rows = {1, 1};
  r.first_half.counts = {{1, 0, 1, 0}, {2, 0, 0, 0}};
  hw.put_routing(r);
  const HardwareProfile halves = HardwareProfile::from_json(hw.to_json(), "p.json");
  CHECK(halves.routing[0].first_half.counts == r.first_half.counts);
  CHECK_THAT(halves.routing[0].summary(kNow), Catch::Contains("of a held-out half's"));
  nlohmann::json short_half = hw.to_json();
  short_half["routing"][0]["first_half"]["rows"] = {1};
  short_half["routing"][0]["first_half"]["counts"] = {{1, 0, 1, 0}};
  CHECK_THROWS_WITH(HardwareProfile::from_json(short_half, "p.json"),
                    Catch::Contains("'routing[0].first_half' must have as many layers"));
  nlohmann::json old = hw.to_json();
  old["routing"][0].erase("first_half");
  CHECK(HardwareProfile::from_json(old, "old.json").routing[0].first_half.empty());
  old.erase("routing");
  CHECK(HardwareProfile::from_json(old, "old.json").routing.empty());
  nlohmann::json bad = hw.to_json();
  bad["routing"][0]["counts"][1][2] = -1;
  CHECK_THROWS_WITH(HardwareProfile::from_json(bad, "p.json"),
                    Catch::Contains("p.json: 'routing[0].counts[1][2]' must be a whole number"));
  bad = hw.to_json();
  bad["routing"][0]["counts"].erase(1);
  CHECK_THROWS_WITH(HardwareProfile::from_json(bad, "p.json"),
                    Catch::Contains("'routing[0].counts' must be an array of one array per layer"));
  // Read leniently (the profile cache), a damaged entry is left out and the others kept.
  RoutingProfile other = r;
  other.model_id = "gguf:other";
  hw.put_routing(other);
  ComputeProfile c;
  c.model_key = "m";
  c.threads = 2;
  c.mlp = c.attn_base = c.output = TimeCurve{{1, 2}, {1, 2}};
  c.prefill_pair = c.prefill_pair_evict = c.mlp;
  hw.put_compute(c);
  c.threads = 4;
  hw.put_compute(c);
  bad = hw.to_json();
  bad["routing"][0]["counts"][1][2] = -1;
  bad["compute"][0]["threads"] = "two";
  std::vector<std::string> dropped;
  const HardwareProfile kept = HardwareProfile::from_json(bad, "p.json", &dropped);
  REQUIRE(dropped.size() == 2);
  CHECK_THAT(dropped[0], Catch::Contains("p.json: 'compute[0].threads'"));
  CHECK_THAT(dropped[1], Catch::Contains("p.json: 'routing[0].counts[1][2]'"));
  REQUIRE(kept.compute.size() == 1);
  CHECK(kept.compute[0].threads == 4);
  REQUIRE(kept.routing.size() == 1);
  CHECK(kept.routing[0].model_id == "gguf:other");
  CHECK(kept.disk_read.x == hw.disk_read.x);
  CHECK_THROWS_WITH(HardwareProfile::from_json(bad, "p.json"),
                    Catch::Contains("'compute[0].threads'"));  // strict without `dropped`
  bad = hw.to_json();
  bad["disk_read"] = 1;  // not an entry: the profile as a whole is unreadable either way
  CHECK_THROWS(HardwareProfile::from_json(bad, "p.json", &dropped));
}
