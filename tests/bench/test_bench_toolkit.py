"""sparselab-bench beyond reports: per-CPU run storage, compare with no files, history, the pr
command's statistics and its build isolation, readable plots. Synthetic pytest-benchmark files
(tests/bench/test_benchmarking_tools.py's writers); no real benchmark is timed here."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pandas", reason="the [bench] extra (pandas, matplotlib) is not installed")
pytest.importorskip("matplotlib", reason="the [bench] extra (pandas, matplotlib) is not installed")

from sparselab_bench import pr, report, storage  # noqa: E402
from sparselab_bench.machine import cpu_slug  # noqa: E402
from sparselab_bench.results import BenchDataError  # noqa: E402
from sparselab_bench.suite import run_suite, suite_args  # noqa: E402
from test_benchmarking_tools import XEON, XEON_FLAGS, bench, run_cli, write_results  # noqa: E402

SLUG = cpu_slug(XEON, XEON_FLAGS)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A git checkout with this CPU's storage, the current directory inside it."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(storage, "this_cpu_slug", lambda: SLUG)
    return tmp_path


def _saved(root: Path, name: str, median: float, commit: str, when: str, seed: int = 0) -> Path:
    path = storage.runs_dir(root, SLUG) / "Linux-CPython-3.11-64bit" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    write_results(
        path,
        [
            bench("test_k[a]", median, {"op": "spmm_fwd"}, seed=seed),
            bench("test_k[b]", 2e-3, {"op": "spmm_fwd"}, seed=seed + 1),
        ],
    )
    doc = json.loads(path.read_text())
    doc["commit_info"]["id"], doc["datetime"] = commit, when
    path.write_text(json.dumps(doc))
    return path


def test_compare_without_files_uses_newest_run_and_this_cpus_baseline(repo, capsys):
    _saved(repo, "0001_aaaa.json", 1e-3, "aaaa", "2026-11-20T00:00:00")
    _saved(repo, "0002_bbbb.json", 1.5e-3, "bbbb", "2026-11-21T00:00:00", seed=5)
    base = storage.baseline_path(repo, SLUG)
    base.parent.mkdir(parents=True)
    base.write_bytes((storage.runs_dir(repo, SLUG) / "Linux-CPython-3.11-64bit" / "0001_aaaa.json").read_bytes())
    code, out, err = run_cli(capsys, "compare", "--out", repo / "cmp", "--fail-on-regression")
    assert code == 1, err  # test_k[a] got 1.5x slower
    assert f"base: {base}" in out and "0002_bbbb.json" in out
    assert "`bench/test_kernels.py::test_k[a]` |" in out and "**slower**" in out
    assert "0 faster, 1 slower, 1 same" in out


def test_compare_without_a_baseline_says_how_to_make_one(repo, capsys):
    _saved(repo, "0001_aaaa.json", 1e-3, "aaaa", "2026-11-20T00:00:00")
    code, _, err = run_cli(capsys, "compare")
    assert code == 2 and "no baseline for this CPU" in err and "--save-baseline" in err
    code, _, err = run_cli(capsys, "compare", "only_one.json")
    assert code == 2 and "give both" in err


def test_history_plots_one_benchmark_across_commits(repo, capsys):
    for i, (commit, median) in enumerate([("c1", 1e-3), ("c2", 0.9e-3), ("c3", 1.2e-3)]):
        _saved(repo, f"000{i + 1}_{commit}.json", median, commit, f"2026-11-2{i}T00:00:00", seed=i)
    code, out, err = run_cli(capsys, "history", "test_k[a]", "--out", repo / "hist")
    assert code == 0, err
    rows = [line for line in out.splitlines() if line.startswith("| 000")]
    assert [r.split(" | ")[1] for r in rows] == ["c1", "c2", "c3"]  # oldest first
    assert "| 900 µs |" in out and (repo / "hist" / "test_k_a_.png").stat().st_size > 1000
    code, _, err = run_cli(capsys, "history", "test_k", "--out", repo / "hist")
    assert code == 2 and "matches 2 benchmarks" in err and "test_k[b]" in err
    code, _, err = run_cli(capsys, "history", "nothing_like_it")
    assert code == 2 and "no benchmark matching" in err


def test_runs_are_stored_per_cpu_by_the_bench_conftest(repo):
    conftest = Path(__file__).resolve().parents[2] / "bench" / "suite" / "conftest.py"
    text = conftest.read_text()
    assert "tryfirst=True" in text and "storage.runs_dir" in text
    assert storage.runs_dir(repo, SLUG) == repo / ".benchmarks" / SLUG


# ------------------------------------------------------------------ pr statistics


def _side(tmp_path: Path, label: str, medians: list[float], spread: float, seed: int) -> pr.Side:
    side = pr.Side(label, "0" * 40, None)
    for i, m in enumerate(medians):
        path = tmp_path / f"{label}-{i}.json"
        write_results(
            path,
            [
                bench("test_k[x]", m, rounds=20, spread=spread, seed=seed + i),
                bench("test_k[y]", 1e-3, rounds=20, spread=spread, seed=seed + 50 + i),
            ],
        )
        side.runs.append(path)
    return side


def test_pr_rows_have_the_documented_keys_and_verdicts(tmp_path):
    base = _side(tmp_path, "base", [1e-3, 1.01e-3, 0.99e-3], 0.01, 0)
    head = _side(tmp_path, "head", [1.3e-3, 1.31e-3, 1.29e-3], 0.01, 10)
    rows, notes = pr.compare_sides(base, head, threshold=0.05)
    assert [set(r) for r in rows] == [{"name", "base", "head", "ratio", "ci_low", "ci_high", "verdict"}] * 2
    x, y = rows
    assert x["verdict"] == "slower" and x["ratio"] == pytest.approx(1.3, rel=0.02) and x["ci_low"] > 1
    assert y["verdict"] == "same" and y["ci_low"] < 1 < y["ci_high"]
    assert notes == []
    faster, _ = pr.compare_sides(head, base, threshold=0.05)
    assert faster[0]["verdict"] == "faster"


def test_pr_a_noisy_process_widens_the_interval_instead_of_deciding(tmp_path):
    # Head is 20% slower in one process out of three only (a burst of load): not a verdict.
    base = _side(tmp_path, "base", [1e-3, 1e-3, 1e-3], 0.01, 0)
    head = _side(tmp_path, "head", [1e-3, 1.2e-3, 1e-3], 0.01, 10)
    rows, _ = pr.compare_sides(base, head, threshold=0.05)
    assert rows[0]["verdict"] == "same"


def test_pr_verdict_needs_both_the_threshold_and_the_interval():
    assert pr.verdict(1.04, 1.01, 1.07, 0.05) == "same"  # within the threshold
    assert pr.verdict(1.10, 0.98, 1.2, 0.05) == "same"  # interval includes 1
    assert pr.verdict(1.10, 1.02, 1.2, 0.05) == "slower"
    assert pr.verdict(0.90, 0.85, 0.97, 0.05) == "faster"


def test_pr_markdown_and_json(tmp_path):
    base = _side(tmp_path, "base", [1e-3] * 3, 0.01, 0)
    head = _side(tmp_path, "head", [1.3e-3] * 3, 0.01, 10)
    rows, notes = pr.compare_sides(base, head, 0.05)
    text = pr.markdown(
        rows,
        notes,
        pr.Side("main", "a" * 40, None),
        pr.Side("installed", None, None),
        0.05,
        3,
        ["bench/suite/bench_kernels.py", "--quick"],
        {"brand": XEON, "cpu_slug": SLUG},
    )
    assert "| benchmark | base | head | head/base | 95% interval | verdict |" in text
    assert "**1 slower**" not in text and "0 faster, 1 slower, 1 same" in text and "working tree" in text
    pr.write_json(rows, tmp_path / "rows.json")
    assert json.loads((tmp_path / "rows.json").read_text()) == json.loads(json.dumps(rows))


def test_pr_suite_runs_against_the_build_it_is_given_not_the_installed_one(tmp_path):
    """The bootstrap puts the build's site directory first and drops an editable install's
    import hook, so `import sparselab` is the build's."""
    site = tmp_path / "site" / "sparselab"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("BUILD = 'the base build'\n")
    suite = tmp_path / "suite" / "bench_probe.py"
    suite.parent.mkdir()
    suite.write_text(
        textwrap.dedent("""
        import sparselab

        def test_where(benchmark):
            benchmark.extra_info["from"] = sparselab.__file__
            benchmark.extra_info["build"] = getattr(sparselab, "BUILD", None)
            benchmark.pedantic(lambda: None, rounds=3)
    """)
    )
    out = tmp_path / "out.json"
    run_suite(tmp_path, [str(suite)], out, site=tmp_path / "site")
    extra = json.loads(out.read_text())["benchmarks"][0]["extra_info"]
    assert extra["build"] == "the base build" and extra["from"].startswith(str(tmp_path / "site"))


