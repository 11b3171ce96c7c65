// Backend helpers shared by every implementation.
#include "runtime/backend/backend.h"

namespace offgen {

Weight Backend::prepare_weight(DType src_type, const void* src, int64_t rows, int64_t cols) {
  Weight w;
  w.rows = rows;
  w.cols = cols;
  w.dtype = src_type;
  w.data = Buffer(weight_bytes(rows, cols), Tier::kDevice);
  prepare_weight_into(src_type, src, rows, cols, w.data.data());
  return w;
}

}  // namespace offgen
