// The `eval --plot` line-chart writer: 1/2/5 tick steps, PNG signature and IHDR size, a
// non-blank image with several series colours and text, edge cases (log y, NaN/inf, single
// points, long names, many series) and the kIo / kInput errors.
#include <cairo.h>
#ifdef OFFGEN_HAVE_FONTCONFIG
#include <fontconfig/fontconfig.h>
#endif

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cli/line_plot.h"
#include "runtime/core/error.h"
#include "tests/temp_dir.h"

using namespace offgen;
namespace fs = std::filesystem;

namespace {

// At exit (before LeakSanitizer looks), drop cairo's font caches and fontconfig's configuration:
// both are process-wide and would otherwise be reported as leaks.
struct ReleaseFontCaches {
  ~ReleaseFontCaches() {
    cairo_debug_reset_static_data();
#ifdef OFFGEN_HAVE_FONTCONFIG
    FcFini();
#endif
  }
} release_font_caches;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

using offgen::test::TempDir;

std::vector<unsigned char> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

uint32_t be32(const std::vector<unsigned char>& b, size_t at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) | (uint32_t{b[at + 2]} << 8) |
         uint32_t{b[at + 3]};
}

// Pixel census of a PNG read back through cairo.
struct Census {
  int width = 0, height = 0;
  int64_t white = 0, dark = 0;  // background, text cores (darker than the frame)
  int hue_buckets = 0;          // 30° hue buckets with >= 40 saturated pixels
};

Census census(const std::string& path) {
  cairo_surface_t* s = cairo_image_surface_create_from_png(path.c_str());
  REQUIRE(cairo_surface_status(s) == CAIRO_STATUS_SUCCESS);
  Census c;
  c.width = cairo_image_surface_get_width(s);
  c.height = cairo_image_surface_get_height(s);
  const int stride = cairo_image_surface_get_stride(s);
  const unsigned char* data = cairo_image_surface_get_data(s);
  std::vector<int64_t> buckets(12, 0);
  for (int y = 0; y < c.height; ++y)
    for (int x = 0; x < c.width; ++x) {
      uint32_t px;
      std::memcpy(&px, data + y * stride + x * 4, 4);
      const double r = ((px >> 16) & 0xff) / 255.0, g = ((px >> 8) & 0xff) / 255.0,
                   b = (px & 0xff) / 255.0;
      const double mx = std::max({r, g, b}), mn = std::min({r, g, b}), ch = mx - mn;
      if (mn > 0.99) ++c.white;
      if (mx < 0.16) ++c.dark;
      if (ch < 0.35) continue;
      double h = mx == r   ? std::fmod((g - b) / ch + 6, 6.0)
                 : mx == g ? (b - r) / ch + 2
                           : (r - g) / ch + 4;
      ++buckets[static_cast<int>(h * 2) % 12];
    }
  for (int64_t n : buckets) c.hue_buckets += n >= 40;
  cairo_surface_destroy(s);
  return c;
}

LinePlot ppl_plot() {
  LinePlot p;
  p.title = "Perplexity vs KV budget (SmolLM2-135M, wikitext sample)";
  p.x_label = "KV budget (fraction kept)";
  p.y_label = "perplexity";
  const std::vector<double> budgets = {0.1, 0.2, 0.3, 0.5, 0.75, 1.0};
  const std::vector<std::pair<std::string, double>> policies = {
      {"full", 0.0}, {"window", 9.0}, {"h2o", 3.0}, {"tova", 2.5}, {"kvzip", 1.0}};
  for (const auto& [name, penalty] : policies) {
    PlotSeries s{name, {}};
    for (double b : budgets) s.points.emplace_back(b, 14.2 + penalty * (1 - b) * (1 - b) * 3);
    p.series.push_back(s);
  }
  return p;
}

}  // namespace