def _tree(root: Path, files: list[str]) -> Path:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    return root


def test_pr_runs_each_side_in_its_own_bench_layout_and_pairs_names_across_them(tmp_path):
    """A base from before bench/suite/ runs its own bench/bench_kernels.py, and its benchmarks,
    named by that path, pair with head's; a suite path one side lacks is refused up front."""
    flat = _tree(tmp_path / "flat", ["bench/conftest.py", "bench/bench_kernels.py"])
    new = _tree(tmp_path / "new", ["bench/suite/conftest.py", "bench/suite/bench_kernels.py"])
    suite = ["bench/suite/bench_kernels.py::test_kernel", "--quick", "-k", "headline"]
    assert suite_args(flat, suite) == [f"{flat}/bench/bench_kernels.py::test_kernel", "--quick", "-k", "headline"]
    assert suite_args(new, suite)[0] == f"{new}/bench/suite/bench_kernels.py::test_kernel"
    assert suite_args(new, ["bench/bench_kernels.py"]) == [f"{new}/bench/suite/bench_kernels.py"]
    assert suite_args(flat, ["bench", "--quick"]) == [f"{flat}/bench", "--quick"]
    with pytest.raises(BenchDataError, match="not in"):
        suite_args(flat, ["bench/suite/bench_other.py"])
    base, head = tmp_path / "base.json", tmp_path / "head.json"
    write_results(base, [dict(bench("test_kernel[x]", 1e-3), fullname="bench/bench_kernels.py::test_kernel[x]")])
    write_results(head, [dict(bench("test_kernel[x]", 1e-3), fullname="bench/suite/bench_kernels.py::test_kernel[x]")])
    rows, notes = pr.compare_sides(
        pr.Side("main", "0" * 40, None, [base]), pr.Side("installed", None, None, [head]), threshold=0.05
    )
    assert [r["name"] for r in rows] == ["bench/suite/bench_kernels.py::test_kernel[x]"] and notes == []


