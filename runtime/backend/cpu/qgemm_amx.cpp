// AMX-INT8 tiles for the integer GEMM (large m). Not yet implemented: no kernels are offered.
#include "runtime/backend/cpu/qgemm_internal.h"

namespace offgen::cpu {

bool amx_ready() { return false; }
const QRunFn* qgemm_kernels_amx() { return nullptr; }

}  // namespace offgen::cpu
