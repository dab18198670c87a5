"""What a statement may change (engine/analysis/mutations.py): the crossing check refuses a
placement only when a moved statement may change what the log reads, so a miss here is a
silently wrong value and an excess is a needless refusal."""

from __future__ import annotations

import libcst as cst
import pytest

from florwb_engine.analysis.mutations import ANY_SELF, changes_any, may_change


def _statement(code: str) -> cst.CSTNode:
    return cst.parse_module(code).body[0]


@pytest.mark.parametrize(
    ("code", "changed"),
    [
        ("x = f(y)\n", {"x", "y"}),  # y passed to a call that may mutate it
        ("x = len(y)\n", {"x"}),
        ("a, (b, *c) = t\n", {"a", "b", "c"}),
        ("x += 1\n", {"x"}),
        ("x[i] = 0\n", {"x"}),
        ("x.attr.inner = 0\n", {"x"}),
        ("self.count = 0\n", {".count"}),
        ("x.append(y)\n", {"x", "y"}),
        ("self.reset()\n", {ANY_SELF}),
        ("for i, v in enumerate(xs):\n    total += v\n", {"i", "v", "total"}),
        ("with open(p) as fh:\n    pass\n", {"fh", "p"}),
        ("del cache[k]\n", {"cache"}),
        ("import numpy as np\n", {"np"}),
        ("def helper():\n    x = 1\n", {"helper"}),
        ("if (n := len(xs)) > 2:\n    pass\n", {"n"}),
    ],
)
def test_may_change(code: str, changed: set[str]) -> None:
    assert may_change(_statement(code)) == changed


@pytest.mark.parametrize(
    "code",
    [
        'print(f"lr {lr:.2e}")\n',
        "if lr is None:\n    return 0\n",
        "assert lr > 0, lr\n",
        "y = lr * 2\n",
        "log(lr.item())\n",
        'print("lr", lr)\n',
        "w = w.to(lr.device)\n",
        'if not callable(lr):\n    raise TypeError(f"bad {lr}")\n',
        "n = len(lr)\n",
    ],
)
def test_reading_never_changes(code: str) -> None:
    assert not changes_any(_statement(code), {"lr"})


def test_method_of_self_may_change_any_attribute() -> None:
    assert changes_any(_statement("self.step()\n"), {".lr"})
    assert not changes_any(_statement("self.step()\n"), {"lr"})