# ------------------------------------------------------------------ plots


def test_variant_styles_are_distinct_colour_marker_pairs():
    pairs = {(report.style(i)["color"], report.style(i)["marker"]) for i in range(140)}
    assert len(pairs) == 140


def _sweep_rows(variants: int) -> list[dict]:
    out = []
    for s in (0.5, 0.8, 0.9, 0.95):
        nnz = (1 - s) * 512 * 512
        for v in range(variants):
            extra = {
                "op": "spmm_fwd",
                "variant": f"v{v:02d}",
                "out": 512,
                "in": 512,
                "n": 64,
                "sparsity": s,
                "gflops": 2 * nnz * 64 / 1e9,
                "bytes_moved": 8 * nnz + 4 * 1024 * 64,
                "baseline": None,
            }
            out.append(bench(f"test_k[{s}-v{v}]", (1 + v / 10) * 2 * nnz * 64 / 8e9, extra))
        extra = {
            "op": "spmm_fwd",
            "variant": "dense_torch",
            "out": 512,
            "in": 512,
            "n": 64,
            "sparsity": s,
            "gflops": 2 * nnz * 64 / 1e9,
            "dense_gflops": 2 * 512 * 512 * 64 / 1e9,
            "bytes_moved": 4 * 512 * 512,
            "baseline": "dense_torch",
        }
        out.append(bench(f"test_d[{s}]", 2 * 512 * 512 * 64 / 50e9, extra))
    # one point far above a 20 GB/s DRAM roof: intensity 0.1 flop/byte at 10 GFLOP/s
    extra = {
        "op": "spmm_fwd",
        "variant": "v00",
        "out": 64,
        "in": 64,
        "n": 1,
        "sparsity": 0.9,
        "gflops": 0.01,
        "bytes_moved": 10**8,
        "baseline": None,
    }
    out.append(bench("test_k[cached]", 1e-3, extra))
    return out


