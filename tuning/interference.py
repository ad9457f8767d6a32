"""Whether other work took the CPU from a timing: measured, not guessed from the load average.

Linux keeps, per thread, the time it spent runnable but waiting for a CPU (the second field of
``/proc/self/task/<tid>/schedstat``, ``run_delay``), and per CPU the time the hypervisor gave to
another guest (``steal`` in ``/proc/stat``). While a key is tuned, :class:`Watch` adds both up: on
a quiet machine they stay near zero; when another process keeps one of two cores busy, the
kernels' threads wait about a third of the time. An entry timed with more than
:data:`NOISY_FRACTION` of its thread time lost is marked provisional (tuner.py).

:func:`quiet_now` answers the planner's question before a provisional key is measured again: is
anything outside this process runnable right now (``procs_running`` in ``/proc/stat`` less this
process's own running threads, the least of a few samples)?

Elsewhere (no ``/proc``) nothing is measured: :meth:`Watch.fraction` is None, entries are never
provisional and :func:`quiet_now` says True.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["NOISY_FRACTION", "Watch", "quiet_now"]

#: Share of the timed threads' time spent waiting for a CPU (or stolen by the hypervisor) above
#: which a tuning's choice is not trusted.
NOISY_FRACTION = 0.05

_TASKS = Path("/proc/self/task")
_STAT = Path("/proc/stat")
_TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)


def _run_delay_s() -> float | None:
    """Seconds this process's threads have spent waiting on a run queue, summed; None if the
    kernel does not say."""
    total, seen = 0, False
    try:
        tasks = list(_TASKS.iterdir())
    except OSError:
        return None
    for task in tasks:
        try:
            fields = (task / "schedstat").read_text().split()
        except OSError:  # the thread ended, or no schedstat in this kernel
            continue
        if len(fields) >= 2:
            total += int(fields[1])
            seen = True
    return total / 1e9 if seen else None


def _steal_s() -> float | None:
    """Seconds the hypervisor has given away of this machine's CPUs (all of them), or None."""
    try:
        with _STAT.open() as f:
            first = f.readline().split()
    except OSError:
        return None
    # cpu user nice system idle iowait irq softirq steal ...
    if len(first) < 9 or first[0] != "cpu":
        return None
    return int(first[8]) * _TICK_S


class Watch:
    """The share of ``threads`` threads' time lost to other work between start and stop."""

    def __init__(self, threads: int):
        self.threads = max(1, threads)
        self._start = None
        self.fraction: float | None = None

    def __enter__(self) -> Watch:
        self._start = (time.perf_counter(), _run_delay_s(), _steal_s())
        return self

    def __exit__(self, *exc) -> None:
        wall0, delay0, steal0 = self._start
        wall = time.perf_counter() - wall0
        delay1, steal1 = _run_delay_s(), _steal_s()
        if delay0 is None or delay1 is None or wall <= 0:
            self.fraction = None
            return
        lost = max(0.0, delay1 - delay0) / (wall * self.threads)
        if steal0 is not None and steal1 is not None:
            lost = max(lost, max(0.0, steal1 - steal0) / (wall * (os.cpu_count() or 1)))
        self.fraction = round(lost, 4)


def _running_threads(pid: int | str = "self") -> int:
    """Threads of process ``pid`` in state R (running or runnable) now."""
    running = 0
    try:
        tasks = list((Path("/proc") / str(pid) / "task").iterdir())
    except OSError:
        return 0
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ...: comm may hold spaces and parentheses, so split after the last ')'.
        if stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] == "R":
            running += 1
    return running


def others_running(also_ours=()) -> int | None:
    """Threads of other processes that want a CPU now: the run queue minus this process's running
    threads and those of the processes ``also_ours`` (pids, e.g. a benchmark child); None if the
    OS does not say."""

    def ours() -> int:
        return _running_threads() + sum(_running_threads(pid) for pid in also_ours)

    # Our threads are counted just before and just after the run queue is read, and the larger
    # count taken: OpenMP threads sleep and wake between the reads, and one that ran at either
    # moment must not be taken for another process.
    before = ours()
    try:
        text = _STAT.read_text()
    except OSError:
        return None
    after = ours()
    for line in text.splitlines():
        if line.startswith("procs_running "):
            return max(0, int(line.split()[1]) - max(before, after))
    return None


def quiet_now(samples: int = 5, spacing_s: float = 0.002) -> bool:
    """Whether no other process wanted a CPU at some moment of ``samples`` looks (a few ms)."""
    least = None
    for i in range(samples):
        others = others_running()
        if others is None:
            return True
        least = others if least is None else min(least, others)
        if least == 0:
            return True
        if i + 1 < samples:
            time.sleep(spacing_s)
    return False
