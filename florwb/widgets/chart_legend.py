"""The chart's legend: a bar of its own beside the plot, never drawn over the curves.

A run is named by what tells it apart from the other charted runs: the args whose values
differ between them (the one with the most distinct values first, so a label cut short
keeps what tells runs apart), and the code version when they ran more than one (its run
id only when nothing else differs, or two runs would read alike). What is the same in every run
is left out: it would repeat on each entry and tell nothing.

The bar gets a few lines (two at 80x24); when the entries do not fit they are
abbreviated step by step, each step tried only when the one before does not fit:
arg names shortened to their initials (`learning_rate=0.1` -> `lr=0.1`), then values
alone (`0.1 32`), then each label cut to the same length, and last `+N more` for the
entries that still do not fit (their runs are still drawn and read by the cursor).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rich.text import Text

from florwb.ui.format import number, short_run, short_version
from florwb_engine.store.runs import args_that_differ

MARK = "━ "
SEPARATOR = "  "
MIN_LABEL = 4  # the shortest a cut label gets before entries are left out


@dataclass(frozen=True)
class RunLabel:
    """A run's name in a legend, as parts that can be abbreviated."""

    run: str  # the short run id
    parts: tuple[tuple[str, str], ...] = ()  # (name, value text) that differ between runs

    def text(self, level: int) -> str:
        """0: `name=value`; 1: initials of names; 2: values only (`heading` names them)."""
        if not self.parts:
            return self.run
        if level == 0:
            return " ".join(f"{n}={v}" for n, v in self.parts)
        if level == 1:
            return " ".join(f"{initials(n)}={v}" for n, v in self.parts)
        return "/".join(v for _n, v in self.parts)

    @property
    def heading(self) -> str:
        """What values-only labels hold, said once at the start of the bar: `lr/hw:`."""
        return "/".join(initials(n) for n, _v in self.parts) + ":" if self.parts else ""


def initials(name: str) -> str:
    """`learning_rate` -> `lr`, `batch-size` -> `bs`; a one-word name keeps 3 letters."""
    words = [w for w in name.replace("-", "_").replace(".", "_").split("_") if w]
    if len(words) > 1:
        return "".join(w[0] for w in words)
    return name[:3]


def run_labels(runs: Sequence[object]) -> dict[str, RunLabel]:
    """Legend labels for `runs` (RunRow-like: run_id, script, args, version), built from
    what differs between these runs only."""
    differ = args_that_differ((getattr(r, "script", None), getattr(r, "args", {})) for r in runs)
    # the arg that tells most runs apart first: a label cut short keeps the telling part
    distinct = {n: len({repr((getattr(r, "args", {}) or {}).get(n)) for r in runs}) for n in differ}
    differ.sort(key=lambda n: (-distinct[n], n))
    versions = {getattr(r, "version", None) for r in runs}
    out: dict[str, RunLabel] = {}
    for run in runs:
        args: Mapping[str, object] = getattr(run, "args", {}) or {}
        parts = [(n, number(args[n], 3)) for n in differ if n in args]
        if len(versions) > 1:
            parts.insert(0, ("version", short_version(getattr(run, "version", None))))
        out[run.run_id] = RunLabel(short_run(run.run_id), tuple(parts))  # type: ignore[attr-defined]
    seen: dict[str, int] = {}
    for label in out.values():
        seen[label.text(0)] = seen.get(label.text(0), 0) + 1
    for run_id, label in out.items():
        if label.parts and seen[label.text(0)] > 1:  # alike: the run id tells them apart
            out[run_id] = RunLabel(label.run, (("run", label.run), *label.parts))
    return out


@dataclass(frozen=True)
class LegendEntry:
    run_id: str
    label: RunLabel | str
    color: tuple[int, int, int]
    replayed: bool = False


def legend_text(entries: Sequence[LegendEntry], width: int, lines: int) -> Text:
    """The entries in at most `lines` lines of `width` cells, abbreviated until they fit."""
    width = max(width, 10)
    for level in (0, 1):
        texts = [_entry_text(e, level) for e in entries]
        if _lines_needed(texts, width) <= lines:
            return _render(entries, texts, width)
    heading = _heading(entries)
    room = width - len(heading)  # the first line starts with it
    texts = [_entry_text(e, 2) for e in entries]
    for cut in range(max((len(t) for t in texts), default=0), MIN_LABEL - 1, -1):
        clipped = [_clip(t, cut) for t in texts]
        if _lines_needed(clipped, width, first=room) <= lines:
            return _render(entries, clipped, width, heading=heading)
    clipped = [_clip(t, MIN_LABEL) for t in texts]
    for shown in range(len(entries) - 1, -1, -1):
        more = f"+{len(entries) - shown} more"
        if _lines_needed([*clipped[:shown], more], width, marks=shown, first=room) <= lines:
            return _render(entries[:shown], clipped[:shown], width, more, heading)
    return Text(f"+{len(entries)} runs")


def _heading(entries: Sequence[LegendEntry]) -> str:
    """The names of values-only labels, when every labelled entry holds the same ones."""
    headings = {e.label.heading for e in entries if isinstance(e.label, RunLabel)}
    headings.discard("")
    return headings.pop() if len(headings) == 1 else ""


def _entry_text(entry: LegendEntry, level: int) -> str:
    label = entry.label if isinstance(entry.label, str) else entry.label.text(level)
    return f"{label} ↻" if entry.replayed else label


def _clip(text: str, cut: int) -> str:
    return text if len(text) <= cut else text[: cut - 1] + "…"


def _lines_needed(
    texts: Sequence[str], width: int, marks: int | None = None, first: int | None = None
) -> int:
    """Lines the texts fill at `width` (the first line `first` wide, after a heading)."""
    marks = len(texts) if marks is None else marks
    used, lines = width - (width if first is None else first), 1
    for i, text in enumerate(texts):
        cost = len(text) + (len(MARK) if i < marks else 0)
        if used and used + len(SEPARATOR) + cost > width:
            lines, used = lines + 1, 0
        used += (len(SEPARATOR) if used else 0) + cost
    return lines if texts else 0


def _render(
    entries: Sequence[LegendEntry],
    texts: Sequence[str],
    width: int,
    more: str | None = None,
    heading: str = "",
) -> Text:
    out = Text(no_wrap=True, overflow="ellipsis")
    used = 0
    if heading:
        out.append(heading, style="bold")
        used = len(heading)
    items: list[tuple[LegendEntry | None, str]] = list(zip(entries, texts))
    if more:
        items.append((None, more))
    for entry, text in items:
        cost = len(text) + (len(MARK) if entry is not None else 0)
        if used and used + len(SEPARATOR) + cost > width:
            out.append("\n")
            used = 0
        elif used:
            out.append(SEPARATOR)
            used += len(SEPARATOR)
        if entry is not None:
            out.append(MARK, style="rgb({},{},{})".format(*entry.color))
        out.append(text, style="dim" if entry is None else "")
        used += cost
    return out
