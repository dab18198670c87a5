"""A unified diff of two versions of a script as Rich text, log statements highlighted.

Lines that hold a `flor.log` statement get a ◆ in the gutter and a highlight, so the eye
goes straight to what hindsight logging changes; the rest reads like `git diff`.
"""

from __future__ import annotations

import difflib

from rich.text import Text

LOG_STYLE = "bold black on yellow"
ADDED = "green"
REMOVED = "red"


def render_diff(
    old: str,
    new: str,
    *,
    old_name: str,
    new_name: str,
    old_log_lines: set[int] | frozenset[int] = frozenset(),
    new_log_lines: set[int] | frozenset[int] = frozenset(),
    context: int = 3,
) -> Text:
    """`git diff`-style hunks from `old` to `new`; line numbers are 1-based."""
    a, b = old.splitlines(), new.splitlines()
    text = Text()
    text.append(f"--- {old_name}\n", "bold red")
    text.append(f"+++ {new_name}\n", "bold green")
    groups = list(difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(context))
    if not groups:
        text.append("(no differences)\n", "dim")
        return text
    width = len(str(max(len(a), len(b), 1)))
    for group in groups:
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        text.append(f"@@ -{i1 + 1},{i2 - i1} +{j1 + 1},{j2 - j1} @@\n", "cyan")
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                for k in range(a2 - a1):
                    _line(
                        text, " ", a[a1 + k], b1 + k + 1, width, "", (b1 + k + 1) in new_log_lines
                    )
                continue
            for k in range(a1, a2):
                _line(text, "-", a[k], k + 1, width, REMOVED, (k + 1) in old_log_lines)
            for k in range(b1, b2):
                _line(text, "+", b[k], k + 1, width, ADDED, (k + 1) in new_log_lines)
    return text


def _line(text: Text, sign: str, line: str, number: int, width: int, style: str, log: bool) -> None:
    text.append(f"{number:>{width}} ", "dim")
    text.append("◆" if log else " ", "bold yellow" if log else "")
    text.append(sign, style or "dim")
    text.append(line.expandtabs(4), LOG_STYLE if log else style)
    text.append("\n")
