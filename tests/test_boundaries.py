"""Architecture rules that keep the engine usable without a screen."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    """The boundaries are import-linter contracts in pyproject.toml (engine/ knows no screen,
    its packages import only the layers below them, panes never reach into the App); this
    runs the same check .ci/run does."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    forbidden = {
        module
        for contract in contracts["contracts"]
        if "florwb_engine" in contract.get("source_modules", ())
        for module in contract["forbidden_modules"]
    }
    assert {"textual", "florwb"} <= forbidden
    layers = [c for c in contracts["contracts"] if c["type"] == "layers"]
    assert layers and layers[0]["containers"] == ["florwb_engine"] and layers[0]["exhaustive"]
    # this interpreter, whose florwb_engine is this checkout (the lint-imports script may
    # name another environment's Python)
    lint = "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"
    done = subprocess.run([sys.executable, "-c", lint], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
    assert f"Contracts: {len(contracts['contracts'])} kept, 0 broken." in done.stdout


def _private_reaches(path: Path) -> list[str]:
    """`from florwb_engine.x import _y` and `x._y` on a module imported from florwb: a module
    that uses another's private helper is coupled to what that module may change freely."""
    tree = ast.parse(path.read_text())
    modules: set[str] = set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
            "florwb",
            "florwb_engine",
        ):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.name}:{node.lineno} {node.module}.{alias.name}")
                else:
                    modules.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{path.name}:{node.lineno} {node.value.id}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_helpers():
    """What several modules share has a public name (plan.py imported a private
    helper of the store; session 5's modules did the same eleven times)."""
    reaches = [
        reach
        for folder in ("engine", "florwb")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for reach in _private_reaches(path)
    ]
    assert reaches == []


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
