#!/usr/bin/env bash
# Install the reference implementation flordb==4.0.1 into its own folder, benchmarks/.env/flordb,
# for the side-by-side benchmarks. Nothing goes into .venv: a benchmark runs flordb with
#   PYTHONPATH=benchmarks/.env/flordb .venv/bin/python script.py
# so flordb's dependencies (pandas, numpy, GitPython, ...) win only in that process, and torch
# (not a flordb dependency; flordb imports it optionally) still comes from .venv.
# Idempotent: does nothing when the pinned version is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
TARGET=benchmarks/.env/flordb
VERSION=4.0.1

installed() {
  PYTHONPATH=$TARGET "$PY" -c \
    "import importlib.metadata as m, sys; sys.exit(m.version('flordb') != '$VERSION')" 2>/dev/null
}

if installed; then
  echo "flordb $VERSION already in $TARGET"
  exit 0
fi

rm -rf "$TARGET"
# --target implies --ignore-installed: every dependency lands in TARGET, so .venv is untouched
# (--no-warn-conflicts: pip would report clashes with .venv packages that flordb never imports).
"$PY" -m pip install -q --disable-pip-version-check --no-warn-conflicts --target "$TARGET" "flordb==$VERSION"
if compgen -G "$TARGET/torch*" >/dev/null || compgen -G "$TARGET/nvidia*" >/dev/null; then
  echo "error: torch was pulled into $TARGET; it must come from .venv" >&2
  exit 1
fi

# Smoke test. Importing flordb needs a git repository (it writes .flor/ at the repo root), so
# import it inside a throwaway one, never inside this checkout.
SCRATCH=$(mktemp -d)
trap 'rm -rf "$SCRATCH"' EXIT
git -C "$SCRATCH" init -q
ROOT=$PWD
(cd "$SCRATCH" && PYTHONPATH=$ROOT/$TARGET "$ROOT/$PY" -c \
  "import torch, flordb, importlib.metadata as m; print('flordb', m.version('flordb'), 'torch', torch.__version__, 'from', torch.__file__)")
echo "installed flordb $VERSION into $TARGET"
