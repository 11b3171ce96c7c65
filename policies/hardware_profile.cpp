// Hardware profile JSON and interpolation.
#include "policies/hardware_profile.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "runtime/core/error.h"

namespace offgen {

double TimeCurve::at(double v) const {
  OFFGEN_CHECK(!x.empty() && x.size() == seconds.size(), kInternal, "empty time curve");
  if (x.size() == 1) return seconds[0] * (x[0] > 0 ? v / x[0] : 1.0);
  size_t i = 1;
  while (i + 1 < x.size() && v > x[i]) ++i;
  // Segment [i-1, i]: inside it interpolates, past either end it extrapolates the end segment.
  const double t = (v - x[i - 1]) / (x[i] - x[i - 1]);
  return std::max(0.0, seconds[i - 1] + t * (seconds[i] - seconds[i - 1]));
}

const ComputeProfile* HardwareProfile::find_compute(const std::string& key, int threads) const {
  for (const ComputeProfile& c : compute)
    if (c.model_key == key && c.threads == threads) return &c;
  return nullptr;
}

void HardwareProfile::put_compute(ComputeProfile c) {
  for (ComputeProfile& old : compute)
    if (old.model_key == c.model_key && old.threads == c.threads) {
      old = std::move(c);
      return;
    }
  compute.push_back(std::move(c));
}

const RoutingProfile* HardwareProfile::find_routing(const std::string& model_id) const {
  for (const RoutingProfile& r : routing)
    if (r.model_id == model_id) return &r;
  return nullptr;
}

void HardwareProfile::put_routing(RoutingProfile r) {
  for (RoutingProfile& old : routing)
    if (old.model_id == r.model_id) {
      old = std::move(r);
      return;
    }
  routing.push_back(std::move(r));
}

std::string RoutingProfile::summary(int64_t now_unix) const {
  // The hottest quarter of a layer's experts: their share of its choices, averaged over the
  // layers (every layer's ranked probabilities sum to k), in the sample and held out.
  int64_t rows = 0;
  size_t experts = 0;
  for (size_t l = 0; l < std::min(counts.counts.size(), counts.rows.size()); ++l)
    rows = std::max(rows, counts.rows[l]), experts = std::max(experts, counts.counts[l].size());
  auto hottest_quarter = [&](const RoutingCounts& half) {
    const std::vector<double> p =
        ranked_choice_probability(counts, half, static_cast<int64_t>(experts));
    double top = 0, all = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      all += p[i];
      if (i < (p.size() + 3) / 4) top += p[i];
    }
    return all > 0 ? 100 * top / all : 0.0;
  };
  const std::string held_out =
      first_half.empty()
          ? std::string()
          : fmt::format(" ({:.0f}% of a held-out half's, which plans use)", hottest_quarter(first_half));
  return fmt::format("routing of {} rows ({}) {}: the hottest quarter of a layer's "
                     "experts takes {:.0f}% of its choices{}",
                     rows, sample, provenance_line(provenance, now_unix), hottest_quarter({}),
                     held_out);
}

