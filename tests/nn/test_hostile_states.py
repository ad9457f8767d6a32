"""Hostile state dicts, pickles and tampered PaddedCSR and BlockPaddedCSR tensors: refused
cleanly, never a crash.

Each case runs in a worker process (tests/nn/hostile/worker.py), so a crash fails
the case that caused it instead of killing the test run; the worker is restarted
after one. The named cases are the ones a user reported; hypothesis then
explores combinations of mutations.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

WORKER = Path(__file__).parent / "hostile" / "worker.py"
KEYS = ["weight_values", "weight_cols", "weight_row_start", "weight_row_nnz", "weight_shape", "bias"]
IN = 24
VALUES = [-(2**40), -(2**31), -70000, -2, -1, 0, 1, 3, IN - 1, IN, 5000, 32767, 32768 + 3, 65536 + 3, 2**31 - 1, 2**40]


class Worker:
    """One long-lived worker process; ``run`` restarts it after a crash."""

    def __init__(self):
        self.proc = None
        self.cases = 0
        self.outcomes: dict[str, int] = {}

    def _start(self):
        env = dict(os.environ, OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    def run(self, case: dict) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self.cases += 1
        self.proc.stdin.write(json.dumps(case) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=30)
            err = self.proc.stderr.read()[-2000:]
            self.proc = None
            return {"outcome": "crash", "problems": [f"worker died (exit {self.proc_rc(err)}): {err}"]}
        result = json.loads(line)
        self.outcomes[result["outcome"]] = self.outcomes.get(result["outcome"], 0) + 1
        return result

    @staticmethod
    def proc_rc(err: str) -> str:
        return "signal" if "Fatal" in err or "Segmentation" in err else "error"

    def close(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def worker():
    w = Worker()
    yield w
    w.close()
    print(f"\nhostile cases run in the worker: {w.cases}, outcomes {w.outcomes}")


def _ok(result: dict, case: dict) -> None:
    assert result["outcome"] != "crash", f"{case}: {result['problems']}"
    assert not result["problems"], f"{case}: {result['problems']}"


# The reported cases: (description, mutations)
NAMED = [
    ("column out of range", [{"key": "weight_cols", "op": "set", "index": 0, "value": IN}]),
    ("negative column in a live slot", [{"key": "weight_cols", "op": "set", "index": 0, "value": -5}]),
    ("truncated cols", [{"key": "weight_cols", "op": "truncate", "by": 3}]),
    ("row_nnz above capacity", [{"key": "weight_row_nnz", "op": "set", "index": 2, "value": 40}]),
    ("negative row_nnz", [{"key": "weight_row_nnz", "op": "set", "index": 1, "value": -1}]),
    ("decreasing row_start", [{"key": "weight_row_start", "op": "set", "index": 3, "value": 1}]),
    ("huge row_start", [{"key": "weight_row_start", "op": "set", "index": 4, "value": 2**40}]),
    ("truncated values", [{"key": "weight_values", "op": "truncate", "by": 1}]),
    ("wrong shape", [{"key": "weight_shape", "op": "set", "index": 1, "value": IN + 1}]),
    ("unsorted columns", [{"key": "weight_cols", "op": "reverse"}]),
    ("int64 column that wraps to a valid int16", [{"key": "weight_cols", "op": "set", "index": 0, "value": 65536 + 3}]),
    ("cols as float", [{"key": "weight_cols", "op": "dtype", "dtype": "float32"}]),
    ("cols as int8", [{"key": "weight_cols", "op": "dtype", "dtype": "int8"}]),
    ("values 2-D", [{"key": "weight_values", "op": "two_d"}]),
    ("NaN weight in a live slot", [{"key": "weight_values", "op": "nan", "index": 0}]),
    ("bias wrong length", [{"key": "bias", "op": "truncate", "by": 1}]),
    ("missing cols", [{"key": "weight_cols", "op": "delete"}]),
    ("row_start as a list", [{"key": "weight_row_start", "op": "not_a_tensor"}]),
    ("padding slot with a column", [{"key": "weight_cols", "op": "set", "index": -1, "value": 3}]),
    ("row_start not from 0", [{"key": "weight_row_start", "op": "set", "index": 0, "value": 1}]),
    ("bias as a list", [{"key": "bias", "op": "not_a_tensor"}]),
    ("shape as a list", [{"key": "weight_shape", "op": "not_a_tensor"}]),
    ("values as a list", [{"key": "weight_values", "op": "not_a_tensor"}]),
    (
        "values missing and cols as bool",
        [{"key": "weight_values", "op": "delete"}, {"key": "weight_cols", "op": "dtype", "dtype": "bool"}],
    ),
]


@pytest.mark.parametrize("layer", ["unstructured", "block"])
@pytest.mark.parametrize("kind", ["state", "pickle", "tamper"])
@pytest.mark.parametrize("desc,mutations", NAMED, ids=[d for d, _ in NAMED])
def test_reported_hostile_case(worker, layer, kind, desc, mutations):
    """Each case on a SparseLinear (PaddedCSR) and on a BlockSparseLinear of 2x2 blocks
    (BlockPaddedCSR), whose index keys the worker maps to the block names."""
    case = {"kind": kind, "mutations": mutations, "in_place": True, "layer": layer}
    result = worker.run(case)
    _ok(result, case)
    if kind == "state" and desc not in CONVERTIBLE:
        assert result["outcome"] == "refused", desc


# Loads that convert dtypes as torch's own load_state_dict does; the worker still checks that
# what was accepted is a valid topology computing the reference.
CONVERTIBLE = {"cols as int8"}


mutation = st.one_of(
    st.fixed_dictionaries(
        {
            "key": st.sampled_from(KEYS),
            "op": st.just("set"),
            "index": st.integers(-50, 400),
            "value": st.sampled_from(VALUES),
        }
    ),
    st.fixed_dictionaries(
        {"key": st.sampled_from(KEYS), "op": st.sampled_from(["truncate", "extend"]), "by": st.integers(1, 5)}
    ),
    st.fixed_dictionaries(
        {
            "key": st.sampled_from(KEYS),
            "op": st.just("dtype"),
            "dtype": st.sampled_from(
                ["int8", "int16", "int32", "int64", "float16", "float32", "float64", "bool", "uint8"]
            ),
        }
    ),
    st.fixed_dictionaries(
        {"key": st.sampled_from(KEYS), "op": st.sampled_from(["two_d", "reverse", "delete", "not_a_tensor"])}
    ),
    st.fixed_dictionaries({"key": st.sampled_from(KEYS), "op": st.just("nan"), "index": st.integers(0, 400)}),
)
case_strategy = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(["state", "pickle", "tamper"]),
        "mutations": st.lists(mutation, min_size=1, max_size=3),
        "strict": st.booleans(),
        "in_place": st.booleans(),
        "protocol": st.sampled_from(["pickle", "torch"]),
        "layer": st.sampled_from(["unstructured", "block"]),
    }
)


@settings(
    max_examples=int(os.environ.get("SPARSELAB_FUZZ_EXAMPLES", "300")),
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=case_strategy)
def test_fuzzed_hostile_cases(worker, case):
    _ok(worker.run(case), case)
