// Policy: validate() names every invalid field, parse_size units and rejects, and the TOML loader
// (every key round-trips, unknown keys / wrong types / syntax errors name file:line[:col],
// the [kv] table is left to its own loader, values are validated with the file name).
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>

#include "policies/policy.h"
#include "policies/policy_overrides.h"
#include "runtime/core/error.h"
#include "tests/temp_dir.h"

using namespace offgen;
using Catch::Matchers::Contains;

namespace {

// A TOML file in a scratch dir of its own, removed when the object goes away.
class TempToml {
 public:
  explicit TempToml(const std::string& text) : path_(dir_.file("policy.toml")) {
    std::ofstream(path_) << text;
  }
  const std::string& path() const { return path_; }

 private:
  test::TempDir dir_;
  std::string path_;
};

// The kConfig message of `fn`, or "" (and a failed check) when it does not throw one.
std::string config_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kConfig);
    return e.what();
  }
  FAIL_CHECK("expected an offgen::Error");
  return "";
}

std::string invalid(const std::function<void(Policy&)>& edit) {
  Policy p;
  edit(p);
  return config_error([&] { p.validate(); });
}

std::string load_error(const std::string& text) {
  TempToml f(text);
  std::string msg = config_error([&] { load_policy_toml(f.path()); });
  CHECK_THAT(msg, Contains(f.path()));
  return msg;
}

}  // namespace

TEST_CASE("default policy validates", "[policy]") {
  Policy p;
  CHECK_NOTHROW(p.validate());
  CHECK(p.block_size() == 32);
  CHECK_FALSE(p.uses_disk());
  CHECK(p.weight_disk_percent() == 0);
}

TEST_CASE("derived percentages and disk use", "[policy]") {
  Policy p;
  p.weight_gpu_percent = 20, p.weight_cpu_percent = 30;
  p.cache_gpu_percent = 0, p.cache_cpu_percent = 100;
  p.gpu_batch_size = 8, p.num_gpu_batches = 4;
  CHECK_NOTHROW(p.validate());
  CHECK(p.weight_disk_percent() == Approx(50));
  CHECK(p.cache_disk_percent() == Approx(0));
  CHECK(p.act_disk_percent() == Approx(0));
  CHECK(p.uses_disk());
  CHECK(p.block_size() == 32);
}

TEST_CASE("validate names each invalid field", "[policy]") {
  CHECK_THAT(invalid([](Policy& p) { p.gpu_batch_size = 0; }), Contains("gpu_batch_size"));
  CHECK_THAT(invalid([](Policy& p) { p.gpu_batch_size = -3; }), Contains("gpu_batch_size"));
  CHECK_THAT(invalid([](Policy& p) { p.gpu_batch_size = (1 << 20) + 1; }),
             Contains("gpu_batch_size"));
  CHECK_THAT(invalid([](Policy& p) { p.num_gpu_batches = 0; }), Contains("num_gpu_batches"));
  CHECK_THAT(invalid([](Policy& p) { p.io_queue_depth = 0; }), Contains("io_queue_depth"));
  CHECK_THAT(invalid([](Policy& p) { p.io_queue_depth = 4097; }), Contains("io_queue_depth"));
  CHECK_THAT(invalid([](Policy& p) { p.gpu_mem = -1; }), Contains("gpu_mem"));
  CHECK_THAT(invalid([](Policy& p) { p.cpu_mem = -1; }), Contains("cpu_mem"));
  CHECK_THAT(invalid([](Policy& p) { p.disk_mem = -1; }), Contains("disk_mem"));
}

