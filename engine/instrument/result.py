"""What instrumenting a script produced: the new code, and what was and was not done.

The report is a list of notes with line numbers in the original script, so a user can
check each change (or each refusal) against their own code.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

INSTRUMENTED = "instrumented"  # everything found was instrumented
PARTIAL = "partial"  # instrumented, but some things were left as they are (see notes)
UNCHANGED = "unchanged"  # already instrumented: nothing to change
REFUSED = "refused"  # nothing could be instrumented safely (see reason)


@dataclass(frozen=True)
class Note:
    """One line of the report: something done (or not done) at a line of the original."""

    line: int
    text: str
    done: bool = True

    def render(self, path: str) -> str:
        return f"{path}:{self.line}: {'' if self.done else 'not done: '}{self.text}"


@dataclass
class InstrumentResult:
    original: str
    code: str
    status: str
    notes: list[Note] = field(default_factory=list)
    reason: str = ""  # one line, for REFUSED
    outer_loop: str | None = None  # name of the outer flor.loop
    inner_loops: list[str] = field(default_factory=list)
    checkpointed: dict[str, str] = field(default_factory=dict)  # key -> variable
    args: list[str] = field(default_factory=list)  # names given to flor.arg

    @property
    def changed(self) -> bool:
        return self.code != self.original

    def report(self, path: str) -> list[str]:
        """Lines for the terminal: notes in line order, not-done notes marked."""
        return [n.render(path) for n in sorted(self.notes, key=lambda n: (n.line, not n.done))]

    def summary(self, path: str) -> str:
        if self.status == REFUSED:
            return f"{path}: not instrumented: {self.reason}"
        if self.status == UNCHANGED:
            return f"{path}: already instrumented, nothing to change"
        parts = []
        loops = [x for x in (self.outer_loop, *self.inner_loops) if x]
        if loops:
            parts.append("loops " + ", ".join(loops))
        if self.checkpointed:
            parts.append("checkpointing " + ", ".join(self.checkpointed))
        if self.args:
            parts.append(f"{len(self.args)} args")
        missing = sum(1 for n in self.notes if not n.done)
        tail = f"; {missing} thing(s) not done, see above" if missing else ""
        return f"{path}: {self.status}: {'; '.join(parts)}{tail}"


def unified_diff(original: str, code: str, path: str) -> str:
    """A `git apply`-able unified diff from the original script to the instrumented one."""
    before = original.splitlines(keepends=True)
    after = code.splitlines(keepends=True)
    lines = []
    for line in difflib.unified_diff(before, after, f"a/{path}", f"b/{path}"):
        if not line.endswith(("\n", "\r")):
            line += "\n\\ No newline at end of file\n"
        lines.append(line)
    return "".join(lines)
