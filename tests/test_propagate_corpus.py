"""The propagation corpus: realistic pairs of training-script versions.

Each folder under tests/propagation_corpus holds new.py (today's script, with new log
statements), old.py (an older version), expected.py (the old version with the statements
placed, or unchanged when none can be) and expected.json ({"statuses": {name: status}},
optionally "reason_contains": {name: text}). Every case is asserted on its own, and the
share of statements placed correctly over the whole corpus is printed and must be >= 0.9.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from florwb_engine.propagate import propagate

CORPUS = Path(__file__).parent / "propagation_corpus"
CASES = sorted(p for p in CORPUS.iterdir() if p.is_dir())


def _read(path: Path) -> str:
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def _run(case: Path):
    expected = json.loads(_read(case / "expected.json"))
    result = propagate(_read(case / "new.py"), _read(case / "old.py"))
    return result, expected, _read(case / "expected.py")


def _correct_statements(case: Path) -> tuple[int, int]:
    """(statements handled correctly, statements) for one case."""
    try:
        result, expected, expected_code = _run(case)
    except Exception:  # noqa: BLE001 - a crash scores zero for the case
        return 0, len(json.loads(_read(case / "expected.json"))["statuses"])
    statuses = {p.name: p.status for p in result.placements}
    code_ok = result.code == expected_code
    good = 0
    for name, status in expected["statuses"].items():
        if statuses.get(name) == status and (code_ok or status != "inserted"):
            good += 1
    return good, len(expected["statuses"])


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 32
    unplaceable = [
        c
        for c in CASES
        if "unplaced" in json.loads(_read(c / "expected.json"))["statuses"].values()
    ]
    assert len(unplaceable) >= 6


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case(case: Path) -> None:
    result, expected, expected_code = _run(case)
    statuses = {p.name: p.status for p in result.placements}
    assert statuses == expected["statuses"]
    assert result.code == expected_code
    ast.parse(result.code)
    reasons = {p.name: p.reason or "" for p in result.placements}
    for name, text in expected.get("reason_contains", {}).items():
        assert text in reasons[name], reasons[name]
    lines = result.code.splitlines()
    for placement in result.placements:
        if placement.status in ("inserted", "present"):
            assert placement.old_line is not None
            text = "\n".join(lines[placement.old_line - 1 : placement.old_line + 2])
            assert f'"{placement.name}"' in text.replace("'", '"')
        else:
            assert placement.old_line is None and placement.reason


def test_corpus_share_placed_correctly() -> None:
    good = total = 0
    for case in CASES:
        g, t = _correct_statements(case)
        good += g
        total += t
    share = good / total
    print(f"\npropagation corpus: {good}/{total} statements placed correctly ({share:.1%})")
    assert share >= 0.9
