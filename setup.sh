#!/usr/bin/env bash
# One setup for users, developers and CI: a project venv that reuses an importable torch
# (GPU boxes) and otherwise installs the pinned CPU build, so a bare `torch` requirement
# never pulls gigabytes of CUDA packages.
# A second run on a set-up venv does nothing (well under a second; CI runs it twice): the
# stamp records what the last full install was made from (pyproject.toml, this script, this
# folder), and any change to them, or a package that no longer resolves, reinstalls.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
STAMP=.venv/.florwb-setup
want="$(cat pyproject.toml setup.sh | sha256sum | cut -d' ' -f1) $(pwd)"
if [ -x .venv/bin/python ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] &&
  .venv/bin/python - "$(pwd)" >/dev/null 2>&1 <<'PYCHECK'; then
import importlib.util, pathlib, sys
here = pathlib.Path(sys.argv[1]).resolve()
for name in ("torch", "pytest", "xdist", "ray"):
    assert importlib.util.find_spec(name) is not None, name
import florwb, florwb_engine  # the editable install maps both to this checkout
assert pathlib.Path(florwb.__file__).resolve().is_relative_to(here)
assert pathlib.Path(florwb_engine.__file__).resolve().is_relative_to(here)
PYCHECK
  exit 0
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv --system-site-packages .venv
fi
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  .venv/bin/python -m pip install -q "torch==2.13.0"
fi
.venv/bin/python -m pip install -q -e ".[dev]"
echo "$want" >"$STAMP"
