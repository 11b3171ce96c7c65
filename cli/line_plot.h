// A small line-chart writer (cairo) for `offgen eval ppl --plot out.png`: axes with nice ticks,
// grid, one coloured polyline with markers per series, legend and title, written as a PNG.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace offgen {

struct PlotSeries {
  std::string name;                               // legend entry; empty → "series N"
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in the given order
};

struct LinePlot {
  std::string title, x_label, y_label;
  std::vector<PlotSeries> series;
  bool log_y = false;  // base-10 y axis; points with y <= 0 are skipped like NaN
  bool log_x = false;  // base-10 x axis; points with x <= 0 are skipped like NaN
};

// Renders the chart and writes it as a PNG of width × height pixels to `path` (overwritten).
// Points with a NaN or infinite coordinate are skipped and break the polyline; a series with a
// single drawable point shows just its marker. Throws offgen::Error(kInput) when no series has a
// drawable point or the size is out of range (64..8192 pixels a side), kIo naming the path when
// the file cannot be written. Pure function of its arguments; safe to call from several threads.
void write_line_plot_png(const LinePlot& plot, const std::string& path, int width = 900,
                         int height = 600);

// Axis helpers, exposed for tests.
namespace plot_detail {

// Ticks k·step covering [lo, hi] with step = {1, 2, 5} × 10^e, the smallest such step that gives
// at most max(max_ticks, 3) ticks; the first tick is <= lo and the last >= hi. An empty range
// (lo == hi) is widened around its value. Throws kInput for a non-finite or reversed range.
std::vector<double> linear_ticks(double lo, double hi, int max_ticks);

// The step chosen by linear_ticks (1, 2 or 5 × 10^e).
double nice_step(double lo, double hi, int max_ticks);

}  // namespace plot_detail

}  // namespace offgen
