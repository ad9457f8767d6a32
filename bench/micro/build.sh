#!/usr/bin/env bash
# Compiles every probe in bench/micro (x86-64 only; AVX-512 code compiles on any x86-64 host,
# running it needs the CPU), so a kernel header change that breaks a probe fails CI:
#
#   bash bench/micro/build.sh [OUTDIR]     # binaries land in OUTDIR (default: a temporary dir)
#
# Each probe's header comment gives the command that builds and runs it on its own.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(uname -m)" != "x86_64" ]; then
  echo "bench/micro: probes are x86-64 only; skipped on $(uname -m)"
  exit 0
fi
if [ $# -ge 1 ]; then
  out="$1"
  mkdir -p "$out"
else
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
fi
flags=(-O3 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mavx512bf16 -std=c++17 -Icsrc)
for src in bench/micro/*.cpp; do
  name="$(basename "$src" .cpp)"
  if [ "$name" = fma_peak ]; then
    # Picks its ISA at run time (target attributes), so it must run on any x86-64 CPU: no ISA flags.
    ${CXX:-g++} -O3 -std=c++17 -pthread "$src" -o "$out/$name"
  else
    ${CXX:-g++} "${flags[@]}" "$src" csrc/common/parallel.cpp -lpthread -o "$out/$name"
  fi
  echo "bench/micro: built $name"
done