namespace {

nlohmann::json curve_json(const TimeCurve& c) { return {{"x", c.x}, {"seconds", c.seconds}}; }

struct Reader {
  const std::string& source;
  const nlohmann::json& at(const nlohmann::json& j, const std::string& key,
                           const std::string& where) const {
    OFFGEN_CHECK(j.is_object() && j.contains(key), kInput, "{}: '{}{}' is missing", source, where,
                 key);
    return j.at(key);
  }
  double number(const nlohmann::json& j, const std::string& key, const std::string& where,
                double min = 0) const {
    const auto& v = at(j, key, where);
    OFFGEN_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() >= min,
                 kInput, "{}: '{}{}' must be a number >= {}", source, where, key, min);
    return v.get<double>();
  }
  // A whole number in [min, max] (the cast to int is then defined).
  int integer(const nlohmann::json& j, const std::string& key, const std::string& where, int min,
              int max) const {
    const double v = number(j, key, where, min);
    OFFGEN_CHECK(v <= max && v == std::floor(v), kInput,
                 "{}: '{}{}' must be a whole number in [{}, {}]", source, where, key, min, max);
    return static_cast<int>(v);
  }
  std::string text(const nlohmann::json& j, const std::string& key, const std::string& where) const {
    const auto& v = at(j, key, where);
    OFFGEN_CHECK(v.is_string(), kInput, "{}: '{}{}' must be a string", source, where, key);
    return v.get<std::string>();
  }
  // An array of whole numbers >= 0.
  std::vector<int64_t> counts(const nlohmann::json& j, const std::string& key,
                              const std::string& where) const {
    return counts_of(at(j, key, where), where + key);
  }
  std::vector<int64_t> counts_of(const nlohmann::json& a, const std::string& what) const {
    OFFGEN_CHECK(a.is_array(), kInput, "{}: '{}' must be an array", source, what);
    std::vector<int64_t> out;
    for (size_t i = 0; i < a.size(); ++i) {
      OFFGEN_CHECK(a[i].is_number_integer() && a[i].get<int64_t>() >= 0, kInput,
                   "{}: '{}[{}]' must be a whole number >= 0", source, what, i);
      out.push_back(a[i].get<int64_t>());
    }
    return out;
  }
  TimeCurve curve(const nlohmann::json& j, const std::string& key, const std::string& where) const {
    const auto& c = at(j, key, where);
    const std::string path = where + key + ".";
    TimeCurve out;
    for (const char* part : {"x", "seconds"}) {
      const auto& a = at(c, part, path);
      OFFGEN_CHECK(a.is_array() && !a.empty(), kInput, "{}: '{}{}' must be a non-empty array",
                   source, path, part);
      for (size_t i = 0; i < a.size(); ++i) {
        OFFGEN_CHECK(a[i].is_number() && std::isfinite(a[i].get<double>()) && a[i].get<double>() >= 0,
                     kInput, "{}: '{}{}[{}]' must be a number >= 0", source, path, part, i);
        (part[0] == 'x' ? out.x : out.seconds).push_back(a[i].get<double>());
      }
    }
    OFFGEN_CHECK(out.x.size() == out.seconds.size(), kInput,
                 "{}: '{}x' and '{}seconds' differ in length", source, path, path);
    for (size_t i = 1; i < out.x.size(); ++i)
      OFFGEN_CHECK(out.x[i] > out.x[i - 1], kInput, "{}: '{}x' must be ascending (index {})",
                   source, path, i);
    return out;
  }
};

// A routing entry's (or its first half's) "rows" and "counts" (one array per layer).
void read_routing_counts(const Reader& r, const nlohmann::json& j, const std::string& where,
                         RoutingCounts& out) {
  out.rows = r.counts(j, "rows", where);
  const auto& cs = r.at(j, "counts", where);
  OFFGEN_CHECK(cs.is_array() && cs.size() == out.rows.size(), kInput,
               "{}: '{}counts' must be an array of one array per layer ({})", r.source, where,
               out.rows.size());
  for (size_t l = 0; l < cs.size(); ++l)
    out.counts.push_back(r.counts_of(cs[l], where + "counts[" + std::to_string(l) + "]"));
}

}  // namespace

nlohmann::json HardwareProfile::to_json() const {
  nlohmann::json j = {{"version", version},
                      {"created", created},
                      {"offload_dir", offload_dir},
                      {"direct_io", direct_io},
                      {"disk_read", curve_json(disk_read)},
                      {"disk_write", curve_json(disk_write)},
                      {"ram_copy", curve_json(ram_copy)},
                      {"has_gpu", has_gpu},
                      {"provenance", provenance.to_json()}};
  nlohmann::json cs = nlohmann::json::array();
  for (const ComputeProfile& c : compute)
    cs.push_back({{"model_key", c.model_key},
                  {"threads", c.threads},
                  {"mlp", curve_json(c.mlp)},
                  {"attn_base", curve_json(c.attn_base)},
                  {"output", curve_json(c.output)},
                  {"decode_pair", c.decode_pair},
                  {"decode_pair_evict", c.decode_pair_evict},
                  {"prefill_pair", curve_json(c.prefill_pair)},
                  {"prefill_pair_evict", curve_json(c.prefill_pair_evict)},
                  {"memory_limit", c.memory_limit},
                  {"provenance", c.provenance.to_json()}});
  j["compute"] = cs;
  nlohmann::json rs = nlohmann::json::array();
  for (const RoutingProfile& r : routing) {
    nlohmann::json e = {{"model_id", r.model_id},
                        {"model", r.model},
                        {"sample", r.sample},
                        {"rows", r.counts.rows},
                        {"counts", r.counts.counts},
                        {"provenance", r.provenance.to_json()}};
    if (!r.first_half.rows.empty())
      e["first_half"] = {{"rows", r.first_half.rows}, {"counts", r.first_half.counts}};
    rs.push_back(std::move(e));
  }
  j["routing"] = rs;
  return j;
}

