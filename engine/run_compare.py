"""Two runs side by side: the args that differ, the metrics both logged (final and best
value, and their deltas) and the code that differs between their versions.

The workbench's run comparison (`c` with two runs marked) shows it; a notebook can build
the same. Values are counted once per run and name, from the source the history reads
(recorded first, else the first replay's: florwb_engine.store.history_values).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from florwb_engine import project as projects
from florwb_engine.store import Store
from florwb_engine.store.history_values import CHOSEN
from florwb_engine.store.queries import read_session
from florwb_engine.store.repair import again_if_rebuilt
from florwb_engine.store.runs import RunRow, list_runs
from florwb_engine.store.verdicts import Withheld, withheld

# Names whose higher values are better (accuracy, F1, reward...); the rest (losses,
# errors, norms) are best low.
BEST_IS_MAX = re.compile(
    r"acc|auc|f1|score|precision|recall|bleu|rouge|iou|map|reward|return|r2|ndcg|hit"
)
# Names that are settings, not results: a logged learning rate, momentum or step counter
# has no better direction, so a comparison shows no "best" and colours no delta for it.
SETTING = re.compile(
    r"(^|[._/])(lr|learning_rate|momentum|weight_decay|wd|beta[12]?|eps|epsilon|warmup"
    r"|temperature|batch_size|bs|seed|epochs?|steps?|global_step|iteration)($|[._/])"
)
MAX_FILES = 20  # files of a code diff shown at most
MAX_FILE_BYTES = 512 * 1024  # larger files are named, not diffed


def best_is_max(metric: str | None) -> bool:
    """Whether a higher value of `metric` is better."""
    return bool(metric and BEST_IS_MAX.search(metric.lower()))


def better_direction(metric: str, args: set[str] | frozenset[str] = frozenset()) -> bool | None:
    """True when a higher value of `metric` is better, False when lower is, None when it
    is a setting (an arg of either run, or a name like `lr`) that no value is better for."""
    if metric in args or SETTING.search(metric.lower()):
        return None
    return best_is_max(metric)


@dataclass
class MetricPair:
    """One name both runs logged: final (last) and best value of each (no best for a
    setting such as a logged `lr`: `higher_is_better` None)."""

    name: str
    final: tuple[float | None, float | None]
    best: tuple[float | None, float | None]
    higher_is_better: bool | None

    @property
    def final_delta(self) -> float | None:
        a, b = self.final
        return b - a if a is not None and b is not None else None

    @property
    def best_delta(self) -> float | None:
        a, b = self.best
        return b - a if a is not None and b is not None else None


@dataclass
class FileDiff:
    """A file whose content differs: its text in each version (None: absent there)."""

    path: str
    old: str | None
    new: str | None
    note: str | None = None  # why it is named but not diffed (binary, too large)


@dataclass
class RunComparison:
    first: RunRow
    second: RunRow
    args: list[tuple[str, Any, Any]]  # (name, first's value, second's), differing only
    same_args: int  # how many args are equal
    metrics: list[MetricPair]
    only_first: list[str]  # numeric names only the first run has
    only_second: list[str]
    files: list[FileDiff] = field(default_factory=list)
    more_files: int = 0  # differing files beyond MAX_FILES
    note: str | None = None  # what could not be read, in one line
    withheld: Withheld = field(default_factory=Withheld)  # values of diverged replays


MISSING = object()


@again_if_rebuilt
def compare_runs(project: Path, store: Store, first: str, second: str) -> RunComparison:
    """Compare run `first` with run `second` (second minus first in the deltas)."""
    with read_session(store) as con:
        runs = {run.run_id: run for run in list_runs(con) if run.run_id in (first, second)}
        if first not in runs or second not in runs:
            missing = next(r for r in (first, second) if r not in runs)
            raise KeyError(f"no recorded run {missing}")
        stats = {run_id: _final_and_range(con, run_id) for run_id in (first, second)}
        held = withheld(con, run_ids=[first, second])
    a, b = runs[first], runs[second]
    names = sorted(set(a.args) | set(b.args))
    differ = [
        (n, a.args.get(n, MISSING), b.args.get(n, MISSING))
        for n in names
        if repr(a.args.get(n, MISSING)) != repr(b.args.get(n, MISSING))
    ]
    args = [(n, None if x is MISSING else x, None if y is MISSING else y) for n, x, y in differ]
    metrics = []
    settings = set(a.args) | set(b.args)
    for name in sorted(set(stats[first]) & set(stats[second])):
        high = better_direction(name, settings)
        (last_a, low_a, high_a), (last_b, low_b, high_b) = stats[first][name], stats[second][name]
        if high is None:
            best: tuple[float | None, float | None] = (None, None)
        else:
            best = (high_a, high_b) if high else (low_a, low_b)
        metrics.append(MetricPair(name, (last_a, last_b), best, high))
    comparison = RunComparison(
        a,
        b,
        args,
        len(names) - len(differ),
        metrics,
        sorted(set(stats[first]) - set(stats[second])),
        sorted(set(stats[second]) - set(stats[first])),
        withheld=held,
    )
    _code(project, comparison)
    return comparison


def _final_and_range(
    con: duckdb.DuckDBPyConnection, run_id: str
) -> dict[str, tuple[float | None, float | None, float | None]]:
    """name -> (last, min, max) over the run's numeric values of each name."""
    rows = con.execute(
        f"""
        SELECT k.name, arg_max(l.value, l.seq),
               min(l.value) FILTER (WHERE isfinite(l.value)),
               max(l.value) FILTER (WHERE isfinite(l.value))
        FROM log_rows l
        JOIN ({CHOSEN}) c ON c.run_key = l.run_key AND c.source_key = l.source_key
             AND c.name_key = l.name_key
        JOIN name_keys k ON k.name_key = l.name_key
        JOIN runs r ON r.run_key = l.run_key
        WHERE r.run_id = ? AND l.vtype <= 2
        GROUP BY k.name
        """,
        [run_id],
    ).fetchall()
    return {
        name: tuple(None if v is None else float(v) for v in (last, low, high))  # type: ignore[misc]
        for name, last, low, high in rows
    }


def _code(project: Path, comparison: RunComparison) -> None:
    """The files that differ between the two runs' versions (the version store loads
    here: the history imports this module for `best_is_max` and must start fast)."""
    from florwb_engine.versions import VersionError, read_file
    from florwb_engine.versions.object_store import differing_files

    old, new = comparison.first.version, comparison.second.version
    if not old or not new or old == new:
        return
    store_dir = projects.store_dir(project)
    try:
        paths = differing_files(store_dir, old, new)
    except VersionError as exc:
        comparison.note = f"code not compared: {exc}"
        return
    comparison.more_files = max(len(paths) - MAX_FILES, 0)
    for path in paths[:MAX_FILES]:
        texts: list[str | None] = []
        note = None
        for version in (old, new):
            data = read_file(store_dir, version, path)
            if data is not None and (len(data) > MAX_FILE_BYTES or b"\0" in data[:8192]):
                note = "binary or large file: not shown"
            texts.append(data.decode("utf-8", errors="replace") if data is not None else None)
        if note:
            texts = [None if t is None else "" for t in texts]
        comparison.files.append(FileDiff(path, texts[0], texts[1], note))


__all__ = [
    "FileDiff",
    "MetricPair",
    "RunComparison",
    "best_is_max",
    "better_direction",
    "compare_runs",
]
