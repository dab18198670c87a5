"""docs/ARCHITECTURE.md is the map a new engineer reads first: it must name every module
that exists, and give a reason for every function that grew past 80 lines. Both drift
silently as code moves, so they are checked here."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAP = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
LONG = 80


def _modules() -> list[tuple[str, Path]]:
    """(the folder the map's tables name them under, the module) for every source file."""
    found = []
    for top in ("engine", "florwb"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if path.name != "__init__.py":
                found.append((top, path))
    return found


def _named(top: str, path: Path) -> bool:
    """A module is named as `pkg/name.py`, or as `name.py` in the table row of its package
    (`pkg/`), or, at a package's top, as `name.py` anywhere."""
    rel = path.relative_to(ROOT / top)
    if len(rel.parts) == 1:
        return f"`{rel.name}`" in MAP
    package = "/".join(rel.parts[:-1])
    if f"{package}/{rel.name}" in MAP:
        return True
    rows = [line for line in MAP.splitlines() if line.startswith(f"| `{package}/`")]
    return any(f"`{rel.name}`" in row for row in rows)


def test_every_module_is_on_the_map():
    missing = [str(path.relative_to(ROOT)) for top, path in _modules() if not _named(top, path)]
    assert missing == [], f"modules docs/ARCHITECTURE.md does not name: {missing}"


def _long_functions() -> list[str]:
    out = []
    for folder in ("engine", "florwb", "tools"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    if node.end_lineno - node.lineno + 1 > LONG:
                        out.append(f"`{path.relative_to(ROOT)}: {node.name}`")
    return out


def test_every_long_function_has_a_reason_on_the_map():
    unexplained = [name for name in _long_functions() if name not in MAP]
    assert unexplained == [], (
        f"functions over {LONG} lines without a line in the map: {unexplained}"
    )


def test_the_map_names_no_long_function_that_shrank():
    """A reason left behind for a function that was split or removed is stale."""
    listed = {
        line.split("|")[1].strip()
        for line in MAP.split("## Functions over 80 lines", 1)[1].split("\n## ", 1)[0].splitlines()
        if line.startswith("| `")
    }
    assert listed == set(_long_functions())
