// Line-chart PNG writer on cairo: axis ranges and 1/2/5 ticks (linear) or decade ticks (log y),
// layout from measured text, then grid, series, frame, labels, title and legend.
#include "cli/line_plot.h"

#include <cairo.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numbers>
#include <system_error>

#include "runtime/core/error.h"

namespace offgen {
namespace plot_detail {

namespace {

void widen_if_empty(double& lo, double& hi) {
  OFFGEN_CHECK(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, kInput,
               "plot axis range [{}, {}] is not a finite interval", lo, hi);
  const double mag = std::max(std::fabs(lo), std::fabs(hi));
  if (hi - lo > 1e-12 * mag && hi > lo) return;
  const double mid = 0.5 * (lo + hi);
  const double d = mid == 0.0 ? 1.0 : 0.05 * std::fabs(mid);
  lo = mid - d;
  hi = mid + d;
}

constexpr double kEps = 1e-9;

int64_t tick_count(double lo, double hi, double step) {
  return static_cast<int64_t>(std::ceil(hi / step - kEps) - std::floor(lo / step + kEps)) + 1;
}

}  // namespace

double nice_step(double lo, double hi, int max_ticks) {
  widen_if_empty(lo, hi);
  OFFGEN_CHECK(std::isfinite(hi - lo), kInput, "plot axis range [{}, {}] is too wide", lo, hi);
  max_ticks = std::max(max_ticks, 3);
  // A step below span/(max_ticks-1) always gives too many ticks; start at its decade.
  double decade = std::pow(10.0, std::floor(std::log10((hi - lo) / (max_ticks - 1))));
  for (;; decade *= 10.0) {
    for (double m : {1.0, 2.0, 5.0}) {
      // Once step >= span there are at most 3 ticks, so this returns by then.
      if (tick_count(lo, hi, m * decade) <= max_ticks) return m * decade;
    }
  }
}

std::vector<double> linear_ticks(double lo, double hi, int max_ticks) {
  const double step = nice_step(lo, hi, max_ticks);
  widen_if_empty(lo, hi);
  std::vector<double> ticks;
  const double k0 = std::floor(lo / step + kEps), k1 = std::ceil(hi / step - kEps);
  for (double k = k0; k <= k1; k += 1.0) ticks.push_back(k == 0.0 ? 0.0 : k * step);
  return ticks;
}

}  // namespace plot_detail

namespace {

using plot_detail::kEps;

// A tick label, optionally with a superscript ("10" + "-3").
struct Label {
  std::string base, sup;
};

struct Tick {
  double pos;  // axis units (log10 of the value on a log axis)
  Label label;
};

struct Axis {
  double lo = 0, hi = 1;
  std::vector<Tick> major;
  std::vector<double> minor;  // grid only
};

std::string compact_sci(double v, int digits) {
  std::string s = fmt::format("{:.{}e}", v, digits);  // e.g. 2.50e+06
  const auto e = s.find('e');
  std::string mant = s.substr(0, e), ex = s.substr(e + 1);
  const bool neg = ex[0] == '-';
  ex = ex.substr(1);
  ex.erase(0, std::min(ex.find_first_not_of('0'), ex.size() - 1));
  return mant + "e" + (neg ? "-" : "") + ex;
}

Label linear_label(double v, double step, double max_abs) {
  if (std::fabs(v) < step * 1e-6) return {"0", ""};
  if (max_abs >= 1e6 || max_abs < 1e-3) {
    const int digits = std::max(0, static_cast<int>(std::floor(std::log10(max_abs) + kEps) -
                                                    std::floor(std::log10(step) + kEps)));
    return {compact_sci(v, std::min(digits, 15)), ""};
  }
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + kEps)));
  return {fmt::format("{:.{}f}", v, decimals), ""};
}

Axis linear_axis(double lo, double hi, int max_ticks) {
  const double step = plot_detail::nice_step(lo, hi, max_ticks);
  const auto ticks = plot_detail::linear_ticks(lo, hi, max_ticks);
  Axis a;
  a.lo = ticks.front();
  a.hi = ticks.back();
  const double max_abs = std::max(std::fabs(a.lo), std::fabs(a.hi));
  for (double t : ticks) a.major.push_back({t, linear_label(t, step, max_abs)});
  return a;
}

