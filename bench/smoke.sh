#!/usr/bin/env bash
# Benchmark smoke test, run by CI after the tests (.ci/run): every suite once on the quick grid
# (`pytest bench/suite --quick`), then the report, summary and compare tooling on its output, and
# every study of bench/studies/ as far as `--help` (it imports and parses its options), so none
# of them can rot unseen. Timing is never asserted: this exits non-zero only on a real error (a
# suite that crashes, a tool that fails, a report file that is missing, a study that no longer
# imports). About 2-3 minutes on 2 cores.
#
#   bash bench/smoke.sh            # SMOKE_KEEP=1 keeps the temp dir and prints its path
set -euo pipefail
cd "$(dirname "$0")/.."
# `pytest` and `sparselab-bench`, not `python -m ...`: from the repo root the latter would
# import the source tree (without its compiled _C) instead of the installed package.

tmp="$(mktemp -d "${TMPDIR:-/tmp}/sparselab-smoke.XXXXXX")"
if [ "${SMOKE_KEEP:-0}" = 1 ]; then
  echo "smoke: keeping $tmp"
else
  trap 'rm -rf "$tmp"' EXIT
fi
# Tuning triggered by the dispatch rows stays in the temp dir unless CI already chose one.
export SPARSELAB_CACHE_DIR="${SPARSELAB_CACHE_DIR:-$tmp/cache}"

start=$SECONDS
json="$tmp/quick.json"
echo "smoke: pytest bench/suite --quick (log: $tmp/pytest.log)"
set +e
pytest bench/suite --quick -q -p no:cacheprovider \
  --benchmark-disable-gc --benchmark-max-time=0.2 --benchmark-min-rounds=3 \
  --benchmark-columns=median,rounds --benchmark-sort=fullname \
  --benchmark-json="$json" >"$tmp/pytest.log" 2>&1
status=$?
set -e
# Reworded on purpose: CI reads pytest's closing line as the test count, and that is .ci/run's
# own test run, not this smoke run of benchmarks.
summary="$(tail -n 1 "$tmp/pytest.log" | sed -e 's/=//g' -e 's/ passed/ benchmarks ran/' -e 's/ skipped/ not run (see reasons in the log)/')"
echo "smoke: ${summary}"
if [ "$status" -ne 0 ]; then
  echo "smoke: FAILED: the benchmark suites exited with status $status; log follows" >&2
  grep -v '^SKIPPED' "$tmp/pytest.log" | tail -n 80 >&2
  exit 1
fi
echo "smoke: suites done in $((SECONDS - start)) s"

sparselab-bench report "$json" --out "$tmp/report" --no-probe
report_dir="$(find "$tmp/report" -mindepth 1 -maxdepth 1 -type d | head -n 1)"
missing=0
for f in README.md gflops_vs_sparsity.png speedup_vs_sparsity.png roofline.png tuner_choices.png; do
  if [ ! -s "$report_dir/$f" ]; then
    echo "smoke: FAILED: report file $f missing or empty in ${report_dir:-$tmp/report}" >&2
    missing=1
  fi
done
[ "$missing" -eq 0 ] || exit 1
if grep -q "_Skipped:" "$report_dir/README.md"; then
  echo "smoke: FAILED: a report section was skipped (the suites' extra_info no longer fits the report):" >&2
  grep -B2 "_Skipped:" "$report_dir/README.md" >&2
  exit 1
fi

sparselab-bench summarize "$json" --out "$tmp/summary.md"
grep -q "Headline" "$tmp/summary.md"
sparselab-bench --version >/dev/null
# Against this CPU's committed baseline when there is one (timing never fails the smoke run),
# else the file against itself, so the compare tooling runs either way.
# From the temp dir: at the repo root `python -c` would import the checkout's sparselab/ (no _C).
slug="$(cd "$tmp" && python -c 'from sparselab_bench.storage import this_cpu_slug; print(this_cpu_slug())')"
base="bench/baselines/$slug.json"
if [ -f "$base" ]; then
  echo "smoke: comparing with this CPU's baseline $base"
  sparselab-bench compare "$base" "$json" --out "$tmp/compare" | grep -E "faster|slower" | head -n 1 || true
else
  sparselab-bench compare "$json" "$json" --out "$tmp/compare" >/dev/null
fi
[ -s "$tmp/compare/compare.md" ] && [ -s "$tmp/compare/compare.png" ]

# The studies are run by hand, and rarely: here each one imports and parses its options (one
# process: torch is imported once).
python - bench/studies/*.py <<'EOF_STUDIES'
import contextlib, io, os, runpy, sys, traceback

# As `python bench/studies/x.py` would, put the study's folder first on sys.path, not the
# current directory: the checkout's sparselab/ (no built extension) must not shadow the install.
sys.path[0] = os.path.abspath("bench/studies")
studies, failed = sys.argv[1:], []
for path in studies:
    sys.argv = [path, "--help"]
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        if e.code not in (0, None):
            failed.append(f"{path}: exit {e.code}")
    except BaseException:
        failed.append(f"{path}:\n{traceback.format_exc()}")
    else:
        failed.append(f"{path}: --help ran the study instead of printing its usage")
for f in failed:
    print(f"smoke: FAILED: {f}", file=sys.stderr)
if failed:
    sys.exit(1)
print(f"smoke: {len(studies)} studies in bench/studies import and parse --help")
EOF_STUDIES

echo "smoke: OK in $((SECONDS - start)) s (report: $report_dir)"
