// Policy validation and TOML loading.
#include "policies/policy.h"

#include <toml++/toml.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/core/kv_format.h"
#include "runtime/text/utf8.h"

namespace offgen {
namespace {

void check_pair(double gpu, double cpu, const char* what) {
  OFFGEN_CHECK(std::isfinite(gpu) && gpu >= 0 && gpu <= 100, kConfig,
               "policy: {} GPU percent {} must be in [0, 100]", what, gpu);
  OFFGEN_CHECK(std::isfinite(cpu) && cpu >= 0 && cpu <= 100, kConfig,
               "policy: {} CPU percent {} must be in [0, 100]", what, cpu);
  OFFGEN_CHECK(gpu + cpu <= 100 + 1e-9, kConfig,
               "policy: {} percentages GPU {} + CPU {} = {} exceed 100 (disk gets 100 - GPU - CPU)",
               what, gpu, cpu, gpu + cpu);
}

}  // namespace

void Policy::validate() const {
  OFFGEN_CHECK(gpu_batch_size >= 1 && gpu_batch_size <= (1 << 20), kConfig,
               "policy: gpu_batch_size {} must be in [1, 1048576]", gpu_batch_size);
  OFFGEN_CHECK(num_gpu_batches >= 1 && num_gpu_batches <= (1 << 20), kConfig,
               "policy: num_gpu_batches {} must be in [1, 1048576]", num_gpu_batches);
  check_pair(weight_gpu_percent, weight_cpu_percent, "weight");
  check_pair(cache_gpu_percent, cache_cpu_percent, "cache");
  check_pair(act_gpu_percent, act_cpu_percent, "activation");
  OFFGEN_CHECK(io_queue_depth >= 1 && io_queue_depth <= 4096, kConfig,
               "policy: io_queue_depth {} must be in [1, 4096]", io_queue_depth);
  OFFGEN_CHECK(gpu_mem >= 0, kConfig, "policy: gpu_mem {} must be >= 0 (0 = unlimited)", gpu_mem);
  OFFGEN_CHECK(cpu_mem >= 0, kConfig, "policy: cpu_mem {} must be >= 0 (0 = unlimited)", cpu_mem);
  OFFGEN_CHECK(disk_mem >= 0, kConfig, "policy: disk_mem {} must be >= 0 (0 = unlimited)",
               disk_mem);
  OFFGEN_CHECK(!kv_dtype || is_kv_dtype(*kv_dtype), kConfig,
               "policy: kv_dtype {} is not a KV dtype ({})", dtype_name(*kv_dtype),
               kv_dtype_names());
  OFFGEN_CHECK(!(kv_dtype && kv_dtype_auto), kConfig,
               "policy: kv_dtype is both {} and auto", dtype_name(*kv_dtype));
  kv.validate();
}

void Policy::set_kv_dtype(std::string_view text) {
  if (text == "auto") {
    kv_dtype.reset();
    kv_dtype_auto = true;
    return;
  }
  try {
    kv_dtype = parse_kv_dtype(text);
  } catch (const Error&) {
    OFFGEN_THROW(kConfig, "--kv-dtype {}: expected auto, f32, bf16, f16, q8_0 or q4g64", text);
  }
  kv_dtype_auto = false;
}

std::string Policy::kv_dtype_text() const {
  if (kv_dtype_auto) return "auto";
  return kv_dtype ? std::string(dtype_name(*kv_dtype)) : std::string();
}

WeightMode Policy::weight_storage(WeightMode weight_dtype) const {
  if (!compress_weight) return weight_dtype;
  OFFGEN_CHECK(weight_dtype.native || weight_dtype.storage == DType::kF32 ||
                   weight_dtype.storage == DType::kF16,
               kConfig,
               "--compress-weight stores 4-bit groups, dequantised for an fp32 (CPU) or fp16 (GPU) "
               "matmul: it does not combine with --weight-dtype {}", weight_dtype.name());
  return DType::kQ4G64;
}

Placement Policy::placement(bool device_is_host) const {
  return Placement(TierShare{weight_gpu_percent, weight_cpu_percent},
                   TierShare{cache_gpu_percent, cache_cpu_percent},
                   TierShare{act_gpu_percent, act_cpu_percent}, device_is_host);
}

std::string Policy::overflow(const TierBytes& need, bool device_is_host) const {
  if (device_is_host) {
    if (ram_mem() > 0 && need.device + need.host > ram_mem())
      return cpu_mem > 0 ? "--cpu-mem" : "--gpu-mem";
  } else {
    if (gpu_mem > 0 && need.device > gpu_mem) return "--gpu-mem";
    if (cpu_mem > 0 && need.host > cpu_mem) return "--cpu-mem";
  }
  if (disk_mem > 0 && need.disk > disk_mem) return "--disk-mem";
  return "";
}

void Policy::check_fits(const TierBytes& need, bool device_is_host,
                        const std::string& what) const {
  const std::string flag = overflow(need, device_is_host);
  if (flag.empty()) return;
  const char* move = "raise it or move more to another tier (--percent)";
  if (flag == "--disk-mem")
    OFFGEN_THROW(kConfig, "{} need {} on the disk tier but --disk-mem is {}: {}", what,
                 format_bytes(need.disk), format_bytes(disk_mem), move);
  if (device_is_host)
    OFFGEN_THROW(kConfig,
                 "{} need {} of RAM but {} is {} (on this backend the GPU and CPU tiers are both "
                 "RAM: --gpu-mem + --cpu-mem bound them together): {}",
                 what, format_bytes(need.device + need.host),
                 gpu_mem > 0 && cpu_mem > 0 ? "--gpu-mem + --cpu-mem" : flag.c_str(),
                 format_bytes(ram_mem()), move);
  const bool gpu = flag == "--gpu-mem";
  OFFGEN_THROW(kConfig, "{} need {} on the {} tier but {} is {}: {}", what,
               format_bytes(gpu ? need.device : need.host), gpu ? "device (GPU)" : "host (CPU)",
               flag, format_bytes(gpu ? gpu_mem : cpu_mem), move);
}

int64_t parse_size(const std::string& text, const std::string& what) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  OFFGEN_CHECK(i > 0, kConfig, "{}: '{}' is not a size (examples: 4096, 512M, 8G)", what, text);
  double v = 0;
  size_t used = 0;
  try {
    v = std::stod(text.substr(0, i), &used);
  } catch (const std::exception&) {
    used = 0;
  }
  // stod stops at a second '.', so "1.2.3G" would otherwise read as 1.2G.
  OFFGEN_CHECK(used == i, kConfig, "{}: '{}' is not a size (examples: 4096, 512M, 8G)", what, text);
  std::string unit = text.substr(i);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  if (unit.size() == 2 && (unit[1] == 'i' || unit[1] == 'I')) unit.pop_back();
  double mult = 1;
  if (unit.empty()) mult = 1;
  else if (unit == "K" || unit == "k") mult = 1024.0;
  else if (unit == "M" || unit == "m") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "g") mult = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "t") mult = 1024.0 * 1024 * 1024 * 1024;
  else OFFGEN_THROW(kConfig, "{}: unknown unit in '{}' (use K, M, G or T)", what, text);
  const double bytes = v * mult;
  OFFGEN_CHECK(std::isfinite(bytes) && bytes >= 0 && bytes < 9.2e18, kConfig, "{}: '{}' is out of range",
               what, text);
  return static_cast<int64_t>(bytes);
}

