"""Is the machine quiet enough to make a baseline? Checked before, during and after the run.

A baseline is what every later comparison on that CPU is measured against, so one timed while
another process took a CPU would make each of them noisy (two OpenMP threads on two cores lose
whole scheduler slices). ``sparselab-bench run --save-baseline`` therefore:

- before the run, looks at the run queue for a second: some other process must be idle at a look;
- during the run, samples the run queue every ``SAMPLE_S`` from the parent (which only waits):
  a sample is busy when a thread of another process wants a CPU beside the suite's own (and is
  found running by name: the names are printed);
- after the run, looks once more as before.

More than ``BUSY_FRACTION`` busy samples, or a busy look before or after, and the run is kept as an
ordinary run but not promoted to the baseline.
"""

from __future__ import annotations

import collections
import os
import threading
import time

from sparselab.tuning import interference

SAMPLE_S = 0.2
# Share of the run's samples that may see another process running: short daemons (a log flush,
# the tools' own `git` calls) come and go; a process that keeps a core busy is in most samples.
BUSY_FRACTION = 0.05


def quiet_look(seconds: float = 1.0) -> bool:
    """Whether at some moment within ``seconds`` no other process wanted a CPU."""
    return interference.quiet_now(samples=max(2, int(seconds / 0.05)), spacing_s=0.05)


class RunWatch:
    """Samples the run queue while the child process ``pid`` runs; ``busy_fraction`` after stop."""

    def __init__(self, pid: int):
        self.pid, self.samples, self.busy = pid, 0, 0
        self.seen: collections.Counter = collections.Counter()  # names running beside the suite
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            ours = _tree(self.pid)
            others = interference.others_running(also_ours=ours)
            if others is None:
                return
            self.samples += 1
            # The run queue and our threads' states are not read at one instant, and the suite's
            # OpenMP threads sleep and wake hundreds of times a second: a sample is busy only when
            # a running thread of another process is also found by name.
            names = _running_elsewhere(set(ours) | {os.getpid()}) if others > 0 else []
            if names:
                self.busy += 1
                self.seen.update(names)

    def start(self) -> RunWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def busy_fraction(self) -> float | None:
        return self.busy / self.samples if self.samples else None


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (the suite may start helpers), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
        except OSError:
            continue
        parent = int(stat[stat.rfind(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, ()))
    return out


def _running_elsewhere(ours: set[int]) -> list[str]:
    """Names of the running threads' processes outside ``ours`` (what took the CPU)."""
    names = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in ours:
            continue
        try:
            for task in os.listdir(f"/proc/{entry}/task"):
                stat = open(f"/proc/{entry}/task/{task}/stat").read()
                if stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] == "R":
                    names.append(stat[stat.find("(") + 1 : stat.rfind(")")])
        except OSError:
            continue
    return names


def verdict(before: bool, watch: RunWatch, after: bool) -> str | None:
    """Why the run must not become a baseline (None when it may)."""
    if not before:
        return "another process was running when the suite started"
    fraction = watch.busy_fraction
    if fraction is not None and fraction > BUSY_FRACTION:
        return f"another process wanted a CPU in {fraction:.0%} of the run's samples (at most {BUSY_FRACTION:.0%})"
    if not after:
        return "another process was running when the suite ended"
    return None


def describe(before: bool, watch: RunWatch, after: bool) -> str:
    fraction = watch.busy_fraction
    during = "not measured" if fraction is None else f"{fraction:.1%} of {watch.samples} samples busy"
    seen = getattr(watch, "seen", None)
    if seen:
        during += " (" + ", ".join(f"{name} x{count}" for name, count in seen.most_common(3)) + ")"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"load check: before {'quiet' if before else 'BUSY'}, during {during}, "
        f"after {'quiet' if after else 'BUSY'} (1-min load average {load:.2f}); {time.strftime('%H:%M:%S')}"
    )
