"""Architecture rules that keep the engine usable without a screen."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    """The boundaries are import-linter contracts in pyproject.toml (engine/ knows no screen,
    panes never reach into the App); this runs the same check .ci/run does."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    forbidden = {
        module
        for contract in contracts["contracts"]
        if "florwb_engine" in contract["source_modules"]
        for module in contract["forbidden_modules"]
    }
    assert {"textual", "florwb"} <= forbidden
    lint = Path(sys.executable).parent / "lint-imports"
    done = subprocess.run([lint], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
    assert f"Contracts: {len(contracts['contracts'])} kept, 0 broken." in done.stdout


def test_import_florwb_is_cheap():
    """A training script pays for DuckDB, pandas, torch and textual only if it uses them."""
    code = (
        "import sys, florwb\n"
        "heavy = [m for m in ('duckdb', 'pandas', 'torch', 'textual', 'libcst') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
