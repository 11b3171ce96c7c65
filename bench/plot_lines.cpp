// plot_lines: a line chart (PNG) from a JSON description, for benchmark drivers written in Python
// (bench/ladder/run_ladder.py) that have no plotting library of their own:
//   {"title": "...", "x_label": "...", "y_label": "...", "log_x": true, "log_y": false,
//    "series": [{"name": "...", "points": [[x, y], ...]}, ...]}
//   build/bench/plot_lines --spec plot.json --out plot.png [--width 900 --height 600]
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <fstream>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/line_plot.h"
#include "runtime/core/error.h"

namespace {

offgen::LinePlot read_spec(const std::string& path) {
  std::ifstream in(path);
  OFFGEN_CHECK(in.good(), kIo, "{}: cannot read the plot description", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    OFFGEN_THROW(kInput, "{}: not JSON: {}", path, e.what());
  }
  try {
    offgen::LinePlot p;
    p.title = j.value("title", "");
    p.x_label = j.value("x_label", "");
    p.y_label = j.value("y_label", "");
    p.log_x = j.value("log_x", false);
    p.log_y = j.value("log_y", false);
    for (const auto& s : j.at("series")) {
      offgen::PlotSeries series{s.value("name", ""), {}};
      for (const auto& pt : s.at("points")) {
        // null (a point that failed) breaks the line like NaN.
        const double nan = std::numeric_limits<double>::quiet_NaN();
        series.points.emplace_back(pt.at(0).is_null() ? nan : pt.at(0).get<double>(),
                                   pt.at(1).is_null() ? nan : pt.at(1).get<double>());
      }
      p.series.push_back(std::move(series));
    }
    return p;
  } catch (const nlohmann::json::exception& e) {
    OFFGEN_THROW(kInput, "{}: not a plot description ({}): see bench/plot_lines.cpp", path,
                 e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Write a line chart (PNG) from a JSON description"};
  std::string spec, out;
  int width = 900, height = 600;
  app.add_option("--spec", spec, "JSON description (title, labels, log_x/log_y, series)")->required();
  app.add_option("--out", out, "PNG to write")->required();
  app.add_option("--width", width, "Pixels")->check(CLI::Range(64, 8192));
  app.add_option("--height", height, "Pixels")->check(CLI::Range(64, 8192));
  CLI11_PARSE(app, argc, argv);
  try {
    offgen::write_line_plot_png(read_spec(spec), out, width, height);
    fmt::print("{} written\n", out);
  } catch (const offgen::Error& e) {
    fmt::print(stderr, "plot_lines: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
