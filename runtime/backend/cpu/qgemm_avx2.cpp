// The integer GEMM kernels on 256-bit vectors: AVX2 (exact maddubs/madd emulation of the dot
// products) and AVX-VNNI (vpdpbusd / vpdpwssd on ymm registers).
#include "runtime/backend/cpu/qgemm_isa.h"
#include "runtime/backend/cpu/qgemm_kernel.h"

#if defined(__AVXVNNI__)
#include <cpuid.h>
#endif

namespace offgen::cpu {

const QRunFn* qgemm_kernels_avx2() {
#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return nullptr;
  static const QRunFn* t = qkern::Registrar<qisa::Avx2T<false>>::build();
  return t;
#else
  return nullptr;
#endif
}

const QRunFn* qgemm_kernels_avxvnni() {
#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__) && \
    (defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__)))
#if defined(__AVXVNNI__)
  unsigned a = 0, b = 0, c = 0, d = 0;  // AVX-VNNI: CPUID leaf 7 sub-leaf 1, EAX bit 4
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d) || !((a >> 4) & 1u)) return nullptr;
#else
  if (!__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("avx512vl")) return nullptr;
#endif
  static const QRunFn* t = qkern::Registrar<qisa::Avx2T<true>>::build();
  return t;
#else
  return nullptr;
#endif
}

}  // namespace offgen::cpu
