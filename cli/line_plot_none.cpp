// Builds without cairo (e.g. the GPU check's self-contained build): --plot says why it is absent.
#include "cli/line_plot.h"

#include "runtime/core/error.h"

namespace offgen {

void write_line_plot_png(const LinePlot&, const std::string& path, int, int) {
  OFFGEN_THROW(kConfig, "{}: this build has no plotting (cairo was not found at configure time)",
               path);
}

}  // namespace offgen
