"""Metric curves of chosen runs: x/y per run and source, for the workbench's chart view.

One read returns, for one logged name and a set of runs, each run's numeric values from the
one source the history shows too (florwb_engine.store.history_values.CHOSEN: recorded when
the run recorded the name, else the replay that filled it in; a replay's re-check of a
recorded name is not drawn twice), with x on one of three axes shared by all runs:

- `step`: iterations of the run's innermost loop done when the value was logged (a value
  logged once per epoch sits at the steps done by the end of that epoch);
- `epoch`: epochs done (the outer loop), fractional inside an epoch: step i of n in epoch e
  is at e + (i + 1) / n, a value logged after the inner loop at e + 1;
- `wall`: seconds from the start of the run's first loop iteration to the end of the
  iteration the value was logged in, from the recorded iteration timings.

x comes from the value's loop coordinates looked up in the *recorded* run's iterations, so
a value a replay computed for epoch 3 lands where epoch 3 was in training, not where (or
when) the replay ran it. Values logged outside any flor.loop have no x and are counted,
not drawn.

The chart's own arithmetic (EMA smoothing, min/max downsampling per screen column) is
here too, as plain numpy functions: it is about the numbers, not the screen.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb
import numpy as np

from florwb_engine.journal import ENTRY_SHIFT, ITERATION_MASK
from florwb_engine.store.catalog import Store
from florwb_engine.store.history_values import CHOSEN
from florwb_engine.store.queries import read_session
from florwb_engine.store.repair import again_if_rebuilt
from florwb_engine.store.schema import RECORDED, loop_column, loop_columns
from florwb_engine.store.verdicts import Withheld, withheld

AXES = ("step", "epoch", "wall")
AXIS_LABELS = {"step": "steps done", "epoch": "epochs done", "wall": "seconds of training"}


@dataclass
class Curve:
    """One run's values of the metric from one source, sorted by x."""

    run_id: str
    source: str  # "record", or the replay id that computed these values
    x: np.ndarray
    y: np.ndarray

    @property
    def replayed(self) -> bool:
        return self.source != RECORDED


@dataclass
class Curves:
    """What the chart draws: the metric's curves of the chosen runs on one x axis."""

    metric: str | None
    axis: str
    curves: list[Curve] = field(default_factory=list)
    metrics: list[str] = field(default_factory=list)  # numeric names these runs have
    outside_loops: int = 0  # values logged outside any flor.loop: no x, not drawn
    withheld: Withheld = field(default_factory=Withheld)  # of diverged replays: not drawn

    @property
    def points(self) -> int:
        return sum(len(c.x) for c in self.curves)


@again_if_rebuilt
def load_curves(
    store: Store,
    run_ids: list[str],
    metric: str | None,
    axis: str,
    version: str | None = None,
) -> Curves:
    """The curves of `metric` (or the runs' first numeric name) for `run_ids` on `axis`;
    with `version`, every run of that code version too (runs started since included)."""
    if axis not in AXES:
        raise ValueError(f"unknown x axis {axis!r}: one of {', '.join(AXES)}")
    with read_session(store) as con:
        keys = dict(
            con.execute(
                "SELECT run_key, run_id FROM runs WHERE run_id IN (SELECT unnest(?)) "
                "OR version = ?",
                [list(run_ids), version],
            ).fetchall()
        )
        if not keys:
            return Curves(metric, axis)
        metrics = _numeric_names(con, list(keys))
        chosen = metric if metric in metrics else (metrics[0] if metrics else None)
        if chosen is None:
            return Curves(None, axis, metrics=metrics)
        named = con.execute("SELECT name_key FROM name_keys WHERE name = ?", [chosen]).fetchall()
        name_key = named[0][0]
        prefixes = _entry_prefixes(con, list(keys))
        values = con.execute(
            f"""
            SELECT l.run_key, l.source_key, l.ctx_id >> {ENTRY_SHIFT},
                   l.ctx_id & {ITERATION_MASK}, l.value
            FROM log_rows l JOIN ({CHOSEN}) c USING (run_key, name_key, source_key)
            WHERE l.name_key = ? AND l.run_key IN (SELECT unnest(?)) AND l.vtype <= 2
              AND isfinite(l.value)
            ORDER BY l.run_key, l.source_key, l.seq
            """,
            [name_key, list(keys)],
        ).fetchnumpy()
        timings = con.execute(
            f"""
            SELECT run_key, ctx_id >> {ENTRY_SHIFT}, ctx_id & {ITERATION_MASK}, wait_s + iter_s
            FROM iteration_rows WHERE source_key = 0 AND run_key IN (SELECT unnest(?))
            """,
            [list(keys)],
        ).fetchnumpy()
        sources = dict(con.execute("SELECT source_key, source FROM sources").fetchall())
        held = withheld(con, [chosen], list(keys.values()))
    out = Curves(chosen, axis, metrics=metrics, withheld=held)
    run_col, source_col, entry_col, iter_col, value_col = (values[k] for k in values)
    t_run, t_entry, t_iter, t_dur = (timings[k] for k in timings)
    for run_key in sorted(keys, key=lambda k: keys[k]):
        mine = run_col == run_key
        if not mine.any():
            continue
        found = {
            int(source_key): prefixes.coordinates(
                run_key,
                int(source_key),
                entry_col[mine & (source_col == source_key)],
                iter_col[mine & (source_col == source_key)],
            )
            for source_key in np.unique(source_col[mine])
        }
        timed = t_run == run_key
        recorded = prefixes.coordinates(run_key, 0, t_entry[timed], t_iter[timed])
        frame = _Timeline(recorded, t_dur[timed].astype(np.float64), list(found.values()))
        for source_key, coords in found.items():
            rows = mine & (source_col == source_key)
            out.outside_loops += int((~coords.inside).sum())
            if not coords.inside.any():
                continue
            x = frame.x(axis, coords)
            y = value_col[rows][coords.inside].astype(np.float64)
            order = np.argsort(x, kind="stable")
            source = sources.get(source_key, str(source_key))
            out.curves.append(Curve(keys[run_key], source, x[order], y[order]))
    return out


