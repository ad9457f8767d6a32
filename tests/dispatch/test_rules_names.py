"""The planner's fixed orders name only variants that csrc/variants.def registers (on any ISA)."""

import re
from pathlib import Path

from sparselab.dispatch import rules

VARIANTS_DEF = Path(__file__).resolve().parents[2] / "csrc" / "variants.def"
_LINE = re.compile(r"^SL_(FWD|DX|DW|BWD)\(\s*\w+\s*,\s*\w+\s*,\s*(\w+)\s*,", re.M)
# SL_FWD lines also register spmm_dx on W's transposed index.
_OPS_OF = {"FWD": ("spmm_fwd", "spmm_dx"), "DX": ("spmm_dx",), "DW": ("sddmm_dw",), "BWD": ("backward_fused",)}


def test_rules_name_only_registered_variants():
    registered: dict[str, set[str]] = {}
    for kind, name in _LINE.findall(VARIANTS_DEF.read_text()):
        for op in _OPS_OF[kind]:
            registered.setdefault(op, set()).add(name)
    named = rules.named_variants()
    assert named and all(registered.get(op) for op in named)
    missing = {op: sorted(names - registered[op]) for op, names in named.items() if names - registered[op]}
    assert missing == {}
