#include "cpu_features.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#include <cstdint>
#elif defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace sparselab {

namespace {

#if defined(__x86_64__) || defined(_M_X64)
uint64_t read_xcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27);
  const bool avx = c & (1u << 28);
  f.fma = c & (1u << 12);
  if (osxsave && avx) {
    const uint64_t xcr0 = read_xcr0();
    f.os_avx = (xcr0 & 0x6) == 0x6;       // XMM and YMM state
    f.os_avx512 = (xcr0 & 0xE6) == 0xE6;  // plus opmask, ZMM_Hi256, Hi16_ZMM
  }
  if (__get_cpuid_max(0, nullptr) >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = b & (1u << 5);
    f.avx512f = b & (1u << 16);
    f.avx512dq = b & (1u << 17);
    f.avx512bw = b & (1u << 30);
    f.avx512vl = b & (1u << 31);
    const unsigned subleaves = a;  // leaf 7's highest subleaf
    if (subleaves >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      f.avx512bf16 = a & (1u << 5);
    }
  }
  return f;
}
#elif defined(__aarch64__)
CpuFeatures detect() {
  CpuFeatures f;
#if defined(__linux__)
  f.neon = getauxval(AT_HWCAP) & HWCAP_ASIMD;
#else
  f.neon = true;  // Advanced SIMD is mandatory in AArch64
#endif
  return f;
}
#else
CpuFeatures detect() { return CpuFeatures{}; }
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

std::string isa_unavailable_reason(const std::string& isa) { return isa_unavailable_reason(isa, cpu_features()); }

std::string isa_unavailable_reason(const std::string& isa, const CpuFeatures& f) {
  if (isa == "scalar") return "";
  if (isa == "avx2") {
#if !(defined(__x86_64__) || defined(_M_X64))
    return "not compiled: avx2 variants exist only in x86-64 builds";
#else
    if (!f.avx2 || !f.fma) return "CPU lacks AVX2/FMA (CPUID)";
    if (!f.os_avx) return "OS does not save YMM state (XGETBV)";
    return "";
#endif
  }
  if (isa == "avx512") {
#if !(defined(__x86_64__) || defined(_M_X64))
    return "not compiled: avx512 variants exist only in x86-64 builds";
#else
    if (!(f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq)) return "CPU lacks AVX-512 F/BW/VL/DQ (CPUID)";
    // The avx512 files are built with -mfma and use AVX2 forms too.
    if (!f.avx2 || !f.fma) return "CPU lacks AVX2/FMA (CPUID), which the avx512 variants also use";
    if (!f.os_avx || !f.os_avx512) return "OS does not save YMM/ZMM/opmask state (XGETBV)";
    return "";
#endif
  }
  if (isa == "avx512bf16") {
#if !(defined(__x86_64__) || defined(_M_X64))
    return "not compiled: avx512bf16 variants exist only in x86-64 builds";
#else
    // Its files are built with every avx512 flag plus -mavx512bf16, and run beside the avx512 forms.
    const std::string base = isa_unavailable_reason("avx512", f);
    if (!base.empty()) return base;
    if (!f.avx512bf16) return "CPU lacks AVX512_BF16 (CPUID leaf 7, subleaf 1)";
    return "";
#endif
  }
  if (isa == "neon") {
#if !defined(__aarch64__)
    return "not compiled: neon variants exist only in aarch64 builds";
#else
    return f.neon ? "" : "CPU lacks Advanced SIMD (HWCAP)";
#endif
  }
  return "unknown ISA '" + isa + "'";
}

}  // namespace sparselab