// Label for mantissa × 10^e on a log axis.
Label log_label(int mantissa, int e, bool decades_only, bool superscript) {
  if (decades_only && superscript) return {"10", std::to_string(e)};
  if (e < -4 || e > 5) return {fmt::format("{}e{}", mantissa, e), ""};
  return {fmt::format("{:.{}f}", mantissa * std::pow(10.0, e), std::max(0, -e)), ""};
}

// Log-axis candidates from dense to sparse: mantissas {1..9}, {1,2,5}, {1}, then decades with a
// stride. Bounds snap outward to the candidate's values. `fits` picks the first acceptable one.
template <typename Fits>
Axis log_axis(double lmin, double lmax, int max_ticks, const Fits& fits) {
  const std::vector<std::vector<int>> sets = {{1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 2, 5}, {1}};
  auto floor_div = [](int64_t a, int64_t b) {
    return a / b - ((a % b != 0) && ((a < 0) != (b < 0)));
  };
  Axis last;
  for (const auto& set : sets) {
    const int64_t n = static_cast<int64_t>(set.size());
    auto index = [&](double l, bool up) {
      int64_t e = static_cast<int64_t>(std::floor(l));
      double m = std::pow(10.0, l - static_cast<double>(e));
      if (m >= 10.0 * (1 - kEps)) ++e, m = 1.0;
      if (m <= 1.0 + kEps) m = 1.0;
      if (up) {
        for (int64_t j = 0; j < n; ++j)
          if (set[j] >= m * (1 - kEps)) return e * n + j;
        return (e + 1) * n;
      }
      for (int64_t j = n - 1; j >= 0; --j)
        if (set[j] <= m * (1 + kEps)) return e * n + j;
      return e * n;
    };
    int64_t i0 = index(lmin, false), i1 = index(lmax, true);
    if (i0 == i1) --i0, ++i1;
    Axis a;
    for (int64_t i = i0; i <= i1; ++i) {
      const int64_t e = floor_div(i, n);
      const int mant = set[i - e * n];
      a.major.push_back({static_cast<double>(e) + std::log10(mant), {}});
      a.major.back().label = log_label(mant, static_cast<int>(e), n == 1, false);
    }
    a.lo = a.major.front().pos;
    a.hi = a.major.back().pos;
    const bool sup = n == 1 && (a.lo < -3 || a.hi > 5);
    if (sup)
      for (auto& t : a.major)
        t.label = log_label(1, static_cast<int>(std::lround(t.pos)), true, true);
    if (a.hi - a.lo <= 8 && n < 9) {
      for (int64_t e = static_cast<int64_t>(std::floor(a.lo)); e < a.hi; ++e)
        for (int m = 2; m <= 9; ++m) {
          const double p = static_cast<double>(e) + std::log10(m);
          const bool labelled = std::any_of(a.major.begin(), a.major.end(), [&](const Tick& t) {
            return std::fabs(t.pos - p) < 1e-9;
          });
          if (p > a.lo && p < a.hi && !labelled) a.minor.push_back(p);
        }
    }
    if (static_cast<int>(a.major.size()) <= max_ticks && fits(a)) return a;
    last = std::move(a);
  }
  // Decades with a stride; the minor grid marks the skipped decades.
  const int64_t e0 = static_cast<int64_t>(std::floor(lmin + kEps));
  const int64_t e1 = static_cast<int64_t>(std::ceil(lmax - kEps));
  for (int64_t s : {2, 3, 5, 10, 20, 30, 50, 100, 200, 300, 500}) {
    const int64_t k0 = floor_div(e0, s), k1 = -floor_div(-e1, s);
    Axis a;
    for (int64_t k = k0; k <= k1; ++k)
      a.major.push_back(
          {static_cast<double>(k * s), log_label(1, static_cast<int>(k * s), true, true)});
    a.lo = a.major.front().pos;
    a.hi = a.major.back().pos;
    if (a.hi - a.lo <= 64)
      for (int64_t e = k0 * s; e <= k1 * s; ++e)
        if (e % s != 0) a.minor.push_back(static_cast<double>(e));
    const bool ok = static_cast<int>(a.major.size()) <= max_ticks && fits(a);
    last = std::move(a);
    if (ok) break;
  }
  return last;
}

