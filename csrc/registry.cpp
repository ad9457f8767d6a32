#include "registry.h"

#include <algorithm>

// The per-ISA tables (csrc/kernels/instantiate.h); each ends with a nullptr name.
namespace sparselab {
namespace isa_scalar {
extern const VariantEntry kVariants[];
}
#if defined(SPARSELAB_X86)
namespace isa_avx2 {
extern const VariantEntry kVariants[];
}
namespace isa_avx512 {
extern const VariantEntry kVariants[];
}
#if defined(SPARSELAB_HAS_AVX512BF16)
namespace isa_avx512bf16 {
extern const VariantEntry kVariants[];
}
#endif
#elif defined(SPARSELAB_AARCH64)
namespace isa_neon {
extern const VariantEntry kVariants[];
}
#endif
}  // namespace sparselab

namespace sparselab {

const char* op_name(Op op) {
  switch (op) {
    case Op::SpmmFwd:
      return "spmm_fwd";
    case Op::SpmmDx:
      return "spmm_dx";
    case Op::SddmmDw:
      return "sddmm_dw";
    case Op::BackwardFused:
      return "backward_fused";
    case Op::BlockSpmmFwd:
      return "block_spmm_fwd";
    case Op::BlockSpmmDx:
      return "block_spmm_dx";
    case Op::BlockSddmmDw:
      return "block_sddmm_dw";
  }
  return "?";
}

namespace {

std::string params_json(const VariantEntry& e) {
  std::string s = "{";
  for (int k = 0; k < kMaxTileParams && e.param_names[k]; ++k) {
    if (k) s += ",";
    s += "\"" + std::string(e.param_names[k]) + "\":" + std::to_string(e.param_values[k]);
  }
  return s + "}";
}

std::vector<Variant> build() {
  const VariantEntry* tables[] = {
      isa_scalar::kVariants,
#if defined(SPARSELAB_X86)
      isa_avx2::kVariants,
      isa_avx512::kVariants,
#if defined(SPARSELAB_HAS_AVX512BF16)
      isa_avx512bf16::kVariants,
#endif
#elif defined(SPARSELAB_AARCH64)
      isa_neon::kVariants,
#endif
  };
  std::vector<const VariantEntry*> entries;
  for (const VariantEntry* t : tables)
    for (const VariantEntry* e = t; e->name; ++e) entries.push_back(e);
  // By op, then in the list's order.
  std::stable_sort(entries.begin(), entries.end(), [](const VariantEntry* a, const VariantEntry* b) {
    return a->op != b->op ? a->op < b->op : a->line < b->line;
  });
  std::vector<Variant> out;
  for (const VariantEntry* e : entries) {
    Variant v;
    v.op = e->op;
    v.name = e->name;
    v.isa = e->isa;
    v.form = e->form;
    v.params = params_json(*e);
    v.dtype = e->dtype;
    for (int k = 0; k < kMaxTileParams && e->param_names[k]; ++k) {
      if (std::string(e->param_names[k]) == "block_rows") v.block_rows = e->param_values[k];
      if (std::string(e->param_names[k]) == "block_cols") v.block_cols = e->param_values[k];
    }
    v.dx_layout = e->dx_layout;
    v.fwd16 = e->fwd16;
    v.fwd32 = e->fwd32;
    v.dx16 = e->dx16;
    v.dx32 = e->dx32;
    v.dw16 = e->dw16;
    v.dw32 = e->dw32;
    v.bwd16 = e->bwd16;
    v.bwd32 = e->bwd32;
    v.scratch = e->scratch;
    v.prepared_floats = e->prepared_floats;
    v.prepare16 = e->prepare16;
    v.prepare32 = e->prepare32;
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace

const std::vector<Variant>& variants() {
  static const std::vector<Variant> table = build();
  return table;
}

}  // namespace sparselab
