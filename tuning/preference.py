"""What dispatch optimises for: 'speed' (default) or 'memory'.

- speed:  every op runs the race's fastest candidate.
- memory: ``spmm_dx`` runs the fastest candidate that needs no transposed index, i.e. a scatter
          form reading W's own index (``kernels.VariantInfo.dx_layout == 'scatter'``). The
          transposed index costs 6 bytes per live weight (int16 column + int32 permutation),
          a quarter of a sparse layer's bytes under AdamW, and is then never built. Dense
          candidates are excluded too: they densify W on every call. The scatter forms are
          1.3-1.45x slower per dX call on the development machine. The backward runs the separate
          pair (a fused backward reads the transposed index). Other ops are unaffected.

The choice comes from the same tuned entry (its ``medians`` hold every valid candidate), so
switching preference never re-tunes. ``SPARSELAB_PREFER`` sets the starting value;
``set_prefer`` and the ``prefer(...)`` context manager change it at run time.
"""

from __future__ import annotations

from .modes import ProcessSetting, env_choice

PREFERENCES = ("speed", "memory")
ENV_PREFER = "SPARSELAB_PREFER"


def _from_env() -> str:
    return env_choice(ENV_PREFER, PREFERENCES, "speed")


_prefer = ProcessSetting("preference", PREFERENCES, _from_env())


def get_prefer() -> str:
    return _prefer.value


def set_prefer(value: str) -> None:
    """Optimise dispatch for 'speed' (default) or 'memory' (see the module docstring)."""
    _prefer.set(value)


def prefer(value: str):
    """Temporarily change the preference: ``with sparselab.tuning.prefer('memory'): ...``."""
    return _prefer.temporarily(value)


def allowed(op: str, info) -> bool:
    """Whether variant ``info`` of ``op`` may be chosen under the current preference."""
    if _prefer.value == "memory" and op == "spmm_dx":
        return info.dx_layout == "scatter"
    if _prefer.value == "memory" and op == "backward_fused":
        return info.form == "separate"
    return True