std::string format_bytes(int64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", b) : fmt::format("{:.1f} {}", v, units[u]);
}

Policy load_policy_toml(const std::string& path, const Policy& base) {
  std::error_code ec;
  OFFGEN_CHECK(!std::filesystem::is_directory(path, ec), kConfig,
               "{}: is a directory, not a policy file (TOML)", path);
  std::ifstream in(path, std::ios::binary);
  OFFGEN_CHECK(in.good(), kConfig, "{}: cannot read the policy file: {}", path,
               std::strerror(errno));
  std::string text;
  try {
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::exception& e) {
    OFFGEN_THROW(kConfig, "{}: cannot read the policy file: {}", path, e.what());
  }
  OFFGEN_CHECK(!in.bad(), kConfig, "{}: cannot read the policy file", path);
  return parse_policy_toml(text, path, base);
}

Policy parse_policy_toml(std::string_view text, const std::string& path, const Policy& base) {
  toml::table t;
  try {
    t = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    OFFGEN_THROW(kConfig, "{}:{}:{}: {}", path, e.source().begin.line, e.source().begin.column,
                 std::string(e.description()));
  }
  Policy p = base;
  auto where = [&](const toml::node& n, const std::string& key) {
    return fmt::format("{}:{}: '{}'", path, n.source().begin.line, key);
  };
  auto get_int = [&](const toml::node& n, const std::string& key) -> int64_t {
    // Check the type first: toml++ converts floats to integers with undefined overflow.
    OFFGEN_CHECK(n.is_integer(), kConfig, "{} must be an integer", where(n, key));
    return *n.value<int64_t>();
  };
  auto get_num = [&](const toml::node& n, const std::string& key) -> double {
    OFFGEN_CHECK(n.is_number(), kConfig, "{} must be a number", where(n, key));
    return *n.value<double>();
  };
  auto get_bool = [&](const toml::node& n, const std::string& key) -> bool {
    OFFGEN_CHECK(n.is_boolean(), kConfig, "{} must be true or false", where(n, key));
    return *n.value<bool>();
  };
  auto get_size = [&](const toml::node& n, const std::string& key) -> int64_t {
    if (n.is_integer()) return *n.value<int64_t>();
    OFFGEN_CHECK(n.is_string(), kConfig, "{} must be a size such as \"8G\"", where(n, key));
    return parse_size(*n.value<std::string>(), where(n, key));
  };
  // A registry name: its error is prefixed with the file, as validate()'s are below.
  auto parse_in_file = [&](auto parse, const std::string& text) {
    try {
      return parse(text);
    } catch (const Error& e) {
      OFFGEN_THROW(kConfig, "{}: {}", path, e.what());
    }
  };
  auto get_percent = [&](const toml::node& n, const std::string& key) -> std::array<double, 2> {
    const toml::array* a = n.as_array();
    OFFGEN_CHECK(a && a->size() == 2 && (*a)[0].is_number() && (*a)[1].is_number(), kConfig,
                 "{} must be [gpu_percent, cpu_percent]", where(n, key));
    return {*(*a)[0].value<double>(), *(*a)[1].value<double>()};
  };
  // compress_cache = true is FlexGen's name for kv_dtype = "q4g64" (applied after the keys).
  bool compress_cache = false;
  std::string kv_dtype_line;
  for (auto&& [k, node] : t) {
    const std::string key(k.str());
    if (key == "kv") {
      const toml::table* kv = node.as_table();
      OFFGEN_CHECK(kv != nullptr, kConfig, "{} must be a table ([kv])", where(node, key));
      for (auto&& [kk, kn] : *kv) {
        const std::string k2 = "kv." + std::string(kk.str());
        if (kk == "policy") {
          OFFGEN_CHECK(kn.is_string(), kConfig, "{} must be a string", where(kn, k2));
          p.kv.kind = parse_in_file(parse_kv_policy, *kn.value<std::string>());
        } else if (kk == "budget") p.kv.budget = get_num(kn, k2);
        else if (kk == "recent_fraction") p.kv.recent_fraction = get_num(kn, k2);
        else if (kk == "sinks") p.kv.sinks = get_int(kn, k2);
        else if (kk == "window") p.kv.window = get_int(kn, k2);
        else if (kk == "kernel") p.kv.kernel = get_int(kn, k2);
        else if (kk == "scope") {
          OFFGEN_CHECK(kn.is_string(), kConfig, "{} must be a string", where(kn, k2));
          p.kv.scope = parse_in_file(parse_kv_scope, *kn.value<std::string>());
        } else OFFGEN_THROW(kConfig, "{} is not a [kv] key (policy, budget, scope, "
                            "recent_fraction, sinks, window, kernel)", where(kn, k2));
      }
    } else if (key == "gpu_batch_size") {
      p.gpu_batch_size = get_int(node, key);
      p.gpu_batch_given = true;
    } else if (key == "num_gpu_batches") {
      p.num_gpu_batches = get_int(node, key);
      p.num_batches_given = true;
    }
    else if (key == "weights") {
      auto v = get_percent(node, key);
      p.weight_gpu_percent = v[0], p.weight_cpu_percent = v[1];
    } else if (key == "cache") {
      auto v = get_percent(node, key);
      p.cache_gpu_percent = v[0], p.cache_cpu_percent = v[1];
    } else if (key == "activations") {
      auto v = get_percent(node, key);
      p.act_gpu_percent = v[0], p.act_cpu_percent = v[1];
    } else if (key == "percent") {
      const toml::array* a = node.as_array();
      OFFGEN_CHECK(a && a->size() == 6, kConfig, "{} must list 6 numbers: WG WC CG CC HG HC",
                   where(node, key));
      double v[6];
      for (int i = 0; i < 6; ++i) v[i] = get_num((*a)[i], key);
      p.weight_gpu_percent = v[0], p.weight_cpu_percent = v[1], p.cache_gpu_percent = v[2];
      p.cache_cpu_percent = v[3], p.act_gpu_percent = v[4], p.act_cpu_percent = v[5];
    } else if (key == "overlap") p.overlap = get_bool(node, key);
    else if (key == "sep_layer") p.sep_layer = get_bool(node, key);
    else if (key == "cpu_cache_compute") p.cpu_cache_compute = get_bool(node, key);
    else if (key == "pin_weight") p.pin_weight = get_bool(node, key);
    else if (key == "compress_weight") p.compress_weight = get_bool(node, key);
    else if (key == "compress_cache") compress_cache = get_bool(node, key);
    else if (key == "kv_dtype") {
      OFFGEN_CHECK(node.is_string(), kConfig, "{} must be a string", where(node, key));
      kv_dtype_line = where(node, key);
      parse_in_file([&](const std::string& v) { p.set_kv_dtype(v); return 0; },
                    *node.value<std::string>());
    }
    else if (key == "offload_dir") {
      OFFGEN_CHECK(node.is_string(), kConfig, "{} must be a string", where(node, key));
      p.offload_dir = *node.value<std::string>();
    } else if (key == "io_queue_depth") {
      // Range-check before narrowing to int so that e.g. 2^32 + 1 cannot wrap to a valid depth;
      // validate() checks the policy's own limits below.
      const int64_t v = get_int(node, key);
      OFFGEN_CHECK(v >= std::numeric_limits<int>::min() && v <= std::numeric_limits<int>::max(),
                   kConfig, "{} = {} is out of range", where(node, key), v);
      p.io_queue_depth = static_cast<int>(v);
    } else if (key == "gpu_mem") p.gpu_mem = get_size(node, key);
    else if (key == "cpu_mem") p.cpu_mem = get_size(node, key);
    else if (key == "disk_mem") p.disk_mem = get_size(node, key);
    else OFFGEN_THROW(kConfig, "{} is not a policy key", where(node, key));
  }
  if (compress_cache) {
    OFFGEN_CHECK(kv_dtype_line.empty() || p.kv_dtype == DType::kQ4G64, kConfig,
                 "{}: compress_cache = true is kv_dtype = \"q4g64\"; {} says {}", path,
                 kv_dtype_line, p.kv_dtype_text());
    p.kv_dtype = DType::kQ4G64;
    p.kv_dtype_auto = false;
  }
  try {
    p.validate();
  } catch (const Error& e) {
    OFFGEN_THROW(kConfig, "{}: {}", path, e.what());
  }
  return p;
}

