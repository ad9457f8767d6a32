"""Dispatch: which compiled kernel runs a call, and the runners that call it.

:mod:`~sparselab.dispatch.registry` lists every compiled variant; the
:mod:`~sparselab.dispatch.planner` chooses one per call signature from the
:mod:`~sparselab.dispatch.wisdom` (the tuning table) or its :mod:`~sparselab.dispatch.rules`;
:mod:`~sparselab.dispatch.runners` hand raw pointers to the extension.
"""

from . import keys, planner, registry, rules, runners, wisdom

__all__ = ["keys", "planner", "registry", "rules", "runners", "wisdom"]