def _numeric_names(con: duckdb.DuckDBPyConnection, run_keys: list[int]) -> list[str]:
    rows = con.execute(
        """
        SELECT k.name FROM name_stats s JOIN name_keys k ON k.name_key = s.name_key
        WHERE s.run_key IN (SELECT unnest(?))
        GROUP BY k.name HAVING sum(s.n) > 0 AND sum(s.n_numeric) = sum(s.n)
        ORDER BY k.name
        """,
        [run_keys],
    ).fetchall()
    return [r[0] for r in rows]


# --- loop coordinates ----------------------------------------------------------------------


@dataclass
class _Coordinates:
    """Loop coordinates of values (or iterations), outer loop first, one row each: the
    columns past a row's depth are 0; `inside` is False for values outside any loop."""

    matrix: np.ndarray  # int64, n x width, rows of values outside loops left out
    depth: np.ndarray  # int64, n
    inside: np.ndarray  # bool, one per value given


@dataclass
class _Prefixes:
    """Each loop entry's depth and enclosing iterations, per run and source."""

    width: int
    tables: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]]  # -> (depths, prefixes)

    def coordinates(
        self, run_key: int, source_key: int, entries: np.ndarray, iters: np.ndarray
    ) -> _Coordinates:
        depths, prefixes = self.tables.get(
            (run_key, source_key), (np.full(1, -1), np.zeros((1, self.width), np.int64))
        )
        entries = entries.astype(np.int64)
        known = (entries >= 0) & (entries < len(depths))
        known[known] = depths[entries[known]] >= 0
        at = entries[known]
        matrix = prefixes[at].copy()
        depth = depths[at]
        matrix[np.arange(len(at)), depth] = iters[known]
        return _Coordinates(matrix, depth, known)


def _entry_prefixes(con: duckdb.DuckDBPyConnection, run_keys: list[int]) -> _Prefixes:
    """Each loop entry's enclosing iterations, read from its outer-loop columns by path."""
    columns = {c.lower(): c for c in loop_columns(con)}
    select = "".join(f", {_quote(c)}" for c in columns.values())
    rows = con.execute(
        f"SELECT run_key, source_key, entry_id, depth, path{select} FROM loop_entries "
        "WHERE run_key IN (SELECT unnest(?))",
        [run_keys],
    ).fetchall()
    index = {c: i for i, c in enumerate(columns.values())}
    width = max((int(r[3] or 0) for r in rows), default=0) + 1
    grouped: dict[tuple[int, int], list[tuple[int, int, list[int]]]] = {}
    for run_key, source_key, entry_id, depth, path, *coordinates in rows:
        names = (path or "").split("/")[: int(depth or 0)]
        prefix = []
        for name in names:
            column = columns.get(loop_column(name))
            value = coordinates[index[column]] if column is not None else None
            prefix.append(int(value) if value is not None else 0)
        grouped.setdefault((int(run_key), int(source_key)), []).append(
            (int(entry_id), len(prefix), prefix)
        )
    tables = {}
    for key, entries in grouped.items():
        size = max(e for e, _d, _p in entries) + 1
        depths = np.full(size, -1, dtype=np.int64)
        prefixes = np.zeros((size, width), dtype=np.int64)
        for entry, depth, prefix in entries:
            depths[entry] = depth
            prefixes[entry, :depth] = prefix
        tables[key] = (depths, prefixes)
    return _Prefixes(width, tables)


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