// Replaces what cairo's toy text API rejects (invalid UTF-8, surrogates, noncharacters) with
// '?', and control characters with spaces, so one bad series name cannot poison the context.
std::string sanitize(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80         ? 1
                       : (c >> 5) == 6  ? 2
                       : (c >> 4) == 14 ? 3
                       : (c >> 3) == 30 ? 4
                                        : 0;
    bool ok = len > 0 && i + len <= s.size();
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; ok && k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      ok = (b & 0xc0) == 0x80;
      cp = (cp << 6) | (b & 0x3f);
    }
    const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    ok = ok && cp >= min_cp[len] && cp < 0x110000 && (cp & 0xfffff800) != 0xd800 &&
         !(cp >= 0xfdd0 && cp <= 0xfdef) && (cp & 0xfffe) != 0xfffe;
    if (!ok) {
      out += '?';
      ++i;
      continue;
    }
    if (cp < 0x20 || cp == 0x7f)
      out += ' ';
    else
      out.append(s, i, len);
    i += len;
  }
  return out;
}

struct Rgb {
  double r, g, b;
};

Rgb series_color(size_t i) {
  static const Rgb kTab10[] = {{0.122, 0.467, 0.706}, {1.000, 0.498, 0.055}, {0.173, 0.627, 0.173},
                               {0.839, 0.153, 0.157}, {0.580, 0.404, 0.741}, {0.549, 0.337, 0.294},
                               {0.890, 0.467, 0.761}, {0.498, 0.498, 0.498}, {0.737, 0.741, 0.133},
                               {0.090, 0.745, 0.812}};
  if (i < 10) return kTab10[i];
  // Beyond the palette: a golden-ratio walk around the hue circle, two brightness levels.
  const double h = std::fmod(0.07 + static_cast<double>(i) * 0.618033988749895, 1.0) * 6.0;
  const double v = i % 2 ? 0.62 : 0.85, s = 0.75, c = v * s;
  const double x = c * (1 - std::fabs(std::fmod(h, 2.0) - 1)), m = v - c;
  const int sector = static_cast<int>(h);
  const Rgb rgb[] = {{c, x, 0}, {x, c, 0}, {0, c, x}, {0, x, c}, {x, 0, c}, {c, 0, x}};
  const Rgb& p = rgb[std::min(sector, 5)];
  return {p.r + m, p.g + m, p.b + m};
}

constexpr int kMarkerKinds = 7;

void draw_marker(cairo_t* cr, size_t kind, double x, double y, double r) {
  switch (kind % kMarkerKinds) {
    case 0:
      cairo_arc(cr, x, y, r, 0, 2 * std::numbers::pi);
      break;
    case 1:
      cairo_rectangle(cr, x - 0.85 * r, y - 0.85 * r, 1.7 * r, 1.7 * r);
      break;
    case 2:
    case 4: {
      const double d = kind % kMarkerKinds == 2 ? 1.0 : -1.0;
      cairo_move_to(cr, x, y - d * 1.15 * r);
      cairo_line_to(cr, x + r, y + d * 0.75 * r);
      cairo_line_to(cr, x - r, y + d * 0.75 * r);
      cairo_close_path(cr);
      break;
    }
    case 3:
      cairo_move_to(cr, x, y - 1.2 * r);
      cairo_line_to(cr, x + 1.2 * r, y);
      cairo_line_to(cr, x, y + 1.2 * r);
      cairo_line_to(cr, x - 1.2 * r, y);
      cairo_close_path(cr);
      break;
    case 5:
    case 6: {  // x and +: stroked, not filled
      const double a = kind % kMarkerKinds == 5 ? 0.9 * r : 1.2 * r,
                   b = kind % kMarkerKinds == 5 ? a : 0;
      cairo_move_to(cr, x - a, y - b);
      cairo_line_to(cr, x + a, y + b);
      cairo_move_to(cr, x - b, y + a);
      cairo_line_to(cr, x + b, y - a);
      cairo_save(cr);
      cairo_set_line_width(cr, 2.0);
      cairo_stroke(cr);
      cairo_restore(cr);
      return;
    }
  }
  cairo_fill(cr);
}

