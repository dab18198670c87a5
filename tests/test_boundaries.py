"""Architecture rules that keep the engine usable without a screen."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_engine_never_imports_textual_or_florwb():
    offenders = {
        str(path.relative_to(ROOT)): sorted(_imports(path) & {"textual", "florwb"})
        for path in (ROOT / "engine").rglob("*.py")
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert offenders == {}
    assert len(list((ROOT / "engine").rglob("*.py"))) > 10


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