def test_report_plots_many_variants_and_cache_roofs_above_the_dram_roof(tmp_path, capsys, monkeypatch):
    from sparselab_bench import machine

    results = write_results(tmp_path / "r.json", _sweep_rows(14))
    out_dir = tmp_path / "out" / SLUG
    out_dir.mkdir(parents=True)
    (out_dir / "probes.json").write_text(
        json.dumps(
            {
                "threads": 2,
                "bandwidth_gbs": 20.0,
                "bandwidth_method": "test",
                "peak_gflops": 100.0,
                "peak_method": "test",
                "l2_gbs": 300.0,
                "l3_gbs": 120.0,
                "cache_method": "test copies",
            }
        )
    )
    monkeypatch.setattr(machine, "machine_info", lambda: {"cpu_slug": SLUG, "torch_num_threads": 2})
    code, _, err = run_cli(
        capsys, "report", results, "--out", tmp_path / "out", "--probe", "--note", "Measured elsewhere, on purpose."
    )
    text = (out_dir / "README.md").read_text()
    assert code == 0, err
    assert "Measured elsewhere, on purpose." in text.split("## Machine")[0]
    assert "L2 300 GB/s, L3 120 GB/s (test copies)" in text
    assert "point(s) lie above the DRAM roof" in text and "measured roofs are drawn" in text
    for png in ("gflops_vs_sparsity.png", "roofline.png"):
        assert (out_dir / png).stat().st_size > 5000


def test_pr_min_statistic_sees_through_lost_scheduler_slices(tmp_path):
    """Rounds of a kernel on a shared machine: its time plus 0-3 lost 4 ms slices. The median
    moves with the slices; the fastest round of each process does not."""

    def side(label, kernel_s, seed):
        rng = np.random.default_rng(seed)
        s = pr.Side(label, "0" * 40, None)
        for i in range(3):
            data = kernel_s + 4e-3 * rng.integers(0, 4, size=15)
            data[0] = kernel_s  # every process has a round that lost no slice
            path = tmp_path / f"{label}-{i}.json"
            entry = bench("test_k[x]", float(np.median(data)), rounds=15)
            entry["stats"]["data"] = data.tolist()
            write_results(path, [entry])
            s.runs.append(path)
        return s

    base, head = side("base", 10e-3, 0), side("head", 11e-3, 1)
    [by_min], _ = pr.compare_sides(base, head, 0.05, stat="min")
    assert by_min["verdict"] == "slower" and by_min["ratio"] == pytest.approx(1.1)
    [by_median], _ = pr.compare_sides(base, head, 0.05, stat="median")
    assert by_median["ci_high"] - by_median["ci_low"] > by_min["ci_high"] - by_min["ci_low"]