// Text measurement and drawing with the toy API, superscripts at 70% size.
class Text {
 public:
  explicit Text(cairo_t* cr) : cr_(cr) {}
  void font(double size, bool bold) {
    size_ = size;
    cairo_select_font_face(cr_, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr_, size);
  }
  double width(const std::string& s) {
    cairo_text_extents_t e;
    cairo_text_extents(cr_, s.c_str(), &e);
    return e.x_advance;
  }
  double width(const Label& l) {
    if (l.sup.empty()) return width(l.base);
    const double w = width(l.base);
    cairo_set_font_size(cr_, 0.7 * size_);
    const double ws = width(l.sup);
    cairo_set_font_size(cr_, size_);
    return w + ws + 1;
  }
  // Cap height, used to centre text vertically.
  double cap() { return 0.72 * size_; }
  // Draws at (x, y): ha 0/0.5/1 = left/centre/right of x; y is the vertical centre.
  void draw(const Label& l, double x, double y, double ha) {
    const double x0 = x - ha * width(l), base_y = y + 0.5 * cap();
    cairo_move_to(cr_, x0, base_y);
    cairo_show_text(cr_, l.base.c_str());
    if (l.sup.empty()) return;
    const double wb = width(l.base);
    cairo_set_font_size(cr_, 0.7 * size_);
    cairo_move_to(cr_, x0 + wb + 1, base_y - 0.45 * size_);
    cairo_show_text(cr_, l.sup.c_str());
    cairo_set_font_size(cr_, size_);
  }
  void draw(const std::string& s, double x, double y, double ha) { draw(Label{s, ""}, x, y, ha); }
  // Shortens s with an ellipsis to fit max_w.
  std::string fit(const std::string& s, double max_w) {
    if (width(s) <= max_w) return s;
    std::vector<size_t> cuts;  // UTF-8 character boundaries
    for (size_t i = 0; i < s.size(); ++i)
      if ((static_cast<unsigned char>(s[i]) & 0xc0) != 0x80) cuts.push_back(i);
    size_t lo = 0, hi = cuts.size();  // the longest prefix cuts[k] with fit
    while (lo + 1 < hi) {
      const size_t mid = (lo + hi) / 2;
      (width(s.substr(0, cuts[mid]) + "\u2026") <= max_w ? lo : hi) = mid;
    }
    return lo == 0 ? std::string("\u2026") : s.substr(0, cuts[lo]) + "\u2026";
  }

 private:
  cairo_t* cr_;
  double size_ = 12;
};

struct Segment {
  std::vector<std::pair<double, double>> pts;  // y already log10 on a log axis
};

struct PngSink {
  std::FILE* f = nullptr;
  int err = 0;
};

cairo_status_t png_write(void* closure, const unsigned char* data, unsigned int len) {
  auto* sink = static_cast<PngSink*>(closure);
  if (std::fwrite(data, 1, len, sink->f) != len) {
    sink->err = errno ? errno : EIO;
    return CAIRO_STATUS_WRITE_ERROR;
  }
  return CAIRO_STATUS_SUCCESS;
}

void write_png(cairo_surface_t* surface, const std::string& path) {
  errno = 0;
  PngSink sink{std::fopen(path.c_str(), "wb"), 0};
  OFFGEN_CHECK(sink.f, kIo, "cannot open plot file '{}' for writing: {}", path,
               std::generic_category().message(errno));
  const cairo_status_t st = cairo_surface_write_to_png_stream(surface, png_write, &sink);
  const bool flush_failed = std::fflush(sink.f) != 0;
  if (flush_failed && !sink.err) sink.err = errno;
  const bool close_failed = std::fclose(sink.f) != 0;
  if (close_failed && !sink.err) sink.err = errno;
  if (st != CAIRO_STATUS_SUCCESS || flush_failed || close_failed) {
    std::remove(path.c_str());
    OFFGEN_THROW(kIo, "cannot write plot file '{}': {}", path,
                 sink.err ? std::generic_category().message(sink.err)
                          : std::string(cairo_status_to_string(st)));
  }
}

}  // namespace