class _Timeline:
    """The recorded run's iterations in order, per loop depth, with their end times.

        Coordinates become one sortable integer: each level's iteration is replaced by its rank
    among the iterations seen at that level (so the key stays small however large the loop
    counters are), then mixed radix with the outer loop most significant; rank 0 and the
    level's top rank stand for "before" and "after" every iteration there.
        A depth whose iterations were not timed (a run still in it, or journals without
        them) takes the iterations the values themselves sit in, sharing their parent's time."""

    def __init__(
        self, recorded: _Coordinates, seconds: np.ndarray, values: list[_Coordinates]
    ) -> None:
        seconds = seconds[recorded.inside]
        every = np.concatenate([recorded.matrix] + [v.matrix for v in values])
        width = every.shape[1]
        self.levels = [np.unique(every[:, k]) for k in range(width)]
        self.radix = np.array([len(level) + 2 for level in self.levels], dtype=np.int64)
        self.weights = np.ones(width, dtype=np.int64)
        for k in range(width - 2, -1, -1):
            self.weights[k] = self.weights[k + 1] * self.radix[k + 1]
        self.keys: dict[int, np.ndarray] = {}  # depth -> sorted keys
        self.ends: dict[int, np.ndarray] = {}  # depth -> end time of each key
        self.seconds: dict[int, np.ndarray] = {}
        value_depths = {int(d) for v in values for d in np.unique(v.depth)}
        for depth in range(width):
            timed = recorded.depth == depth
            if timed.any():
                keys = self.key(recorded.matrix[timed], np.full(timed.sum(), depth))
                order = np.argsort(keys, kind="stable")
                keys, own = keys[order], seconds[timed][order]
            elif depth in value_depths:
                keys = np.unique(
                    np.concatenate(
                        [
                            self.key(v.matrix[v.depth == depth], v.depth[v.depth == depth])
                            for v in values
                        ]
                    )
                )
                own = np.full(len(keys), np.nan)
            else:
                continue
            self._place(depth, keys, own)

    def key(self, matrix: np.ndarray, depth: np.ndarray, pad_high: bool = False) -> np.ndarray:
        """Coordinates as integers; levels past `depth` count as 0 (or as after the last)."""
        levels = np.arange(matrix.shape[1])
        past = levels[None, :] > depth[:, None]
        ranks = np.empty_like(matrix)
        for k, level in enumerate(self.levels):
            ranks[:, k] = np.searchsorted(level, matrix[:, k]) + 1
        filled = np.where(past, (self.radix - 1)[None, :] if pad_high else 0, ranks)
        return filled @ self.weights

    def _parent(self, depth: int, keys: np.ndarray) -> np.ndarray:
        """The key of each key's enclosing iteration (its coordinates one level up)."""
        below = self.weights[depth - 1]
        return keys // below * below

    def _place(self, depth: int, keys: np.ndarray, own: np.ndarray) -> None:
        """End times: each iteration starts where its parent started (the previous one at
        depth 0) and runs its own seconds; untimed ones split their parent's evenly."""
        if depth == 0 or depth - 1 not in self.keys:
            starts = np.zeros(len(keys))
            parents = np.zeros(len(keys), dtype=np.int64)
        else:
            parents = self._parent(depth, keys)
            above, above_ends, above_seconds = (
                self.keys[depth - 1],
                self.ends[depth - 1],
                self.seconds[depth - 1],
            )
            at = np.searchsorted(above, parents, "right") - 1
            exact = (at >= 0) & (above[np.maximum(at, 0)] == parents)
            starts = np.where(
                exact,
                above_ends[np.maximum(at, 0)] - above_seconds[np.maximum(at, 0)],
                np.where(at >= 0, above_ends[np.maximum(at, 0)], 0.0),
            )
            if np.isnan(own).all():
                group = np.unique(parents, return_inverse=True, return_counts=True)
                counts = group[2][group[1]]
                own = np.where(exact, above_seconds[np.maximum(at, 0)], 0.0) / counts
        own = np.nan_to_num(own)
        new_group = np.r_[True, parents[1:] != parents[:-1]] if len(keys) else np.zeros(0, bool)
        total = np.cumsum(own)
        group_start = np.maximum.accumulate(np.where(new_group, np.arange(len(keys)), 0))
        before = np.where(group_start > 0, total[group_start - 1], 0.0)
        self.keys[depth] = keys
        self.ends[depth] = starts + total - before
        self.seconds[depth] = own

    def x(self, axis: str, coords: _Coordinates) -> np.ndarray:
        if axis == "epoch":
            return self._epoch(coords)
        if axis == "wall":
            return self._wall(coords)
        return self._step(coords)

    def _step(self, coords: _Coordinates) -> np.ndarray:
        """Innermost iterations done: those whose coordinates come before or at these."""
        deepest = max(self.keys)
        probe = self.key(coords.matrix, coords.depth, pad_high=True)
        return np.searchsorted(self.keys[deepest], probe, "right").astype(np.float64)

    def _epoch(self, coords: _Coordinates) -> np.ndarray:
        outer = coords.matrix[:, 0].astype(np.float64)
        if coords.matrix.shape[1] < 2 or 1 not in self.keys:
            return outer + 1
        inner = self.levels[0][self.keys[1] // self.weights[0] - 1]  # each one's epoch
        counts = np.bincount(inner, minlength=int(outer.max(initial=0)) + 1).astype(np.float64)
        typical = counts.max(initial=1.0)
        mine = counts[coords.matrix[:, 0]] if len(counts) else np.zeros(len(outer))
        step = coords.matrix[:, 1].astype(np.float64)
        n = np.maximum(np.where(mine > 0, mine, typical), step + 1)
        return np.where(coords.depth == 0, outer + 1, outer + (step + 1) / n)

    def _wall(self, coords: _Coordinates) -> np.ndarray:
        out = np.full(len(coords.depth), np.nan)
        probe = self.key(coords.matrix, coords.depth)
        for depth, keys in self.keys.items():
            here = coords.depth == depth
            at = np.searchsorted(keys, probe[here], "right") - 1
            out[here] = np.where(at >= 0, self.ends[depth][np.maximum(at, 0)], 0.0)
        return out


# --- the chart's arithmetic ----------------------------------------------------------------


def smooth(y: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's smoothing: an exponential moving average with `weight` on the past,
    debiased at the start (so the first point is not pulled towards zero)."""
    if weight <= 0 or len(y) < 2:
        return y
    import pandas as pd  # here, not at the top: the workbench's first frame does without it

    return pd.Series(y).ewm(alpha=1.0 - weight, adjust=True).mean().to_numpy()


def downsample(
    x: np.ndarray,
    y: np.ndarray,
    lo: float,
    hi: float,
    columns: int,
    rows: int = 0,
    log: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The points in [lo, hi], at most two per screen column: each column's min and max
    (in the order they occur), so a spike one step wide still reaches its column. With
    `rows` (the plot's pixel rows), a column whose min and max share a pixel row (on a
    log scale when `log`) keeps one point: the plotter draws every point it is given,
    and half of them would land on pixels already lit. `x` must be sorted."""
    start, end = np.searchsorted(x, lo, "left"), np.searchsorted(x, hi, "right")
    x, y = x[start:end], y[start:end]
    if len(x) <= 2 * columns or hi <= lo:
        return x, y
    bucket = np.minimum(((x - lo) / (hi - lo) * columns).astype(np.int64), columns - 1)
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    ends = np.r_[starts[1:], len(x)]
    low_at = np.array([s + int(np.argmin(y[s:e])) for s, e in zip(starts, ends)])
    high_at = np.array([s + int(np.argmax(y[s:e])) for s, e in zip(starts, ends)])
    first, second = np.minimum(low_at, high_at), np.maximum(low_at, high_at)
    if rows > 0:
        shown = np.log10(np.where(y > 0, y, np.nan)) if log else y
        span = float(np.nanmax(shown) - np.nanmin(shown)) if np.isfinite(shown).any() else 0.0
        flat = np.abs(shown[high_at] - shown[low_at]) <= span / rows
        second = np.where(flat, first, second)
    picks = np.unique(np.concatenate([first, second]))  # sorted: occurrence order
    return x[picks], y[picks]


__all__ = ["AXES", "AXIS_LABELS", "Curve", "Curves", "downsample", "load_curves", "smooth"]
