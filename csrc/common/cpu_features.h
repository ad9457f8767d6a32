// Run-time CPU feature detection: CPUID + XGETBV on x86 (the OS must save the
// wide registers too), HWCAP on aarch64. Compiled for the baseline ISA.
#pragma once
#include <string>

namespace sparselab {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512bf16 = false;  // AVX512_BF16: vdpbf16ps and the bfloat16 conversions
  bool os_avx = false;      // XCR0 has XMM|YMM state enabled
  bool os_avx512 = false;   // XCR0 has opmask|ZMM state enabled
  bool neon = false;        // aarch64 Advanced SIMD
};

const CpuFeatures& cpu_features();

// Empty string when the ISA can run here, else the reason it cannot.
std::string isa_unavailable_reason(const std::string& isa);
// The same decision for a given feature set (testable without that CPU).
std::string isa_unavailable_reason(const std::string& isa, const CpuFeatures& f);

}  // namespace sparselab