TEST_CASE("line plot: tick steps are 1/2/5 x 10^k and cover the range", "[plot]") {
  using plot_detail::linear_ticks;
  using plot_detail::nice_step;
  CHECK(nice_step(0, 1, 6) == Approx(0.2));
  CHECK(nice_step(0, 10, 11) == Approx(1));
  CHECK(nice_step(3, 97, 10) == Approx(20));
  CHECK(nice_step(0.1, 1.0, 8) == Approx(0.2));
  CHECK(nice_step(-3e6, 7e6, 6) == Approx(5e6));  // 2e6 needs 7 ticks (-4e6..8e6)
  CHECK(nice_step(-3e6, 7e6, 7) == Approx(2e6));
  auto t = linear_ticks(0.1, 1.0, 8);
  REQUIRE(t.size() == 6);
  CHECK(t.front() == Approx(0.0).margin(1e-12));
  CHECK(t.back() == Approx(1.0));
  t = linear_ticks(5, 5, 6);  // an empty range is widened around its value
  CHECK(t.front() < 5);
  CHECK(t.back() > 5);
  t = linear_ticks(0, 0, 6);
  CHECK(t.front() < 0);
  CHECK(t.back() > 0);
  CHECK_THROWS_AS(linear_ticks(kNaN, 1, 6), Error);
  CHECK_THROWS_AS(linear_ticks(2, 1, 6), Error);

  std::mt19937 rng(7);
  std::uniform_real_distribution<double> exp_d(-8, 8), u(-1, 1);
  for (int i = 0; i < 2000; ++i) {
    const double scale = std::pow(10.0, exp_d(rng));
    double lo = u(rng) * scale, hi = u(rng) * scale;
    if (lo > hi) std::swap(lo, hi);
    const int max_ticks = 3 + i % 10;
    const double step = nice_step(lo, hi, max_ticks);
    const double mant = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
    CHECK((std::fabs(mant - 1) < 1e-9 || std::fabs(mant - 2) < 1e-9 || std::fabs(mant - 5) < 1e-9));
    const auto ticks = linear_ticks(lo, hi, max_ticks);
    CHECK(static_cast<int>(ticks.size()) <= max_ticks);
    CHECK(ticks.size() >= 2);
    CHECK(ticks.front() <= lo + 1e-9 * step);
    CHECK(ticks.back() >= hi - 1e-9 * step);
    for (size_t k = 1; k < ticks.size(); ++k) CHECK(ticks[k] - ticks[k - 1] == Approx(step));
  }
}

TEST_CASE("line plot: writes a non-blank PNG of the requested size", "[plot]") {
  TempDir dir;
  for (auto [w, h] : {std::pair{900, 600}, {640, 400}, {1280, 720}}) {
    const std::string path = dir.file("ppl_" + std::to_string(w) + ".png");
    write_line_plot_png(ppl_plot(), path, w, h);
    const auto bytes = read_bytes(path);
    REQUIRE(bytes.size() > 33);
    const unsigned char sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    CHECK(std::equal(sig, sig + 8, bytes.begin()));
    CHECK(std::string(bytes.begin() + 12, bytes.begin() + 16) == "IHDR");
    CHECK(be32(bytes, 16) == static_cast<uint32_t>(w));
    CHECK(be32(bytes, 20) == static_cast<uint32_t>(h));
    const Census c = census(path);
    CHECK(c.width == w);
    CHECK(c.height == h);
    CHECK(c.white > int64_t{w} * h / 2);  // mostly background
    CHECK(c.dark > 500);                  // text was rendered (title, labels, legend)
    CHECK(c.hue_buckets >= 4);            // several series colours
  }
}