namespace {

// `s` as a TOML basic string, written by toml++ (quotes, backslashes and control characters
// escaped, other characters as they are). Throws kConfig naming `key` unless `s` is valid UTF-8:
// a TOML string holds nothing else (toml++ would write an invalid byte as another character).
std::string toml_string(std::string_view key, const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const utf8::Decoded d = utf8::decode(s, i);
    OFFGEN_CHECK(d.valid, kConfig,
                 "policy: {} is not valid UTF-8 (byte {} is 0x{:02x}): a TOML file cannot hold it",
                 key, i, static_cast<unsigned char>(s[i]));
    i += d.len;
  }
  std::ostringstream out;
  out << toml::toml_formatter{toml::value<std::string>(s),
                              toml::format_flags::allow_unicode_strings};
  return out.str();
}

}  // namespace

std::string policy_toml(const Policy& p) {
  std::string out = fmt::format("gpu_batch_size = {}\nnum_gpu_batches = {}\n", p.gpu_batch_size,
                                p.num_gpu_batches);
  out += fmt::format("percent = [{}, {}, {}, {}, {}, {}]  # weights, cache, activations: GPU, CPU\n",
                     p.weight_gpu_percent, p.weight_cpu_percent, p.cache_gpu_percent,
                     p.cache_cpu_percent, p.act_gpu_percent, p.act_cpu_percent);
  out += fmt::format("overlap = {}\n", p.overlap);
  if (p.compress_weight) out += "compress_weight = true\n";
  if (!p.kv_dtype_text().empty()) out += fmt::format("kv_dtype = \"{}\"\n", p.kv_dtype_text());
  if (p.cpu_cache_compute) out += "cpu_cache_compute = true\n";
  if (!p.offload_dir.empty())
    out += fmt::format("offload_dir = {}\n", toml_string("offload_dir", p.offload_dir));
  if (p.io_queue_depth != Policy{}.io_queue_depth)
    out += fmt::format("io_queue_depth = {}\n", p.io_queue_depth);
  auto size = [](int64_t b) {  // the largest unit that divides it exactly
    for (auto [unit, shift] : {std::pair{'T', 40}, {'G', 30}, {'M', 20}, {'K', 10}})
      if (b % (int64_t{1} << shift) == 0) return fmt::format("{}{}", b >> shift, unit);
    return std::to_string(b);
  };
  if (p.gpu_mem > 0) out += fmt::format("gpu_mem = \"{}\"\n", size(p.gpu_mem));
  if (p.cpu_mem > 0) out += fmt::format("cpu_mem = \"{}\"\n", size(p.cpu_mem));
  if (p.disk_mem > 0) out += fmt::format("disk_mem = \"{}\"\n", size(p.disk_mem));
  const KvPolicyConfig& kv = p.kv;
  out += fmt::format("\n[kv]\npolicy = \"{}\"\nbudget = {}\nscope = \"{}\"\n", kv.name(), kv.budget,
                     kv_scope_name(kv.scope));
  const KvPolicyConfig d;
  if (kv.recent_fraction != d.recent_fraction)
    out += fmt::format("recent_fraction = {}\n", kv.recent_fraction);
  if (kv.sinks != d.sinks) out += fmt::format("sinks = {}\n", kv.sinks);
  if (kv.window != d.window) out += fmt::format("window = {}\n", kv.window);
  if (kv.kernel != d.kernel) out += fmt::format("kernel = {}\n", kv.kernel);
  return out;
}

}  // namespace offgen
