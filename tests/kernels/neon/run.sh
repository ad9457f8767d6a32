#!/usr/bin/env bash
# Cross-compiles the aarch64 kernel variants (the scalar and neon
# instantiations of csrc/variants.def, as CMakeLists.txt builds them for
# aarch64) with the checker in neon_check.cpp into one static binary and runs
# it under qemu.
#
#   bash tests/kernels/neon/run.sh    # build + run under -cpu cortex-a53 (ARMv8.0-A)
#   QEMU_CPU=max bash tests/kernels/neon/run.sh
#
# Needs: apt-get install -y --no-install-recommends g++-aarch64-linux-gnu qemu-user-static
# Env:   CXX_AARCH64 (default aarch64-linux-gnu-g++), QEMU (default qemu-aarch64-static),
#        QEMU_CPU (default cortex-a53), NEON_BUILD_DIR (default build/neon-qemu, git-ignored),
#        NEON_CHECK_ARGS (passed to the binary, e.g. -v).
# Exit:  0 all checks passed; 1 a check failed or the build failed; 2 toolchain missing.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
CXX="${CXX_AARCH64:-aarch64-linux-gnu-g++}"
QEMU="${QEMU:-qemu-aarch64-static}"
CPU="${QEMU_CPU:-cortex-a53}"
BUILD="${NEON_BUILD_DIR:-$ROOT/build/neon-qemu}"

missing=()
command -v "$CXX" >/dev/null 2>&1 || missing+=("$CXX (Debian package g++-aarch64-linux-gnu)")
command -v "$QEMU" >/dev/null 2>&1 || missing+=("$QEMU (Debian package qemu-user-static)")
if ((${#missing[@]})); then
  echo "neon check: toolchain missing: ${missing[*]}" >&2
  echo "neon check: install with: apt-get install -y --no-install-recommends g++-aarch64-linux-gnu qemu-user-static" >&2
  exit 2
fi

# What an aarch64 build compiles of the kernels: the scalar and neon
# instantiations of csrc/variants.def and the registry over them.
sources=("$ROOT/csrc/kernels/instantiate_scalar.cpp" "$ROOT/csrc/kernels/instantiate_neon.cpp"
         "$ROOT/csrc/registry.cpp" "$ROOT/csrc/common/parallel.cpp" "$HERE/neon_check.cpp")

mkdir -p "$BUILD"
# -march=armv8-a: nothing beyond the AArch64 baseline, so cortex-a53 runs it.
FLAGS=(-O2 -static -std=c++17 -pthread -DSPARSELAB_AARCH64 -march=armv8-a -Wall -Wextra
       -Wno-unused-parameter -fno-math-errno)
echo "neon check: compiling ${#sources[@]} files with $CXX"
objs=()
pids=()
for src in "${sources[@]}"; do
  rel="${src#"$ROOT"/}"
  obj="$BUILD/${rel//\//__}.o"
  objs+=("$obj")
  "$CXX" "${FLAGS[@]}" -c "$src" -o "$obj" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
if ((status)); then
  echo "neon check: compile failed" >&2
  exit 1
fi
"$CXX" "${FLAGS[@]}" "${objs[@]}" -o "$BUILD/neon_check"

echo "neon check: running under $QEMU -cpu $CPU"
start=$(date +%s)
set +e
# shellcheck disable=SC2086
"$QEMU" -cpu "$CPU" "$BUILD/neon_check" ${NEON_CHECK_ARGS:-}
rc=$?
set -e
echo "neon check: qemu -cpu $CPU finished in $(( $(date +%s) - start ))s, exit $rc"
if ((rc != 0)); then
  exit 1
fi
exit 0