TEST_CASE("validate rejects bad percentages for each kind", "[policy]") {
  struct Kind {
    const char* name;
    double Policy::*gpu;
    double Policy::*cpu;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (Kind k : {Kind{"weight", &Policy::weight_gpu_percent, &Policy::weight_cpu_percent},
                 Kind{"cache", &Policy::cache_gpu_percent, &Policy::cache_cpu_percent},
                 Kind{"activation", &Policy::act_gpu_percent, &Policy::act_cpu_percent}}) {
    INFO(k.name);
    auto set = [&](double g, double c) {
      return invalid([&](Policy& p) { p.*k.gpu = g, p.*k.cpu = c; });
    };
    std::string m = set(60, 50);  // sum > 100
    CHECK_THAT(m, Contains(k.name) && Contains("exceed 100"));
    m = set(-1, 0);
    CHECK_THAT(m, Contains(k.name) && Contains("GPU"));
    m = set(0, -0.5);
    CHECK_THAT(m, Contains(k.name) && Contains("CPU"));
    m = set(nan, 0);
    CHECK_THAT(m, Contains(k.name) && Contains("GPU"));
    m = set(0, nan);
    CHECK_THAT(m, Contains(k.name) && Contains("CPU"));
    m = set(inf, 0);
    CHECK_THAT(m, Contains(k.name) && Contains("GPU"));
    m = set(101, 0);
    CHECK_THAT(m, Contains(k.name) && Contains("GPU"));
    Policy ok;
    ok.*k.gpu = 0, ok.*k.cpu = 0;  // all on disk
    CHECK_NOTHROW(ok.validate());
    ok.*k.gpu = 33.3, ok.*k.cpu = 66.7;  // sums to 100 within rounding
    CHECK_NOTHROW(ok.validate());
  }
}

TEST_CASE("parse_size accepts plain bytes and binary units", "[policy]") {
  const int64_t K = 1024, M = K * K, G = M * K, T = G * K;
  CHECK(parse_size("4096", "x") == 4096);
  CHECK(parse_size("0", "x") == 0);
  CHECK(parse_size("512M", "x") == 512 * M);
  CHECK(parse_size("8G", "x") == 8 * G);
  CHECK(parse_size("8g", "x") == 8 * G);
  CHECK(parse_size("1.5T", "x") == 3 * T / 2);
  CHECK(parse_size("2GiB", "x") == 2 * G);
  CHECK(parse_size("2GB", "x") == 2 * G);
  CHECK(parse_size("2Gi", "x") == 2 * G);
  CHECK(parse_size("10k", "x") == 10 * K);
  CHECK(parse_size("10KiB", "x") == 10 * K);
  CHECK(parse_size("4096B", "x") == 4096);
  CHECK(parse_size("0.5K", "x") == 512);
}

TEST_CASE("parse_size rejects malformed sizes naming the setting", "[policy]") {
  for (const char* bad : {"", "G", "12X", "-1", "1e400", "1e3", "abc", ".", "1.2.3G", "8 G", "8iB",
                          "8GiBB", "99999999999T", "nan", "inf", "+5"}) {
    INFO("'" << bad << "'");
    const std::string m = config_error([&] { parse_size(bad, "--gpu-mem"); });
    CHECK_THAT(m, Contains("--gpu-mem"));
  }
}

TEST_CASE("format_bytes", "[policy]") {
  CHECK(format_bytes(0) == "0 B");
  CHECK(format_bytes(1023) == "1023 B");
  CHECK(format_bytes(1536) == "1.5 KiB");
  CHECK(format_bytes(int64_t{8} << 30) == "8.0 GiB");
}

TEST_CASE("a full policy file round-trips every key", "[policy]") {
  TempToml f(R"(# every key the policy loader knows
gpu_batch_size = 48
num_gpu_batches = 3
weights = [20, 30.5]
cache = [10.0, 40]
activations = [60, 40]
overlap = false
sep_layer = false
cpu_cache_compute = true
pin_weight = false
compress_weight = true
compress_cache = true
offload_dir = "/mnt/nvme/offgen"
io_queue_depth = 128
gpu_mem = "8G"
cpu_mem = 17179869184
disk_mem = "1.5T"

[kv]
policy = "h2o"
budget = 0.2
recent_fraction = 0.25
sinks = 8
window = 32
kernel = 7
)");
  const Policy p = load_policy_toml(f.path());
  CHECK(p.gpu_batch_size == 48);
  CHECK(p.num_gpu_batches == 3);
  CHECK(p.weight_gpu_percent == 20);
  CHECK(p.weight_cpu_percent == 30.5);
  CHECK(p.cache_gpu_percent == 10);
  CHECK(p.cache_cpu_percent == 40);
  CHECK(p.act_gpu_percent == 60);
  CHECK(p.act_cpu_percent == 40);
  CHECK_FALSE(p.overlap);
  CHECK_FALSE(p.sep_layer);
  CHECK(p.cpu_cache_compute);
  CHECK_FALSE(p.pin_weight);
  CHECK(p.compress_weight);
  CHECK(p.kv_dtype == DType::kQ4G64);  // compress_cache = true is kv_dtype = "q4g64"
  CHECK(p.offload_dir == "/mnt/nvme/offgen");
  CHECK(p.io_queue_depth == 128);
  CHECK(p.batch_given());
  CHECK(p.kv.name() == "h2o");
  CHECK(p.kv.budget == 0.2);
  CHECK(p.kv.recent_fraction == 0.25);
  CHECK(p.kv.sinks == 8);
  CHECK(p.kv.window == 32);
  CHECK(p.kv.kernel == 7);
  CHECK(p.gpu_mem == int64_t{8} << 30);
  CHECK(p.cpu_mem == int64_t{16} << 30);
  CHECK(p.disk_mem == int64_t{3} << 39);

  // "percent" sets all six at once; keys absent from the file keep the base's values.
  TempToml g("percent = [0, 50, 25, 25, 100, 0]\n");
  Policy base;
  base.gpu_batch_size = 7;
  base.offload_dir = "/base";
  const Policy q = load_policy_toml(g.path(), base);
  CHECK(q.weight_gpu_percent == 0);
  CHECK(q.weight_cpu_percent == 50);
  CHECK(q.cache_gpu_percent == 25);
  CHECK(q.cache_cpu_percent == 25);
  CHECK(q.act_gpu_percent == 100);
  CHECK(q.act_cpu_percent == 0);
  CHECK(q.gpu_batch_size == 7);
  CHECK(q.offload_dir == "/base");

  TempToml empty("");
  CHECK(load_policy_toml(empty.path()).gpu_batch_size == Policy{}.gpu_batch_size);
}

TEST_CASE("unknown keys name file, line and key", "[policy]") {
  std::string m = load_error("gpu_batch_size = 4\n\ngpu_batch = 8\n");
  CHECK_THAT(m, Contains(":3:") && Contains("'gpu_batch'"));
  m = load_error("overlap = true\n[weights_table]\nx = 1\n");
  CHECK_THAT(m, Contains(":2:") && Contains("'weights_table'"));
  m = load_error("[kv]\npolicy = \"h2o\"\neviction = \"lru\"\n");
  CHECK_THAT(m, Contains(":3:") && Contains("'kv.eviction'"));
  CHECK_THAT(load_error("kv = 3\n"), Contains(":1:") && Contains("[kv]"));
}

TEST_CASE("wrong value types name file and line", "[policy]") {
  struct Case {
    const char* text;
    const char* key;
  };
  for (Case c :
       {Case{"\ngpu_batch_size = \"32\"\n", "gpu_batch_size"},
        Case{"\ngpu_batch_size = 1.5\n", "gpu_batch_size"},
        Case{"\nnum_gpu_batches = true\n", "num_gpu_batches"}, Case{"\noverlap = 1\n", "overlap"},
        Case{"\nsep_layer = \"yes\"\n", "sep_layer"},
        Case{"\ncompress_cache = 0\n", "compress_cache"},
        Case{"\noffload_dir = 5\n", "offload_dir"},
        Case{"\nio_queue_depth = \"64\"\n", "io_queue_depth"}, Case{"\ngpu_mem = 1.5\n", "gpu_mem"},
        Case{"\ncpu_mem = \"lots\"\n", "cpu_mem"}, Case{"\ndisk_mem = [1]\n", "disk_mem"},
        Case{"\nweights = [1, 2, 3]\n", "weights"}, Case{"\ncache = 50\n", "cache"},
        Case{"\nactivations = [\"a\", 1]\n", "activations"},
        Case{"\npercent = [1, 2, 3]\n", "percent"},
        Case{"\npercent = [1, 2, 3, 4, 5, \"6\"]\n", "percent"},
        Case{"[kv]\npolicy = 3\n", "kv.policy"}, Case{"[kv]\nbudget = \"half\"\n", "kv.budget"},
        Case{"[kv]\nsinks = 1.5\n", "kv.sinks"}}) {
    INFO(c.text);
    const std::string m = load_error(c.text);
    CHECK_THAT(m, Contains(":2:") && Contains(c.key));
  }
}

TEST_CASE("integers that do not fit their field are rejected", "[policy]") {
  // io_queue_depth is an int: 2^32 + 1 must not wrap around to a valid depth of 1.
  CHECK_THAT(load_error("\nio_queue_depth = 4294967297\n"),
             Contains(":2:") && Contains("io_queue_depth"));
  CHECK_THAT(load_error("gpu_batch_size = 9223372036854775807\n"), Contains("gpu_batch_size"));
}

TEST_CASE("syntax errors name file, line and column", "[policy]") {
  std::string m = load_error("gpu_batch_size = 4\nnum_gpu_batches = = 2\n");
  CHECK_THAT(m, Contains(":2:"));
  const auto pos = m.find(":2:");
  REQUIRE(pos != std::string::npos);
  CHECK(std::isdigit(static_cast<unsigned char>(m[pos + 3])));  // ...:2:COL: description
  // A duplicate key is a TOML error too.
  CHECK_THAT(load_error("overlap = true\noverlap = false\n"), Contains(":2:"));
}

TEST_CASE("a missing file is a config error naming it", "[policy]") {
  const std::string path = "/nonexistent/offgen/policy.toml";
  CHECK_THAT(config_error([&] { load_policy_toml(path); }), Contains(path));
}

TEST_CASE("values are validated after loading, naming the file", "[policy]") {
  CHECK_THAT(load_error("weights = [70, 40]\n"), Contains("weight") && Contains("exceed 100"));
  CHECK_THAT(load_error("percent = [100, 0, 100, 0, -5, 0]\n"), Contains("activation"));
  CHECK_THAT(load_error("cache = [nan, 0]\n"), Contains("cache"));
  CHECK_THAT(load_error("gpu_batch_size = 0\n"), Contains("gpu_batch_size"));
  CHECK_THAT(load_error("num_gpu_batches = -2\n"), Contains("num_gpu_batches"));
  CHECK_THAT(load_error("io_queue_depth = 0\n"), Contains("io_queue_depth"));
  CHECK_THAT(load_error("cpu_mem = -1\n"), Contains("cpu_mem"));
  CHECK_THAT(load_error("gpu_mem = \"12X\"\n"), Contains("gpu_mem") && Contains("12X"));
  CHECK_THAT(load_error("[kv]\npolicy = \"lru\"\n"), Contains("lru") && Contains("h2o"));
  CHECK_THAT(load_error("[kv]\nbudget = 0\n"), Contains("kv-budget"));
  CHECK_THAT(load_error("[kv]\nbudget = 2.5\n"), Contains("whole number"));
  // An invalid base is caught even when the file does not touch the field.
  Policy base;
  base.io_queue_depth = 0;
  TempToml ok("overlap = true\n");
  CHECK_THAT(config_error([&] { load_policy_toml(ok.path(), base); }),
             Contains(ok.path()) && Contains("io_queue_depth"));
}

TEST_CASE("policy TOML: a huge float where an integer belongs is a clean error", "[policy]") {
  // Found by fuzz_policy: the integer conversion must not be attempted on a float.
  CHECK_THROWS_WITH(offgen::parse_policy_toml("gpu_batch_size = 2.77e78\n", "<text>"),
                    Catch::Contains("<text>:1") && Catch::Contains("gpu_batch_size"));
}

TEST_CASE("compression flags and the KV dtype round-trip through policy_toml", "[policy]") {
  for (bool w : {true, false})
    for (const char* kv : {"", "f32", "bf16", "f16", "q8_0", "q4g64", "auto"}) {
      INFO(w << " kv_dtype '" << kv << "'");
      Policy p;
      p.compress_weight = w;
      if (*kv) p.set_kv_dtype(kv);
      REQUIRE_NOTHROW(p.validate());
      CHECK(p.kv_dtype_text() == kv);
      const std::string text = policy_toml(p);
      CHECK((text.find("compress_weight = true") != std::string::npos) == w);
      CHECK((text.find("kv_dtype") != std::string::npos) == (*kv != 0));
      const Policy q = parse_policy_toml(text, "<text>");
      CHECK(q.compress_weight == w);
      CHECK(q.kv_dtype == p.kv_dtype);
      CHECK(q.kv_dtype_auto == p.kv_dtype_auto);
    }
}

TEST_CASE("--kv-dtype: flags, TOML and the --compress-cache alias", "[policy][kv_dtype]") {
  PolicyOverrides o;
  CHECK_FALSE(o.resolve().kv_dtype);  // not given: the backend's default
  CHECK(o.resolve().kv_storage(backend_caps(BackendKind::kCpu)) == DType::kBF16);
  CHECK(o.resolve().kv_storage(backend_caps(BackendKind::kCuda)) == DType::kF16);
  o.kv_dtype = "q8_0";
  CHECK(o.resolve().kv_dtype == DType::kQ8_0);
  o.kv_dtype = "auto";
  CHECK(o.resolve().kv_dtype_auto);
  o.kv_dtype = "fp8";
  CHECK_THROWS_WITH(o.resolve(), Catch::Contains("--kv-dtype fp8: expected auto, f32, bf16"));
  o.kv_dtype = "";
  o.compress_cache = true;
  CHECK(o.resolve().kv_dtype == DType::kQ4G64);
  o.kv_dtype = "q4g64";
  CHECK(o.resolve().kv_dtype == DType::kQ4G64);
  o.kv_dtype = "bf16";
  CHECK_THROWS_WITH(o.resolve(),
                    Catch::Contains("--compress-cache is --kv-dtype q4g64; it contradicts "
                                    "--kv-dtype bf16"));
  CHECK(parse_policy_toml("kv_dtype = \"f16\"\n", "<t>").kv_dtype == DType::kF16);
  CHECK(parse_policy_toml("compress_cache = true\n", "<t>").kv_dtype == DType::kQ4G64);
  CHECK_THROWS_WITH(parse_policy_toml("compress_cache = true\nkv_dtype = \"q8_0\"\n", "<t>"),
                    Catch::Contains("compress_cache = true is kv_dtype = \"q4g64\""));
  CHECK_THROWS_WITH(parse_policy_toml("kv_dtype = \"int4\"\n", "<t>"),
                    Catch::Contains("<t>: --kv-dtype int4: expected auto"));
  CHECK_THROWS_WITH(parse_policy_toml("kv_dtype = 8\n", "<t>"),
                    Catch::Contains("'kv_dtype' must be a string"));
}

TEST_CASE("any UTF-8 offload_dir round-trips through policy_toml", "[policy]") {
  // The planner prints the policy as TOML (offgen plan, bench --json); the directory is free text.
  const std::string dirs[] = {
      "/tmp/a \"q\"",                // quotes
      "C:\\offload\\dir\\",          // backslashes, one at the end
      "/mnt/nvme\nkv = 1\n[kv]",     // newlines that would start new keys
      "a\tb\rc\bd\fe",               // the short escapes
      "x\x01y\x1fz\x7f",             // other control characters (\uXXXX)
      std::string("nul\0byte", 8),   // NUL
      "/données/キャッシュ/😀",       // non-ASCII (written as it is)
      "'single' and \"\"\" triple",  // quote runs
      "#not a comment = \"x\"",
  };
  for (const std::string& dir : dirs) {
    INFO("offload_dir: " << dir);
    Policy p;
    p.offload_dir = dir;
    const std::string text = policy_toml(p);
    const Policy q = parse_policy_toml(text, "<plan>");
    CHECK(q.offload_dir == dir);
    CHECK(policy_toml(q) == text);  // nothing leaked into other keys
  }
}

TEST_CASE("policy_toml refuses an offload_dir TOML cannot hold", "[policy]") {
  // TOML strings are UTF-8; a directory name with other bytes would not read back as itself.
  Policy p;
  p.offload_dir = "/tmp/bad\xff";
  CHECK_THAT(config_error([&] { policy_toml(p); }),
             Contains("offload_dir") && Contains("UTF-8") && Contains("0xff"));
  p.offload_dir = "/tmp/\xed\xa0\x80";  // an encoded surrogate
  CHECK_THAT(config_error([&] { policy_toml(p); }), Contains("offload_dir"));
}
