// One AdamW step over bfloat16 parameter, gradient and moments, computed in float32 and
// stored with the chosen rounding (sparselab/optim/adamw.py holds the maths and the options).
#pragma once
#include <cstdint>

namespace sparselab {

enum class Rounding { Nearest = 0, Stochastic = 1, Kahan = 2 };

struct AdamWBf16Args {
  uint16_t* param;         // bfloat16 [n]
  const uint16_t* grad;    // bfloat16 [n]
  uint16_t* exp_avg;       // bfloat16 [n]
  uint16_t* exp_avg_sq;    // bfloat16 [n]
  uint16_t* compensation;  // bfloat16 [n] with Kahan, else nullptr
  int64_t n;
  float lr, beta1, beta2, eps, weight_decay;
  float step_size;  // lr / (1 - beta1^step)
  float root_bc2;   // sqrt(1 - beta2^step)
  Rounding rounding;
  uint64_t seed;  // the random bits of element i are a function of (seed, i) only
  int threads;
};

void adamw_step_bf16(const AdamWBf16Args& a);

}  // namespace sparselab
