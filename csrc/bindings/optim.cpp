// The bfloat16 AdamW step (csrc/optim/adamw_bf16.h): raw addresses, checked by sparselab.optim.AdamW.
#include "../optim/adamw_bf16.h"
#include "bindings.h"

namespace py = pybind11;

namespace sparselab {

void bind_optim(py::module_& m) {
  m.def(
      "adamw_step_bf16",
      [](uintptr_t param, uintptr_t grad, uintptr_t exp_avg, uintptr_t exp_avg_sq, uintptr_t compensation, int64_t n,
         float lr, float beta1, float beta2, float eps, float weight_decay, float step_size, float root_bc2,
         int rounding, uint64_t seed, int threads) {
        if (rounding < 0 || rounding > 2) throw py::value_error("rounding must be 0, 1 or 2");
        if (rounding == 2 && !compensation && n > 0)
          throw py::value_error("Kahan rounding needs a compensation buffer");
        if (n < 0 || threads < 1) throw py::value_error("n must be >= 0 and threads >= 1");
        if (n > 0 && (!param || !grad || !exp_avg || !exp_avg_sq)) throw py::value_error("a null tensor address");
        AdamWBf16Args a{reinterpret_cast<uint16_t*>(param),
                        reinterpret_cast<const uint16_t*>(grad),
                        reinterpret_cast<uint16_t*>(exp_avg),
                        reinterpret_cast<uint16_t*>(exp_avg_sq),
                        reinterpret_cast<uint16_t*>(compensation),
                        n,
                        lr,
                        beta1,
                        beta2,
                        eps,
                        weight_decay,
                        step_size,
                        root_bc2,
                        Rounding(rounding),
                        seed,
                        threads};
        py::gil_scoped_release nogil;
        adamw_step_bf16(a);
      },
      "One AdamW step over contiguous bfloat16 tensors of n elements (sparselab.optim.AdamW).");
}

}  // namespace sparselab