# ------------------------------------------------------------------ kernel suite grid


def test_kernel_suite_times_the_layer_backward_on_every_grid(monkeypatch):
    """Every grid has a backward_fused case wherever it has a headline forward at N=2048 (two
    products per call), and such a case times every fused variant, the separate pair, dense
    torch and dispatch."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "bench" / "suite"))
    import bench_kernels
    import grid

    from sparselab import kernels
    from sparselab.dispatch import planner

    for name in grid.GRIDS:
        cases = grid.cases(name)
        shapes = {(c.out, c.inp) for c in cases if c.headline and c.op == "spmm_fwd" and c.n == grid.HEADLINE_N}
        assert shapes, name
        for out, inp in shapes:
            key = (out, inp, grid.HEADLINE_SPARSITY, grid.HEADLINE_N)
            back = [c for c in cases if (c.out, c.inp, c.sparsity, c.n) == key and c.op == grid.BACKWARD]
            fwd = [c for c in cases if (c.out, c.inp, c.sparsity, c.n) == key and c.op == "spmm_fwd"]
            assert len(back) == len(fwd) == 1, (name, out, inp)
            assert back[0].headline and back[0].gflops == 2 * fwd[0].gflops
    impls = bench_kernels._impls(grid.BACKWARD)
    assert [n for k, n in impls if k == "variant"] == [v.name for v in kernels.variants(grid.BACKWARD)] + [
        planner.SEPARATE
    ]
    assert ("baseline", "dense_torch") in impls and impls[-1] == ("dispatch", "dispatch")


def test_the_bench_extra_brings_every_build_requirement():
    """`sparselab-bench pr` builds the base without build isolation, so an install made by the
    README's command (``.[test,bench]``) must hold every [build-system] requirement."""
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    doc = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())

    def name(req: str) -> str:
        return req.split(">")[0].split("=")[0].split("<")[0].strip().lower()

    bench_extra = {name(r) for r in doc["project"]["optional-dependencies"]["bench"]}
    needed = {name(r) for r in doc["build-system"]["requires"]} | {"cmake"}
    assert needed <= bench_extra, needed - bench_extra


def test_pr_build_without_the_build_tools_says_which_and_how(tmp_path, monkeypatch):
    monkeypatch.setattr(pr, "missing_build_tools", lambda: ["scikit-build-core"])
    with pytest.raises(BenchDataError, match=r"scikit-build-core.*\.\[bench\]"):
        pr.build(tmp_path, "0" * 40, tmp_path / "builds")
    assert not (tmp_path / "builds").exists()  # refused before touching anything


# ------------------------------------------------------------------ a baseline needs a quiet machine


@pytest.mark.skipif(not Path("/proc/loadavg").exists(), reason="needs Linux /proc")
def test_a_process_beside_the_suite_is_seen_by_the_run_watch():
    from sparselab_bench import quiet

    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        suite = subprocess.Popen(["sleep", "1.2"])  # stands in for the benchmark process
        watch = quiet.RunWatch(suite.pid).start()
        suite.wait()
        watch.stop()
    finally:
        hog.kill()
        hog.wait()
    assert watch.samples >= 3 and watch.busy_fraction > 0.5
    assert "wanted a CPU" in quiet.verdict(True, watch, True)


def test_baseline_verdict_needs_quiet_before_during_and_after():
    from sparselab_bench import quiet

    class Watch:
        samples, busy_fraction = 100, 0.0

    assert quiet.verdict(True, Watch(), True) is None
    assert "started" in quiet.verdict(False, Watch(), True)
    assert "ended" in quiet.verdict(True, Watch(), False)
    Watch.busy_fraction = quiet.BUSY_FRACTION + 0.01
    assert "wanted a CPU" in quiet.verdict(True, Watch(), True)


