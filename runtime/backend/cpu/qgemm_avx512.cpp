// The integer GEMM kernels on 512-bit vectors (AVX-512 BW + VNNI: vpdpbusd / vpdpwssd).
#include "runtime/backend/cpu/qgemm_isa.h"
#include "runtime/backend/cpu/qgemm_kernel.h"

namespace offgen::cpu {

const QRunFn* qgemm_kernels_avx512() {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
  if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512bw")) return nullptr;
  static const QRunFn* t = qkern::Registrar<qisa::Avx512>::build();
  return t;
#else
  return nullptr;
#endif
}

}  // namespace offgen::cpu
