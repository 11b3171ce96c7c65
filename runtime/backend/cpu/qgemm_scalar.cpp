// The integer GEMM kernels on the portable vector emulation (qisa::Scalar): the path for CPUs
// without AVX2, and a check of the vector paths' packing logic in the tests.
#include "runtime/backend/cpu/qgemm_isa.h"
#include "runtime/backend/cpu/qgemm_kernel.h"

namespace offgen::cpu {

const QRunFn* qgemm_kernels_scalar() {
  static const QRunFn* t = qkern::Registrar<qisa::Scalar>::build();
  return t;
}

}  // namespace offgen::cpu
