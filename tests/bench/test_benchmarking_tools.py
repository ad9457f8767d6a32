"""Tests for sparselab_bench: loading, report, compare, probes, CLI errors.

Input files are synthetic but shaped like pytest-benchmark 5.x --benchmark-json output.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pandas", reason="the [bench] extra (pandas, matplotlib) is not installed")
pytest.importorskip("matplotlib", reason="the [bench] extra (pandas, matplotlib) is not installed")

from sparselab_bench import probes  # noqa: E402
from sparselab_bench.cli import main  # noqa: E402
from sparselab_bench.machine import cpu_slug, machine_info, pytest_benchmark_machine_info_hook  # noqa: E402
from sparselab_bench.report import crossovers  # noqa: E402
from sparselab_bench.results import BenchDataError, load_results, read_bench_file  # noqa: E402

XEON = "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz"
XEON_FLAGS = ["avx", "avx2", "avx512f", "avx512bw", "fma", "sse4_2"]


def bench(
    name: str,
    median: float,
    extra: dict | None = None,
    rounds: int = 30,
    spread: float = 0.01,
    seed: int = 0,
    with_data: bool = True,
) -> dict:
    """One pytest-benchmark entry whose stats are computed from generated rounds."""
    data = median * (1 + spread * np.random.default_rng(seed).standard_normal(rounds))
    data += median - np.median(data)  # make the median exact so tests can assert numbers
    q1, q3 = np.percentile(data, [25, 75])
    iqr = q3 - q1
    stats = {
        "min": data.min(),
        "max": data.max(),
        "mean": data.mean(),
        "stddev": data.std(ddof=1),
        "rounds": rounds,
        "median": median,
        "iqr": iqr,
        "q1": q1,
        "q3": q3,
        "iqr_outliers": 0,
        "stddev_outliers": 1,
        "outliers": "1;0",
        "ld15iqr": data.min(),
        "hd15iqr": data.max(),
        "ops": 1 / data.mean(),
        "total": data.sum(),
        "iterations": 1,
    }
    stats = {k: v.item() if isinstance(v, np.generic) else v for k, v in stats.items()}
    if with_data:
        stats["data"] = data.tolist()
    param = name.partition("[")[2].rstrip("]")
    return {
        "group": (extra or {}).get("op"),
        "name": name,
        "fullname": f"bench/test_kernels.py::{name}",
        "params": {"case": param} if param else None,
        "param": param or None,
        "extra_info": extra or {},
        "options": {
            "disable_gc": False,
            "timer": "perf_counter",
            "min_rounds": 5,
            "max_time": 1.0,
            "min_time": 5e-06,
            "warmup": False,
        },
        "stats": stats,
    }


def write_results(
    path: Path,
    benchmarks: list[dict],
    brand: str = XEON,
    flags: list[str] = XEON_FLAGS,
    threads: int = 2,
    hook: bool = True,
) -> Path:
    """A pytest-benchmark JSON file; hook=True adds what bench/suite/conftest.py adds."""
    machine = {
        "node": "bench-host",
        "processor": "",
        "machine": "x86_64",
        "python_compiler": "GCC 12.2.0",
        "python_implementation": "CPython",
        "python_implementation_version": "3.11.7",
        "python_version": "3.11.7",
        "python_build": ["main", "May  9 2026 07:35:25"],
        "release": "6.1.0",
        "system": "Linux",
        "cpu": {
            "arch": "X86_64",
            "bits": 64,
            "count": 2,
            "brand_raw": brand,
            "flags": flags,
            "l2_cache_size": 2 * 2**20,
            "l3_cache_size": 54 * 2**20,
        },
    }
    if hook:
        machine["sparselab"] = {
            "brand": brand,
            "flags": sorted(flags),
            "arch": "X86_64",
            "cpu_count": 2,
            "affinity_count": 2,
            "l2_cache_size": 2 * 2**20,
            "l3_cache_size": 54 * 2**20,
            "torch_num_threads": threads,
            "torch_version": "2.13.0+cpu",
            "sparselab_version": "0.1.0",
            "git_commit": "0123abcd",
            "git_dirty": False,
            "cpu_slug": cpu_slug(brand, flags),
        }
    path.write_text(
        json.dumps(
            {
                "machine_info": machine,
                "commit_info": {
                    "id": "0123abcd",
                    "time": None,
                    "author_time": None,
                    "dirty": False,
                    "project": "sparselab",
                    "branch": "main",
                },
                "benchmarks": benchmarks,
                "datetime": "2026-11-22T00:14:31.714871+00:00",
                "version": "5.2.3",
            }
        )
    )
    return path


def kernel_suite(scale: float = 1.0, tuned: bool = True) -> list[dict]:
    """Benchmarks like the kernel suites will write: variants, dense and CSR baselines."""
    out = []
    for op in ("spmm_fwd", "spmm_dx"):
        for o, i in ((512, 512), (1024, 1024)):
            for n in (1, 64):
                dense_flops = 2 * o * i * n
                for baseline, rate in (("dense_torch", 60e9), ("dense_mkldnn", 50e9)):
                    case = f"{op}-{o}x{i}-{n}-{baseline}"
                    extra = {
                        "op": op,
                        "out": o,
                        "in": i,
                        "n": n,
                        "sparsity": 0.0,
                        "baseline": baseline,
                        "variant": None,
                        "gflops": dense_flops / 1e9,
                        "bytes_moved": 4 * (o * i + 2 * i * n),
                    }
                    out.append(bench(f"test_dense[{case}]", scale * dense_flops / rate, extra))
                for s in (0.5, 0.9, 0.99):
                    nnz = (1 - s) * o * i
                    for variant, rate in (("scalar", 2e9), ("avx2", 8e9), ("avx512", 12e9)):
                        case = f"{op}-{o}x{i}-{n}-{s}-{variant}"
                        extra = {
                            "op": op,
                            "variant": variant,
                            "isa": variant,
                            "out": o,
                            "in": i,
                            "n": n,
                            "sparsity": s,
                            "gflops": 2 * nnz * n / 1e9,
                            "bytes_moved": 8 * nnz + 4 * (i + o) * n,
                            "baseline": None,
                        }
                        out.append(bench(f"test_spmm[{case}]", scale * 2 * nnz * n / rate, extra))
                    extra = {
                        "op": op,
                        "variant": "csr",
                        "out": o,
                        "in": i,
                        "n": n,
                        "sparsity": s,
                        "baseline": "torch_sparse_csr",
                        "gflops": 2 * nnz * n / 1e9,
                        "bytes_moved": 12 * nnz,
                    }
                    out.append(bench(f"test_csr[{op}-{o}x{i}-{n}-{s}]", scale * 2 * nnz * n / 3e9, extra))
                    if tuned:
                        extra = {
                            "op": op,
                            "variant": "auto",
                            "out": o,
                            "in": i,
                            "n": n,
                            "sparsity": s,
                            "baseline": None,
                            "tuned_variant": "avx512" if n == 64 else "avx2",
                        }
                        out.append(bench(f"test_tuned[{op}-{o}x{i}-{n}-{s}]", scale * 2 * nnz * n / 11e9, extra))
    return out


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- loading -----------------------------------------------------------------------------


def test_load_flattens_params_stats_extra_info_and_machine(tmp_path):
    path = write_results(tmp_path / "r.json", kernel_suite())
    df = load_results([path])
    assert len(df) == len(kernel_suite())
    row = df[df["name"] == "test_spmm[spmm_fwd-512x512-1-0.9-avx2]"].iloc[0]
    assert row["param_case"] == "spmm_fwd-512x512-1-0.9-avx2"
    assert (row["op"], row["variant"], row["out"], row["n"], row["sparsity"]) == ("spmm_fwd", "avx2", 512, 1, 0.9)
    assert row["gflop_s"] == pytest.approx(8.0)  # gflops per call / median: the suite's variant rate
    assert row["q1"] < row["median"] < row["q3"] and row["rounds"] == 30 and len(row["data"]) == 30
    assert row["cpu_slug"] == cpu_slug(XEON, XEON_FLAGS) and row["brand"] == XEON


def test_files_without_the_hook_get_the_same_cpu_slug(tmp_path):
    with_hook = read_bench_file(write_results(tmp_path / "a.json", [bench("t", 1e-3)]))
    without = read_bench_file(write_results(tmp_path / "b.json", [bench("t", 1e-3)], hook=False))
    assert without.machine["cpu_slug"] == with_hook.machine["cpu_slug"]


def test_cpu_slug_separates_same_brand_with_different_flags():
    assert cpu_slug("AMD EPYC", ["avx2"]) != cpu_slug("AMD EPYC", ["avx2", "avx512f"])
    assert cpu_slug("AMD EPYC", ["b", "a"]) == cpu_slug("AMD EPYC", ["a", "b"])
    assert cpu_slug("Intel(R) Xeon(R) @ 2.9GHz", []).startswith("intel-r-xeon-r-2-9ghz-")


def test_machine_info_describes_this_machine_and_the_hook_adds_it():
    info = machine_info()
    assert info["cpu_slug"] == cpu_slug(info["brand"], info["flags"])
    assert info["flags"] == sorted(info["flags"]) and info["torch_num_threads"] >= 1
    pytest_benchmark_info = {"cpu": {}}
    pytest_benchmark_machine_info_hook(pytest_benchmark_info)
    assert pytest_benchmark_info["sparselab"] == info
    json.dumps(pytest_benchmark_info)  # it goes into the pytest-benchmark JSON file


# --- malformed input -----------------------------------------------------------------------


def _valid(tmp_path) -> Path:
    return write_results(tmp_path / "ok.json", [bench("t", 1e-3)])


@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"machine_info": {}}), "no 'benchmarks' list"),
        (json.dumps({"benchmarks": [bench("t", 1e-3)]}), "no 'machine_info'"),
        (json.dumps({"machine_info": {}, "benchmarks": []}), "contains no benchmarks"),
        (json.dumps({"machine_info": {}, "benchmarks": [{"name": "t"}]}), "'t' has no stats"),
        (json.dumps({"machine_info": {}, "benchmarks": [{"name": "t", "stats": {"min": 1}}]}), "stats lack"),
        (json.dumps([1, 2]), "no 'benchmarks' list"),
    ],
)
def test_malformed_files_raise_bench_data_error_naming_the_file(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(BenchDataError, match=message) as error:
        read_bench_file(path)
    assert str(path) in str(error.value)


def test_extra_info_may_not_overwrite_loader_columns(tmp_path):
    path = write_results(tmp_path / "r.json", [bench("t", 1e-3, {"median": 5})])
    with pytest.raises(BenchDataError, match="reserved column"):
        read_bench_file(path)


@pytest.mark.parametrize("command", ["report", "compare"])
@pytest.mark.parametrize(
    "content, message",
    [
        ("{not json", "not valid JSON"),
        (json.dumps({"machine_info": {}, "benchmarks": []}), "contains no benchmarks"),
    ],
)
def test_cli_reports_bad_files_with_exit_2_and_no_traceback(tmp_path, capsys, command, content, message):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    args = (
        ["report", bad, "--no-probe", "--out", tmp_path]
        if command == "report"
        else ["compare", _valid(tmp_path), bad, "--out", tmp_path]
    )
    code, out, err = run_cli(capsys, *args)
    assert code == 2
    assert err.startswith("error: ") and message in err and str(bad) in err
    assert "Traceback" not in err + out


def test_cli_missing_file_exit_2(tmp_path, capsys):
    code, _, err = run_cli(capsys, "report", tmp_path / "nope.json", "--no-probe", "--out", tmp_path)
    assert code == 2 and "nope.json: file not found" in err


# --- report ----------------------------------------------------------------------------------


def test_report_writes_markdown_with_expected_numbers(tmp_path, capsys):
    extra = {"op": "spmm_fwd", "out": 1024, "in": 512, "n": 8, "sparsity": 0.9, "gflops": 0.01}
    results = write_results(
        tmp_path / "r.json",
        [
            bench("test_spmm[scalar]", 2e-3, {**extra, "variant": "scalar", "baseline": None}),
            bench("test_spmm[avx2]", 1e-3, {**extra, "variant": "avx2", "baseline": None}),
            bench("test_dense[torch]", 4e-3, {**extra, "variant": None, "baseline": "dense_torch"}),
            bench("test_dense[mkldnn]", 5e-3, {**extra, "variant": None, "baseline": "dense_mkldnn"}),
            bench("test_csr", 8e-3, {**extra, "variant": "csr", "baseline": "torch_sparse_csr"}),
        ],
    )
    code, out, _ = run_cli(capsys, "report", results, "--out", tmp_path / "reports", "--no-probe")
    readme = tmp_path / "reports" / cpu_slug(XEON, XEON_FLAGS) / "README.md"
    assert code == 0 and str(readme) in out
    text = readme.read_text()
    # avx2 is fastest: 0.01 GFLOP / 1 ms = 10 GFLOP/s, dense_torch 4 ms -> 4x, CSR 8 ms -> 8x.
    assert "| 1024×512 | 8 | 0.9 | avx2 | 1 ms | 10.0 | dense_torch | 4 ms | 4.00× | 8.00× |" in text
    assert XEON in text and "0123abcd" in text and "avx512f" in text


def test_report_writes_all_plots_for_a_full_suite(tmp_path, capsys):
    results = write_results(tmp_path / "r.json", kernel_suite())
    code, _, _ = run_cli(capsys, "report", results, "--out", tmp_path, "--no-probe")
    report_dir = tmp_path / cpu_slug(XEON, XEON_FLAGS)
    text = (report_dir / "README.md").read_text()
    for png in ("gflops_vs_sparsity.png", "speedup_vs_sparsity.png", "roofline.png", "tuner_choices.png"):
        assert (report_dir / png).stat().st_size > 1000
        assert f"]({png})" in text
    assert code == 0 and "Skipped" not in text
    assert "### spmm_dx" in text and "### spmm_fwd" in text
    # avx512 (12 GFLOP/s on nnz) vs dense_torch (60 GFLOP/s): speedup 0.2 / (1 - sparsity),
    # CSR (3 GFLOP/s on nnz) 4x slower than avx512.
    assert "| 1024×1024 | 64 | 0.99 | avx512 | 111.8 µs | 12.0 | dense_torch | 2.237 ms | 20.00× | 4.00× |" in text
    assert "| 512×512 | 1 | 0.5 | avx512 | 21.85 µs | 12.0 | dense_torch | 8.738 µs | 0.40× | 4.00× |" in text
    # 0.4x at 0.5 and 2x at 0.9: log-interpolated crossover 0.5 + 0.4 * ln(2.5) / ln(5).
    assert "spmm_fwd 1024×1024 N=64: speedup = 1 at sparsity ≈ 0.728" in text
    assert "| spmm_fwd 512×512 N=64 | avx512 | avx512 | avx512 |" in text  # tuner map table
    assert "No probe data" in text


def test_report_skips_plots_with_a_note_when_columns_are_missing(tmp_path, capsys):
    results = write_results(tmp_path / "r.json", [bench("test_plain", 1e-3)])
    code, _, _ = run_cli(capsys, "report", results, "--out", tmp_path, "--no-probe")
    report_dir = tmp_path / cpu_slug(XEON, XEON_FLAGS)
    text = (report_dir / "README.md").read_text()
    assert code == 0 and text.count("_Skipped:") == 5  # table + 4 plots
    assert "rows lack tuned_variant" in text
    assert not list(report_dir.glob("*.png"))


def test_report_splits_files_from_different_cpus(tmp_path, capsys):
    a = write_results(tmp_path / "a.json", [bench("t", 1e-3)])
    b = write_results(tmp_path / "b.json", [bench("t", 1e-3)], brand="AMD EPYC", flags=["avx2"])
    code, _, _ = run_cli(capsys, "report", a, b, "--out", tmp_path / "out", "--no-probe")
    assert code == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        [cpu_slug(XEON, XEON_FLAGS), cpu_slug("AMD EPYC", ["avx2"])]
    )


def _roofline_rows() -> list[dict]:
    extra = {"op": "spmm_fwd", "variant": "avx2", "baseline": None, "gflops": 0.01}
    return [
        bench("test_a", 1e-3, {**extra, "bytes_moved": 10**6}),
        bench("test_b", 1e-3, {**extra, "bytes_moved": 10**8}),
    ]


def _this_cpu_results(tmp_path: Path) -> Path:
    here = machine_info()
    return write_results(tmp_path / "r.json", _roofline_rows(), brand=here["brand"], flags=here["flags"], threads=2)


def test_report_probe_uses_cached_probes_and_draws_the_roof(tmp_path, capsys):
    results = _this_cpu_results(tmp_path)
    cache = tmp_path / "out" / machine_info()["cpu_slug"] / "probes.json"
    cache.parent.mkdir(parents=True)
    cached = {
        "threads": 2,
        "bandwidth_gbs": 20.0,
        "bandwidth_method": "cached copy test",
        "peak_gflops": 100.0,
        "peak_method": "cached gemm test",
    }
    cache.write_text(json.dumps(cached))
    code, _, _ = run_cli(capsys, "report", results, "--out", tmp_path / "out", "--probe")
    text = (cache.parent / "README.md").read_text()
    assert code == 0 and json.loads(cache.read_text()) == cached  # not re-measured
    assert "20.0 GB/s (cached copy test)" in text and "100.0 GFLOP/s (cached gemm test)" in text
    assert "No probe data" not in text and (cache.parent / "roofline.png").stat().st_size > 1000


def test_report_probe_does_not_measure_results_from_another_cpu(tmp_path, capsys):
    results = write_results(tmp_path / "r.json", _roofline_rows())
    code, _, _ = run_cli(capsys, "report", results, "--out", tmp_path, "--probe")
    report_dir = tmp_path / cpu_slug(XEON, XEON_FLAGS)
    assert code == 0 and not (report_dir / "probes.json").exists()
    assert "another CPU" in (report_dir / "README.md").read_text()


def test_crossovers_interpolate_where_speedup_meets_one():
    assert crossovers([0.5, 0.9, 0.99], [0.5, 2.0, 5.0]) == pytest.approx([0.7])  # midway in log space
    assert crossovers([0.5, 0.9], [2.0, 3.0]) == []
    assert crossovers([0.5, 0.9], [1.0, 3.0]) == [0.5]


# --- probes ------------------------------------------------------------------------------------


def test_probes_fall_back_to_dense_gemm_and_say_so(monkeypatch):
    monkeypatch.setattr(probes, "fma_peak", lambda threads, seconds: None)
    result = probes.run_probes(threads=1, seconds=0.05, nbytes=8 * 2**20, gemm_size=128)
    assert result["threads"] == 1
    assert result["bandwidth_gbs"] > 0 and result["peak_gflops"] > 0
    assert "read+write" in result["bandwidth_method"]
    assert result["peak_method"].startswith("peak = best dense GEMM measured, not FMA peak")


def test_probes_prefer_the_fma_peak_program(monkeypatch):
    calls = []
    measured = {"gflops": 123.0, "isa": "avx2", "threads": 2, "method": "register-only FMA chains (...)"}
    monkeypatch.setattr(probes, "fma_peak", lambda t, s: calls.append((t, s)) or measured)
    result = probes.peak_gflops(threads=2, seconds=0.5)
    assert result["peak_gflops"] == 123.0 and calls == [(2, 0.5)]
    assert result["peak_method"] == "bench/micro/fma_peak.cpp (threads=2, seconds=0.5): register-only FMA chains (...)"


def test_probes_without_a_compiler_fall_back(monkeypatch):
    """No g++ (or no source): no native figure, and no error."""
    monkeypatch.setattr(probes, "_fma_peak_binary", lambda: None)
    assert probes.fma_peak(1, 0.05) is None


# --- compare -----------------------------------------------------------------------------------


def _pair(tmp_path, base_benches, head_benches, **head_machine):
    return (
        write_results(tmp_path / "base.json", base_benches),
        write_results(tmp_path / "head.json", head_benches, **head_machine),
    )


def test_compare_flags_a_clear_regression(tmp_path, capsys):
    base, head = _pair(
        tmp_path,
        [bench("t_slow", 1e-3, seed=1), bench("t_same", 2e-3, seed=2)],
        [bench("t_slow", 1.3e-3, seed=3), bench("t_same", 2e-3, seed=4)],
    )
    out_dir = tmp_path / "cmp"
    code, out, _ = run_cli(capsys, "compare", base, head, "--out", out_dir)
    assert code == 0  # regressions only fail with --fail-on-regression
    assert "| `bench/test_kernels.py::t_slow` | 1 ms | 1.3 ms | 1.300 |" in out
    assert "bootstrap | - | **slower** |" in out
    assert "**0 faster, 1 slower, 1 same**" in out
    assert (out_dir / "compare.md").read_text() in out and (out_dir / "compare.png").stat().st_size > 1000
    code, _, _ = run_cli(capsys, "compare", base, head, "--out", out_dir, "--fail-on-regression")
    assert code == 1


def test_compare_does_not_flag_noise(tmp_path, capsys):
    # 8% slower median but 30% round-to-round noise over 10 rounds: the interval spans 1.
    base, head = _pair(
        tmp_path,
        [bench("t", 1e-3, rounds=10, spread=0.3, seed=1)],
        [bench("t", 1.08e-3, rounds=10, spread=0.3, seed=2)],
    )
    code, out, _ = run_cli(capsys, "compare", base, head, "--out", tmp_path, "--fail-on-regression")
    assert code == 0 and "| 1.080 |" in out and "| same |" in out and "slower |" not in out


def test_compare_flags_improvements_and_uses_quartiles_without_round_data(tmp_path, capsys):
    base, head = _pair(tmp_path, [bench("t", 1e-3, with_data=False)], [bench("t", 0.5e-3, with_data=False)])
    code, out, _ = run_cli(capsys, "compare", base, head, "--out", tmp_path)
    assert code == 0 and "quartiles | - | **faster** |" in out


def test_compare_refuses_different_cpus_unless_forced(tmp_path, capsys):
    base, head = _pair(tmp_path, [bench("t", 1e-3)], [bench("t", 1e-3)], brand="AMD EPYC", flags=["avx2"])
    code, out, err = run_cli(capsys, "compare", base, head, "--out", tmp_path)
    assert code == 2 and "different CPUs" in err and "--force" in err and "Traceback" not in err + out
    code, out, _ = run_cli(capsys, "compare", base, head, "--out", tmp_path, "--force")
    assert code == 0 and "Warning: different CPUs" in out


def test_compare_refuses_same_brand_with_different_isa_flags(tmp_path, capsys):
    base, head = _pair(tmp_path, [bench("t", 1e-3)], [bench("t", 1e-3)], flags=["avx2"])
    code, _, err = run_cli(capsys, "compare", base, head, "--out", tmp_path)
    assert code == 2 and "different CPUs" in err


def test_compare_warns_when_thread_counts_differ(tmp_path, capsys):
    base, head = _pair(tmp_path, [bench("t", 1e-3)], [bench("t", 1e-3)], threads=4)
    code, out, _ = run_cli(capsys, "compare", base, head, "--out", tmp_path)
    assert code == 0 and "torch threads differ (base 2, head 4)" in out


def test_compare_needs_a_common_benchmark(tmp_path, capsys):
    base, head = _pair(tmp_path, [bench("a", 1e-3)], [bench("b", 1e-3)])
    code, _, err = run_cli(capsys, "compare", base, head, "--out", tmp_path)
    assert code == 2 and "no benchmark in common" in err
