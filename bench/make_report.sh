#!/usr/bin/env bash
# Reproduce the committed report of this CPU: reports/<cpu-slug>/
#
#   bash bench/make_report.sh [OUT_ROOT] [GRID]     # defaults: reports moderate
#
# 1. kernel suite (bench/suite/bench_kernels.py) on the GRID of bench/suite/grid.py (moderate: the issue-2
#    headline plus sweeps; full: everything) and the cached-dispatch overhead benchmarks of
#    bench/suite/bench_dispatch.py, into one pytest-benchmark JSON, with a fresh tuning cache;
# 2. `sparselab-bench report` with probes (memory bandwidth, peak GFLOP/s for the roofline);
# 3. `sparselab-bench summarize`: headline ratios and tuned-dispatch-vs-best-fixed tables (SUMMARY.md);
# 4. a "Run conditions" section (threads, load average sampled during the run) appended to the
#    report's README.md, because absolute times on a shared machine are distorted by the load.
#
# Runs at torch's default thread count (2 on the project's machines); set OMP_NUM_THREADS or
# SPARSELAB_BENCH_THREADS to change it. Keeps the JSON next to the report (results.json).
set -euo pipefail
cd "$(dirname "$0")/.."
out_root="${1:-reports}"
grid="${2:-moderate}"

work="$(mktemp -d "${TMPDIR:-/tmp}/sparselab-report.XXXXXX")"
sampler=""
cleanup() {
  if [ -n "$sampler" ]; then kill "$sampler" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
export SPARSELAB_CACHE_DIR="$work/cache"
# glibc's settings for large tensors (README, "Large tensors and glibc's malloc"): with its
# defaults, whether a call's output (21-32 MB at N = 2048) is mapped and faulted in afresh on every
# call depends on what the long benchmark process freed before, and faulting in an output costs
# about as much as a fast kernel computing it: the suite would time glibc, not the kernels.
export MALLOC_MMAP_THRESHOLD_="${MALLOC_MMAP_THRESHOLD_:-4294967296}"
export MALLOC_TRIM_THRESHOLD_="${MALLOC_TRIM_THRESHOLD_:-4294967296}"
if [ -n "${SPARSELAB_BENCH_THREADS:-}" ]; then export OMP_NUM_THREADS="$SPARSELAB_BENCH_THREADS"; fi

# Load average every 20 s while the benchmarks run (a shared machine distorts absolute times).
cat /proc/loadavg >"$work/load.txt" 2>/dev/null || true
( while sleep 20; do cat /proc/loadavg >>"$work/load.txt" 2>/dev/null || true; done ) &
sampler=$!

start=$SECONDS
json="$work/results.json"
echo "make_report: kernel suite (--grid $grid) + dispatch overhead; log $work/pytest.log"
pytest bench/suite/bench_kernels.py bench/suite/bench_dispatch.py --grid "$grid" -q -p no:cacheprovider \
  --benchmark-disable-gc --benchmark-max-time=0.5 --benchmark-columns=median,rounds \
  --benchmark-sort=fullname --benchmark-json="$json" >"$work/pytest.log" 2>&1 || {
  echo "make_report: the benchmarks failed; log follows" >&2
  grep -v '^SKIPPED' "$work/pytest.log" | tail -n 80 >&2
  exit 1
}
elapsed=$((SECONDS - start))
kill "$sampler" 2>/dev/null || true
sampler=""
tail -n 1 "$work/pytest.log"

report_readme="$(sparselab-bench report "$json" --out "$out_root" --probe | sed -n 's/^wrote //p' | head -n 1)"
dir="$(dirname "$report_readme")"
# Compact (pytest-benchmark indents its JSON): the same content at about a third of the size.
python -c 'import json, sys; json.dump(json.load(open(sys.argv[1])), open(sys.argv[2], "w"), separators=(",", ":"))' \
  "$json" "$dir/results.json"
sparselab-bench summarize "$json" --out "$dir/SUMMARY.md"

threads="$(python -c 'import torch; print(torch.get_num_threads())')"
load="$(awk '{print $1}' "$work/load.txt" | sort -n | awk '{a[NR]=$1; s+=$1} END {if (NR) printf "min %.1f, median %.1f, max %.1f over %d samples", a[1], a[int((NR+1)/2)], a[NR], NR}')"
cores="$(nproc)"
summary_line="$(tail -n 1 "$work/pytest.log")"
cat >>"$report_readme" <<EOF

## Run conditions

- Produced by \`bash bench/make_report.sh $out_root $grid\` on $(date -u +%Y-%m-%d) in ${elapsed} s
  (pytest: ${summary_line}); torch threads: ${threads} of ${cores} logical cores.
- glibc malloc: \`MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_} MALLOC_TRIM_THRESHOLD_=${MALLOC_TRIM_THRESHOLD_}\`
  (large outputs are reused, not faulted in on every call; see the README).
- 1-minute load average while the benchmarks ran (sampled every 20 s): ${load:-not available}.
  A load above the thread count means other processes competed for the cores: absolute times
  and GFLOP/s are then pessimistic and noisy, and so are the probes (bandwidth, peak). Prefer the
  **ratios** of implementations timed back to back on the same data (dense/sparse columns here,
  [SUMMARY.md](SUMMARY.md)), but at a high load even those are noisy: SUMMARY.md's "noise
  reference" (one kernel timed twice, as a fixed variant and through dispatch) shows how much.
  Regenerate on a quiet machine (\`bash bench/make_report.sh\`) before quoting absolute numbers.
- Headline ratios and tuned dispatch vs the best fixed variant: [SUMMARY.md](SUMMARY.md).
  Raw results: \`results.json\` (pytest-benchmark; \`sparselab-bench compare\` takes it as a base).
EOF
echo "make_report: wrote $dir (README.md, SUMMARY.md, plots, probes.json, results.json) in ${elapsed} s"
