#!/usr/bin/env bash
# One setup for users, developers and CI: a project venv that reuses an importable torch
# (GPU boxes) and otherwise installs the pinned CPU build, so a bare `torch` requirement
# never pulls gigabytes of CUDA packages.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv --system-site-packages .venv
fi
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  .venv/bin/python -m pip install -q "torch==2.13.0"
fi
.venv/bin/python -m pip install -q -e ".[dev]"
