"""The autotuner (installed as ``sparselab.tuning``).

Public API: ``set_mode('on'|'off'|'force')``, ``get_mode()``, the ``mode(...)`` context manager;
``set_prefer('speed'|'memory')``, ``get_prefer()``, the ``prefer(...)`` context manager
(tuning.preference); ``TuningCache`` (tuning.cache) and ``tune`` (tuning.tuner). Importing this
package is cheap: the heavy parts (torch, the registry, py-cpuinfo) load on first use.
"""

from .modes import MODES, get_mode, mode, set_mode
from .preference import PREFERENCES, get_prefer, prefer, set_prefer

__all__ = ["MODES", "get_mode", "mode", "set_mode", "PREFERENCES", "get_prefer", "prefer", "set_prefer"]
