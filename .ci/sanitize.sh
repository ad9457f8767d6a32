#!/usr/bin/env bash
# ASan + UBSan run: builds a sanitized copy of the extension (CMake option
# SPARSELAB_SANITIZE) into its own venv and build directory, then runs the
# bad-input, state/format and kernel-correctness tests under it. Any sanitizer
# report fails the run: ASan stops at its first error and UBSan is built with
# -fno-sanitize-recover, so the test process dies, and every report (test
# subprocesses included) is written to a file that this script prints.
#
#   bash .ci/sanitize.sh            (from .ci/run, after the normal tests)
# Env: SANITIZE_DIR (default: a fresh temporary directory), PYTHON (default python).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python}"
WORK="${SANITIZE_DIR:-$(mktemp -d)}"
mkdir -p "$WORK"

start=$(date +%s)
"$PY" -m venv --system-site-packages "$WORK/venv"
# The packages of the interpreter that runs this script (torch among them), also when it is itself a
# venv's, whose packages --system-site-packages does not reach.
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$SITE" > "$("$WORK/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/parent-site.pth"
# --no-deps: everything else comes from the system site-packages of the normal install.
# Editable (-e): its import hook in the venv takes precedence over any sparselab the
# system site-packages hold, editable installs included. Unstripped: reports name functions.
# The build backend comes from the system site-packages when the normal install left it
# there, else pip fetches it into an isolated build environment (as the normal install did).
isolation=(--no-build-isolation)
"$WORK/venv/bin/python" -c "import scikit_build_core, pybind11" 2>/dev/null || isolation=()
SPARSELAB_SANITIZE=ON "$WORK/venv/bin/python" -m pip install --quiet "${isolation[@]}" --no-deps \
  -C build-dir="$WORK/build" -C install.strip=false -e "$ROOT"
echo "sanitize: built in $(( $(date +%s) - start ))s"

# The interpreter is not instrumented: the sanitizer runtimes must be loaded first.
CXX_BIN="${CXX:-g++}"
ASAN_LIB="$("$CXX_BIN" -print-file-name=libasan.so)"
UBSAN_LIB="$("$CXX_BIN" -print-file-name=libubsan.so)"
for lib in "$ASAN_LIB" "$UBSAN_LIB"; do
  if [[ ! -e "$lib" ]]; then echo "sanitize: $lib not found" >&2; exit 1; fi
done

tests=("$ROOT/tests/storage/test_bad_input.py" "$ROOT/tests/storage/test_format.py"
       "$ROOT/tests/kernels/test_kernel_correctness.py" "$ROOT/tests/kernels/test_layer_plan.py"
       "$ROOT/tests/kernels/test_backward_fused.py" "$ROOT/tests/dispatch/test_backward_plan.py"
       "$ROOT/tests/nn/test_hostile_states.py" "$ROOT/tests/nn/test_layer_storage_safety.py")

# detect_leaks=0: the interpreter and torch keep memory until exit by design.
export LD_PRELOAD="$ASAN_LIB $UBSAN_LIB"
# Reports go to files too: pytest's output capture would swallow a dying test's stderr.
rm -rf "$WORK/reports" && mkdir -p "$WORK/reports"
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:exitcode=86:alloc_dealloc_mismatch=0:log_path=$WORK/reports/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$WORK/reports/ubsan"
export SPARSELAB_CACHE_DIR="$WORK/cache"
cd "$WORK"
"$WORK/venv/bin/python" -c "import sparselab._C as c, sys; sys.exit(0 if c.build_info()['sanitized'] else 1)" || {
  echo "sanitize: the venv does not import the sanitized build" >&2; exit 1; }
set +e
"$WORK/venv/bin/python" -m pytest -q -p no:cacheprovider -x -o addopts="" "${tests[@]}" 2>&1 | tee "$WORK/pytest.log"
rc=${PIPESTATUS[0]}
set -e
if compgen -G "$WORK/reports/*" >/dev/null; then
  for f in "$WORK"/reports/*; do echo "sanitize: report $f:" >&2; head -60 "$f" >&2; done
  rc=1
fi
echo "sanitize: finished in $(( $(date +%s) - start ))s, exit $rc"
exit "$rc"
