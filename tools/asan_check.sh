#!/usr/bin/env bash
# Build the extension with AddressSanitizer + UBSan (CMake option
# SPARSELAB_SANITIZE) into a scratch package tree and run the test suite
# against it. Usage: bash tools/asan_check.sh [test paths relative to the repo root] [pytest args]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="${ASAN_WORK:-/tmp/sparselab-asan}"
rm -rf "$work/pkg" && mkdir -p "$work/pkg"
cmake -S "$root" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSPARSELAB_SANITIZE=ON \
      -Dpybind11_DIR="$(python -m pybind11 --cmakedir)" >/dev/null
cmake --build "$work/build" -j2
cp -r "$root/sparselab" "$work/pkg/sparselab"
rm -rf "$work/pkg/sparselab/tuning" && cp -r "$root/tuning" "$work/pkg/sparselab/tuning"
cp "$work"/build/_C*.so "$work/pkg/sparselab/"
preload="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
# Run from outside the source tree so `import sparselab` finds the ASan copy;
# test paths are taken relative to the repository root.
args=()
for a in "$@"; do
  case "$a" in -*|/*) args+=("$a") ;; *) args+=("$root/$a") ;; esac
done
[ ${#args[@]} -gt 0 ] || args=("$root/tests")
cd "$work"
# Leak checking is off: CPython and torch keep allocations alive at exit by design.
SPARSELAB_CACHE_DIR="$(mktemp -d)" PYTHONPATH="$work/pkg" LD_PRELOAD="$preload" \
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  python - "${args[@]}" <<'PY'
import sys
# An editable install's import hook would otherwise win over PYTHONPATH.
sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "ScikitBuildRedirectingFinder"]
import pytest
import sparselab._C as C
assert C.build_info()["sanitized"], f"not the ASan build: {C.__file__}"
print("ASan build:", C.__file__)
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]]))
PY