HardwareProfile HardwareProfile::from_json(const nlohmann::json& j, const std::string& source,
                                           std::vector<std::string>* dropped) {
  const Reader r{source};
  HardwareProfile p;
  // Reads entry i of an array with `read`; a malformed one is dropped where the caller asks so.
  const auto entries = [&](const nlohmann::json& a, const auto& read) {
    for (size_t i = 0; i < a.size(); ++i) {
      if (dropped == nullptr) {
        read(i);
        continue;
      }
      try {
        read(i);
      } catch (const Error& e) {
        if (e.category() != ErrorCategory::kInput) throw;
        dropped->push_back(e.what());
      }
    }
  };
  OFFGEN_CHECK(j.is_object(), kInput, "{}: a hardware profile must be a JSON object", source);
  p.version = r.integer(j, "version", "", 0, 1 << 20);
  OFFGEN_CHECK(p.version == kVersion, kInput,
               "{}: profile version {} is not this build's ({}); run `offgen calibrate` again",
               source, p.version, kVersion);
  p.created = r.text(j, "created", "");
  p.offload_dir = r.text(j, "offload_dir", "");
  OFFGEN_CHECK(r.at(j, "direct_io", "").is_boolean() && r.at(j, "has_gpu", "").is_boolean(),
               kInput, "{}: 'direct_io' and 'has_gpu' must be true or false", source);
  p.direct_io = j["direct_io"].get<bool>();
  p.has_gpu = j["has_gpu"].get<bool>();
  p.disk_read = r.curve(j, "disk_read", "");
  p.disk_write = r.curve(j, "disk_write", "");
  p.ram_copy = r.curve(j, "ram_copy", "");
  if (j.contains("provenance")) p.provenance = ProfileProvenance::from_json(j["provenance"], source);
  const auto& cs = r.at(j, "compute", "");
  OFFGEN_CHECK(cs.is_array(), kInput, "{}: 'compute' must be an array", source);
  entries(cs, [&](size_t i) {
    const std::string where = "compute[" + std::to_string(i) + "].";
    ComputeProfile c;
    c.model_key = r.text(cs[i], "model_key", where);
    c.threads = r.integer(cs[i], "threads", where, 1, 1 << 16);
    c.mlp = r.curve(cs[i], "mlp", where);
    c.attn_base = r.curve(cs[i], "attn_base", where);
    c.output = r.curve(cs[i], "output", where);
    c.decode_pair = r.number(cs[i], "decode_pair", where);
    c.decode_pair_evict = r.number(cs[i], "decode_pair_evict", where);
    c.prefill_pair = r.curve(cs[i], "prefill_pair", where);
    c.prefill_pair_evict = r.curve(cs[i], "prefill_pair_evict", where);
    // Absent in profiles measured before limits were recorded: measured without one.
    if (cs[i].contains("memory_limit"))
      c.memory_limit = static_cast<int64_t>(r.number(cs[i], "memory_limit", where));
    // Absent in profiles written before provenance was recorded.
    if (cs[i].contains("provenance"))
      c.provenance = ProfileProvenance::from_json(
          cs[i]["provenance"], fmt::format("{} ({})", source, where.substr(0, where.size() - 1)));
    p.compute.push_back(std::move(c));
  });
  if (!j.contains("routing")) return p;  // written before routing was measured
  const auto& rs = j["routing"];
  OFFGEN_CHECK(rs.is_array(), kInput, "{}: 'routing' must be an array", source);
  entries(rs, [&](size_t i) {
    const std::string where = "routing[" + std::to_string(i) + "].";
    RoutingProfile rp;
    rp.model_id = r.text(rs[i], "model_id", where);
    rp.model = r.text(rs[i], "model", where);
    rp.sample = r.text(rs[i], "sample", where);
    read_routing_counts(r, rs[i], where, rp.counts);
    // Absent in profiles measured before the sample was routed in halves.
    if (rs[i].contains("first_half")) {
      read_routing_counts(r, rs[i]["first_half"], where + "first_half.", rp.first_half);
      OFFGEN_CHECK(rp.first_half.rows.size() == rp.counts.rows.size(), kInput,
                   "{}: '{}first_half' must have as many layers as 'counts' ({})", source, where,
                   rp.counts.rows.size());
    }
    if (rs[i].contains("provenance"))
      rp.provenance = ProfileProvenance::from_json(
          rs[i]["provenance"], fmt::format("{} ({})", source, where.substr(0, where.size() - 1)));
    p.routing.push_back(std::move(rp));
  });
  return p;
}

}  // namespace offgen
