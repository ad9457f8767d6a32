#!/usr/bin/env bash
# The import contracts of pyproject.toml ([tool.importlinter]), checked on the package as it is
# installed: a copy of sparselab/ with tuning/ as sparselab/tuning, read by a Python that skips
# site's .pth files, so an editable install's import hook cannot point it back at the source tree.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python}"
TREE="$(mktemp -d)"
trap 'rm -rf "$TREE"' EXIT
cp -r "$ROOT/sparselab" "$TREE/sparselab"
rm -rf "$TREE/sparselab/tuning"
cp -r "$ROOT/tuning" "$TREE/sparselab/tuning"
# The compiled extension as an empty module: grimp reads .py files, and would take an import of
# sparselab._C for an import of the package root (which imports every layer).
: > "$TREE/sparselab/_C.py"
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
cd "$TREE"
PYTHONPATH="$TREE:$SITE" "$PY" -S -c 'import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())' \
  "$ROOT/pyproject.toml"