def test_save_baseline_on_a_busy_machine_is_refused_before_running(repo, monkeypatch, capsys):
    from sparselab_bench import quiet

    (repo / "bench" / "suite").mkdir(parents=True)
    (repo / "bench" / "suite" / "bench_kernels.py").write_text("def test_k(): pass\n")
    monkeypatch.setattr(quiet, "quiet_look", lambda seconds=1.0: False)
    monkeypatch.setattr(quiet, "RunWatch", lambda *a, **k: pytest.fail("the suite must not run"))
    code, out, err = run_cli(capsys, "run", "--quick", "--save-baseline")
    assert code == 2 and "not saving a baseline" in err
    assert not storage.baseline_path(repo, SLUG).exists() and not storage.runs(repo, SLUG)


def test_a_baseline_of_several_runs_keeps_the_middle_run_and_every_runs_median(tmp_path):
    from sparselab_bench import baseline

    runs = [
        write_results(tmp_path / f"run{i}.json", [bench("test_k[a]", m, seed=i), bench("test_k[b]", 1e-3, seed=9 + i)])
        for i, m in enumerate((3e-3, 1e-3, 2e-3))
    ]
    merged = baseline.merge(runs)
    a = next(b for b in merged["benchmarks"] if b["fullname"].endswith("[a]"))
    assert a["stats"]["median"] == pytest.approx(2e-3)  # the middle run's rounds
    assert a["extra_info"][baseline.RUN_MEDIANS] == pytest.approx([3e-3, 1e-3, 2e-3])
    assert baseline.band(a["extra_info"][baseline.RUN_MEDIANS], 2e-3) == pytest.approx((0.5, 1.5))


def test_compare_calls_a_head_within_the_baselines_own_runs_the_same(tmp_path):
    """Two quiet runs of one build differed up to 2x on the development VM: a head inside the
    speeds the baseline saw between its runs is no change; beyond them (and the threshold) it is."""
    from sparselab_bench import baseline
    from sparselab_bench.compare import compare_files

    runs = [
        write_results(tmp_path / f"run{i}.json", [bench("test_k[a]", m, seed=i)])
        for i, m in enumerate((1e-3, 1.4e-3, 1.2e-3))
    ]
    base = tmp_path / "baseline.json"
    base.write_text(json.dumps(baseline.merge(runs)))
    # Base median 1.2 ms (the middle run); its runs span 0.833x-1.167x of it; threshold 5%.
    for head_median, want in ((1.4e-3, "same"), (1.6e-3, "slower"), (1.0e-3, "same"), (0.9e-3, "faster")):
        head = write_results(tmp_path / "head.json", [bench("test_k[a]", head_median, seed=7)])
        row = compare_files(base, head).rows.iloc[0]
        assert row["verdict"] == want, (head_median, row.to_dict())
    # The same head against one run alone (no band) is called slower.
    head = write_results(tmp_path / "head.json", [bench("test_k[a]", 1.4e-3, seed=7)])
    assert compare_files(runs[2], head).rows.iloc[0]["verdict"] == "slower"


def test_a_reader_closing_the_pipe_ends_the_cli_quietly(tmp_path):
    """`sparselab-bench compare ... | head -n 1` (the CI smoke does this): the rest of a long
    output meets a closed pipe, which must end the command without a traceback."""
    script = textwrap.dedent(
        """
        import sys
        from sparselab_bench import cli
        def long_output(args):
            for k in range(200000):
                print(f"row {k} of a long comparison table")
            return 0
        cli.COMMANDS["compare"] = long_output
        sys.exit(cli.main(["compare"]))
        """
    )
    src = tmp_path / "long_output.py"
    src.write_text(script)
    bench_dir = Path(__file__).resolve().parents[2] / "bench"
    done = subprocess.run(
        f"PYTHONPATH={bench_dir} {sys.executable} {src} | head -n 1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout == "row 0 of a long comparison table\n"
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
