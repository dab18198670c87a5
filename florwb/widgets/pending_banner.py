"""The banner above the tabs: log statements in the working tree that no run recorded yet.

It owns the pending-statement state: the newest `PendingStatements` per script, and which
names were already offered (a toast says only what is new since). `show` takes what the
live monitor found; `names` is what a replay would fill in.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from florwb_engine.watch import PendingStatements


class PendingBanner(Static):
    """One line: `● r: replay past runs · new in train.py: name L12`, or a parse warning."""

    DEFAULT_CSS = """
    PendingBanner { display: none; height: auto; max-height: 2; padding: 0 1;
        background: $warning 30%; color: $text; }
    PendingBanner.-shown { display: block; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.pending: list[PendingStatements] = []
        self.checked = False  # the scripts were read at least once
        self._offered: set[str] = set()

    @property
    def names(self) -> list[str]:
        """The new statements' names, each once, in script order."""
        return list(dict.fromkeys(n for p in self.pending for n in p.new))

    def show(self, pending: list[PendingStatements]) -> None:
        first = not self.checked
        self.checked = True
        self.pending = pending
        new = [(p, n) for p in pending for n in p.new]
        if new:
            # the offer first, so a narrow terminal never cuts it off
            text = Text("● r: replay past runs", "bold")
            names = ", ".join(f"{n} L{p.lines.get(n, '?')}" for p, n in new)
            scripts = ", ".join(dict.fromkeys(p.script for p, _n in new))
            text.append(f" · new in {scripts}: ")
            text.append(names)
            self.update(text)
            self.add_class("-shown")
            fresh = [n for _p, n in new if n not in self._offered]
            if fresh and not first:  # the banner says it at startup; toast what is new
                self.notify(
                    f"New log statement {', '.join(fresh)}: press r to replay it for past runs",
                    title="Hindsight logging",
                    timeout=8,
                )
            self._offered.update(n for _p, n in new)
            return
        errors = [p.error for p in pending if p.error]
        if errors:
            self.update(Text(f"⚠ {errors[0]}", "yellow"))
            self.add_class("-shown")
        else:
            self.remove_class("-shown")