void write_line_plot_png(const LinePlot& plot, const std::string& path, int width, int height) {
  OFFGEN_CHECK(width >= 64 && width <= 8192 && height >= 64 && height <= 8192, kInput,
               "plot size {}x{} is out of range (64..8192 pixels a side)", width, height);
  // Drawable points, split into segments at skipped ones.
  std::vector<std::vector<Segment>> segs(plot.series.size());
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  size_t n_points = 0;
  for (size_t s = 0; s < plot.series.size(); ++s) {
    bool open = false;
    for (auto [x, y] : plot.series[s].points) {
      const bool ok = std::isfinite(x) && std::isfinite(y) && (!plot.log_y || y > 0) &&
                      (!plot.log_x || x > 0);
      if (!ok) {
        open = false;
        continue;
      }
      if (plot.log_y) y = std::log10(y);
      if (plot.log_x) x = std::log10(x);
      if (!open) segs[s].emplace_back();
      open = true;
      segs[s].back().pts.emplace_back(x, y);
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
      ++n_points;
    }
  }
  OFFGEN_CHECK(n_points > 0, kInput,
               "plot '{}' for '{}' has no drawable points ({} series; NaN/inf{} are skipped)",
               plot.title, path, plot.series.size(),
               plot.log_x || plot.log_y ? " and values <= 0 on a log axis" : "");

  OFFGEN_CHECK(std::isfinite(x1 - x0) && std::isfinite(y1 - y0), kInput,
               "plot '{}' for '{}': data range x [{}, {}], y [{}, {}] is too wide to draw",
               plot.title, path, x0, x1, y0, y1);

  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> surface(
      cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height), cairo_surface_destroy);
  OFFGEN_CHECK(cairo_surface_status(surface.get()) == CAIRO_STATUS_SUCCESS, kResource,
               "cannot create a {}x{} plot image: {}", width, height,
               cairo_status_to_string(cairo_surface_status(surface.get())));
  std::unique_ptr<cairo_t, decltype(&cairo_destroy)> ctx(cairo_create(surface.get()),
                                                         cairo_destroy);
  cairo_t* cr = ctx.get();
  Text text(cr);

  const double sc = std::clamp(std::min(width / 900.0, height / 600.0), 0.6, 3.0);
  const double f_tick = 12 * sc, f_label = 14 * sc, f_title = 17 * sc, pad = 10 * sc;
  const double tick_len = 5 * sc;
  const std::string title = sanitize(plot.title), x_label = sanitize(plot.x_label),
                    y_label = sanitize(plot.y_label);

  // Vertical layout first; the legend and the y axis labels then set the side margins.
  const double top = pad + (title.empty() ? pad : f_title + pad);
  const double bottom = tick_len + pad + f_tick + (x_label.empty() ? pad : f_label + 2 * pad);
  const double plot_h = std::max(10.0, height - top - bottom);
  text.font(f_tick, false);

  // Legend: shown when any series has a name or there is more than one series. Rows that do not
  // fit beside the plot collapse into one "+N more" row.
  std::vector<std::string> names;
  bool any_name = false;
  for (size_t s = 0; s < plot.series.size(); ++s) {
    any_name = any_name || !plot.series[s].name.empty();
    names.push_back(plot.series[s].name.empty() ? fmt::format("series {}", s + 1)
                                                : sanitize(plot.series[s].name));
  }
  const bool legend = any_name || plot.series.size() > 1;
  const double swatch = 26 * sc, row = 1.6 * f_tick;
  const size_t rows = static_cast<size_t>(std::max(1.0, (plot_h - pad) / row));
  const size_t shown = names.size() <= rows ? names.size() : rows - 1;
  const std::string more = fmt::format("+{} more", names.size() - shown);
  double legend_w = 0;
  if (legend) {
    for (auto& n : names) n = text.fit(n, 0.24 * width);
    for (size_t s = 0; s < shown; ++s) legend_w = std::max(legend_w, swatch + text.width(names[s]));
    if (shown < names.size()) legend_w = std::max(legend_w, text.width(more));
    legend_w += 3 * pad;
  }

  const double min_gap_y = 2.0 * f_tick;
  auto fits_y = [&](const Axis& a) {
    for (size_t i = 1; i < a.major.size(); ++i)
      if ((a.major[i].pos - a.major[i - 1].pos) / (a.hi - a.lo) * plot_h < min_gap_y) return false;
    return true;
  };
  const int max_y = std::clamp(static_cast<int>(plot_h / min_gap_y), 3, 12);
  Axis ay;
  if (plot.log_y) {
    ay = log_axis(y0, y1, max_y, fits_y);
  } else {
    for (int m = max_y; m >= 3; --m)
      if (ay = linear_axis(y0, y1, m); fits_y(ay)) break;
  }
  double y_tick_w = 0;
  for (const auto& t : ay.major) y_tick_w = std::max(y_tick_w, text.width(t.label));
  const double left = pad + (y_label.empty() ? 0 : f_label + pad) + y_tick_w + pad + tick_len;
  const double right = legend ? legend_w + pad : 3 * pad;
  const double plot_w = std::max(10.0, width - left - right);
  // The x tick labels fit side by side with room between them.
  auto fits_x = [&](const Axis& a) {
    double w = 0;
    for (const auto& t : a.major) w = std::max(w, text.width(t.label));
    return (w + 2 * f_tick) * static_cast<double>(a.major.size() - 1) <= plot_w;
  };
  const int max_x = std::clamp(static_cast<int>(plot_w / (6 * f_tick)), 3, 12);
  Axis ax;
  if (plot.log_x) {
    ax = log_axis(x0, x1, max_x, fits_x);
  } else {
    for (int m = max_x; m >= 3; --m)
      if (ax = linear_axis(x0, x1, m); fits_x(ax)) break;
  }
  auto px = [&](double x) { return left + (x - ax.lo) / (ax.hi - ax.lo) * plot_w; };
  auto py = [&](double y) { return top + plot_h - (y - ay.lo) / (ay.hi - ay.lo) * plot_h; };
  auto crisp = [](double v) { return std::round(v) + 0.5; };

  // Background and grid.
  cairo_set_source_rgb(cr, 1, 1, 1);
  cairo_paint(cr);
  cairo_set_line_width(cr, 1.0);
  cairo_set_source_rgb(cr, 0.95, 0.95, 0.95);
  for (double m : ay.minor) {
    cairo_move_to(cr, left, crisp(py(m)));
    cairo_line_to(cr, left + plot_w, crisp(py(m)));
  }
  for (double m : ax.minor) {
    cairo_move_to(cr, crisp(px(m)), top);
    cairo_line_to(cr, crisp(px(m)), top + plot_h);
  }
  cairo_stroke(cr);
  cairo_set_source_rgb(cr, 0.86, 0.86, 0.86);
  for (const auto& t : ay.major) {
    cairo_move_to(cr, left, crisp(py(t.pos)));
    cairo_line_to(cr, left + plot_w, crisp(py(t.pos)));
  }
  for (const auto& t : ax.major) {
    cairo_move_to(cr, crisp(px(t.pos)), top);
    cairo_line_to(cr, crisp(px(t.pos)), top + plot_h);
  }
  cairo_stroke(cr);

  // Series: polylines, then markers, clipped to the plot area plus a marker's reach.
  const double line_w = 2.0 * sc;
  cairo_save(cr);
  cairo_rectangle(cr, left - 8 * sc, top - 8 * sc, plot_w + 16 * sc, plot_h + 16 * sc);
  cairo_clip(cr);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
  for (size_t s = 0; s < segs.size(); ++s) {
    const Rgb c = series_color(s);
    cairo_set_source_rgb(cr, c.r, c.g, c.b);
    cairo_set_line_width(cr, line_w);
    size_t count = 0;
    for (const auto& seg : segs[s]) {
      count += seg.pts.size();
      for (size_t i = 0; i < seg.pts.size(); ++i)
        (i ? cairo_line_to : cairo_move_to)(cr, px(seg.pts[i].first), py(seg.pts[i].second));
      cairo_stroke(cr);
    }
    const double r = (count > 100 ? 2.0 : 3.8) * sc;
    for (const auto& seg : segs[s])
      for (auto [x, y] : seg.pts) draw_marker(cr, s, px(x), py(y), r);
  }
  cairo_restore(cr);

  // Frame, ticks and tick labels.
  cairo_set_source_rgb(cr, 0.25, 0.25, 0.25);
  cairo_set_line_width(cr, 1.0);
  cairo_rectangle(cr, crisp(left), crisp(top), std::round(plot_w), std::round(plot_h));
  for (const auto& t : ay.major) {
    cairo_move_to(cr, crisp(left), crisp(py(t.pos)));
    cairo_line_to(cr, crisp(left) - tick_len, crisp(py(t.pos)));
  }
  for (const auto& t : ax.major) {
    cairo_move_to(cr, crisp(px(t.pos)), crisp(top + plot_h));
    cairo_line_to(cr, crisp(px(t.pos)), crisp(top + plot_h) + tick_len);
  }
  cairo_stroke(cr);
  cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
  text.font(f_tick, false);
  for (const auto& t : ay.major) text.draw(t.label, left - tick_len - 0.5 * pad, py(t.pos), 1.0);
  const double x_tick_y = top + plot_h + tick_len + 0.4 * pad + 0.5 * text.cap();
  for (const auto& t : ax.major) text.draw(t.label, px(t.pos), x_tick_y, 0.5);

  // Axis labels and title.
  text.font(f_label, false);
  if (!x_label.empty())
    text.draw(text.fit(x_label, plot_w), left + plot_w / 2, height - pad - 0.5 * f_label, 0.5);
  if (!y_label.empty()) {
    cairo_save(cr);
    cairo_translate(cr, pad + 0.5 * f_label, top + plot_h / 2);
    cairo_rotate(cr, -std::numbers::pi / 2);
    text.draw(text.fit(y_label, plot_h), 0, 0, 0.5);
    cairo_restore(cr);
  }
  if (!title.empty()) {
    text.font(f_title, true);
    text.draw(text.fit(title, width - 2 * pad), width / 2.0, pad + 0.5 * f_title, 0.5);
  }

  // Legend, right of the plot.
  if (legend) {
    text.font(f_tick, false);
    const double lx = left + plot_w + pad;
    const size_t total_rows = shown + (shown < names.size() ? 1 : 0);
    const double lw = legend_w - pad, lh = static_cast<double>(total_rows) * row + pad;
    cairo_rectangle(cr, crisp(lx), crisp(top), std::round(lw), std::round(lh));
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_fill_preserve(cr);
    cairo_set_source_rgb(cr, 0.7, 0.7, 0.7);
    cairo_stroke(cr);
    for (size_t s = 0; s < shown; ++s) {
      const double cy = top + 0.5 * pad + (static_cast<double>(s) + 0.5) * row;
      const Rgb c = series_color(s);
      cairo_set_source_rgb(cr, c.r, c.g, c.b);
      cairo_set_line_width(cr, line_w);
      cairo_move_to(cr, lx + pad * 0.6, cy);
      cairo_line_to(cr, lx + pad * 0.6 + swatch, cy);
      cairo_stroke(cr);
      draw_marker(cr, s, lx + pad * 0.6 + swatch / 2, cy, 3.8 * sc);
      cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
      text.draw(names[s], lx + swatch + 1.4 * pad, cy, 0.0);
    }
    if (shown < names.size()) {
      cairo_set_source_rgb(cr, 0.35, 0.35, 0.35);
      text.draw(more, lx + 0.6 * pad, top + 0.5 * pad + (static_cast<double>(shown) + 0.5) * row,
                0.0);
    }
  }

  OFFGEN_CHECK(cairo_status(cr) == CAIRO_STATUS_SUCCESS, kInternal, "drawing plot '{}' failed: {}",
               path, cairo_status_to_string(cairo_status(cr)));
  cairo_surface_flush(surface.get());
  write_png(surface.get(), path);
}

}  // namespace offgen