TEST_CASE("line plot: edge cases render", "[plot]") {
  TempDir dir;
  const std::string path = dir.file("edge.png");

  SECTION("log y over many decades, with y <= 0 and NaN/inf skipped") {
    LinePlot p{"log", "step", "loss", {}, true};
    PlotSeries s{"a", {}};
    for (int i = 0; i <= 20; ++i) s.points.emplace_back(i, std::pow(10.0, -3 + 0.4 * i));
    s.points.emplace_back(21, 0.0);
    s.points.emplace_back(22, -5.0);
    s.points.emplace_back(23, kNaN);
    s.points.emplace_back(kInf, 1.0);
    p.series.push_back(s);
    p.series.push_back({"b", {{0, 2e-3}, {10, 3e2}}});
    write_line_plot_png(p, path);
    CHECK(census(path).dark > 200);
  }
  SECTION("log y within one decade and over a huge range") {
    LinePlot p{"log", "x", "y", {{"narrow", {{1, 15}, {2, 22}, {3, 40}}}}, true};
    write_line_plot_png(p, path);
    p.series = {{"huge", {{0, 1e-300}, {1, 1e300}}}};
    write_line_plot_png(p, path);
    p.series = {{"one", {{1, 100}}}};
    write_line_plot_png(p, path);
  }
  SECTION("log x (prompts per job), both axes log, x <= 0 skipped") {
    LinePlot p{"tok/s against prompts", "prompts", "tok/s", {}, false};
    p.log_x = true;
    for (int k = 0; k < 3; ++k) {
      PlotSeries s{fmt::format("size {}", k), {}};
      for (double n : {16.0, 64.0, 256.0, 1024.0}) s.points.emplace_back(n, (k + 1) * std::log2(n));
      s.points.emplace_back(0.0, 5.0);
      s.points.emplace_back(-3.0, 5.0);
      p.series.push_back(s);
    }
    write_line_plot_png(p, path);
    const Census c = census(path);
    CHECK(c.dark > 200);
    CHECK(c.hue_buckets >= 3);
    p.log_y = true;
    write_line_plot_png(p, path);
    p.series = {{"one", {{100, 1}}}};
    write_line_plot_png(p, path);
    p.series = {{"none", {{0, 1}, {-1, 2}}}};
    CHECK_THROWS_WITH(write_line_plot_png(p, path), Catch::Contains("values <= 0 on a log axis"));
  }
  SECTION("single points, flat lines, gaps, large and tiny values") {
    LinePlot p{"t", "x", "y", {}, false};
    p.series.push_back({"single", {{0.5, 12.25}}});
    write_line_plot_png(p, path);
    p.series.push_back({"flat", {{0, 3}, {1, 3}, {kNaN, 3}, {2, 3}}});
    p.series.push_back({"big", {{1e7, -2e9}, {3e7, 5e9}}});
    write_line_plot_png(p, path);
    p.series = {{"tiny", {{0, 1e-7}, {1, 3e-7}}}, {"", {{0, 1e300}}}};
    write_line_plot_png(p, path);
  }
  SECTION("long names, odd bytes and many series") {
    LinePlot p{std::string(300, 'T'), std::string(200, 'x'), std::string(200, 'y'), {}, false};
    for (int i = 0; i < 40; ++i) {
      PlotSeries s{i == 0   ? std::string(500, 'n')
                   : i == 1 ? "bad \xff\xfe utf8 \ttab\n"
                            : fmt::format("s{}", i),
                   {}};
      for (int k = 0; k < 5; ++k) s.points.emplace_back(k, i + std::sin(k + i));
      p.series.push_back(s);
    }
    write_line_plot_png(p, path);
    const Census c = census(path);
    CHECK(c.hue_buckets >= 6);
    write_line_plot_png(p, path, 64, 64);  // the smallest size still draws
  }
}

TEST_CASE("line plot: errors", "[plot]") {
  TempDir dir;
  const LinePlot good = ppl_plot();
  const std::string missing = dir.file("no_such_dir/out.png");
  try {
    write_line_plot_png(good, missing);
    FAIL("expected kIo");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kIo);
    CHECK_THAT(e.what(), Catch::Contains(missing));
  }
  try {
    write_line_plot_png(good, dir.file(""));  // a directory
    FAIL("expected kIo");
  } catch (const Error& e) {
    CHECK(e.category() == ErrorCategory::kIo);
  }

  auto category_of = [&](const LinePlot& p, int w = 900, int h = 600) {
    try {
      write_line_plot_png(p, dir.file("x.png"), w, h);
    } catch (const Error& e) {
      return e.category();
    }
    return ErrorCategory::kInternal;  // no throw
  };
  LinePlot nan{"t", "x", "y", {{"a", {{kNaN, 1}, {1, kNaN}, {kInf, kInf}}}, {"b", {}}}, false};
  CHECK(category_of(nan) == ErrorCategory::kInput);
  CHECK(category_of(LinePlot{}) == ErrorCategory::kInput);
  CHECK(category_of(LinePlot{"t", "x", "y", {{"a", {}}}, false}) == ErrorCategory::kInput);
  CHECK(category_of(LinePlot{"t", "x", "y", {{"a", {{1, 0}, {2, -1}}}}, true}) ==
        ErrorCategory::kInput);
  CHECK(category_of(good, 10, 600) == ErrorCategory::kInput);
  CHECK(category_of(good, 900, 100000) == ErrorCategory::kInput);
  CHECK(!fs::exists(dir.file("x.png")));
}
