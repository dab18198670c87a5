"""Metric curves of chosen runs: x/y per run and source, for the workbench's chart view.

One read returns, for one logged name and a set of runs, each run's numeric values from the
one source the history shows too (florwb_engine.store.history_values.CHOSEN: recorded when
the run recorded the name, else the replay that filled it in; a replay's re-check of a
recorded name is not drawn twice), with x on one of three axes shared by all runs:

- `step`: iterations of the run's innermost loop done when the value was logged (a value
  logged once per epoch after its steps sits at the steps done by the end of that epoch,
  one logged before them at the steps done when the epoch began);
- `epoch`: epochs done (the outer loop), fractional inside an epoch: step i of n in epoch e
  is at e + (i + 1) / n, a value logged after the inner loop at e + 1, before it at e;
- `wall`: seconds from the start of the run's first loop iteration to the end of the
  iteration the value was logged in (to its start for a value logged before its inner
  loops), from the recorded iteration timings.

"Before its inner loops" is read from the recording's order: a recorded value whose seq
comes before every row logged inside the inner loops of its iteration. An iteration whose
inner loops logged nothing gives no such order, nor do a replay's values (its segments'
journals number their rows each on their own, and a restored iteration skips its inner
loops): those count as logged after them.

NaN and infinite values are kept (y is NaN or ±inf there): the chart breaks its lines at
them and counts them, rather than joining their neighbours as if nothing happened. Each
point also carries its step and wall time whatever the axis, for the chart's cursor.

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
from florwb_engine.store import system_metrics
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
    y: np.ndarray  # NaN / ±inf where the run logged them
    step: np.ndarray | None = None  # each point's steps done, whatever the axis
    wall: np.ndarray | None = None  # each point's seconds of training

    @property
    def replayed(self) -> bool:
        return self.source != RECORDED

    @property
    def finite(self) -> np.ndarray:
        return np.isfinite(self.y)


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
        metrics = _numeric_names(con, list(keys)) + system_metrics.names(con, list(keys.values()))
        chosen = metric if metric in metrics else (metrics[0] if metrics else None)
        if chosen is None:
            return Curves(None, axis, metrics=metrics)
        if chosen.startswith(system_metrics.PREFIX):
            return _system_curves(con, keys, chosen, axis, metrics)
        named = con.execute("SELECT name_key FROM name_keys WHERE name = ?", [chosen]).fetchall()
        name_key = named[0][0]
        prefixes = _entry_prefixes(con, list(keys))
        values = con.execute(
            f"""
            SELECT l.run_key, l.source_key, l.ctx_id >> {ENTRY_SHIFT} AS entry,
                   l.ctx_id & {ITERATION_MASK}, l.value, l.seq
            FROM log_rows l JOIN ({CHOSEN}) c USING (run_key, name_key, source_key)
            WHERE l.name_key = ? AND l.run_key IN (SELECT unnest(?)) AND l.vtype <= 2
            ORDER BY l.run_key, l.source_key, l.seq
            """,
            [name_key, list(keys)],
        ).fetchnumpy()
        # the journal order is read only for runs with a recorded value outside their
        # innermost loop (an epoch-level value): per-step metrics never need it
        recorded = values["source_key"] == 0
        shallow = [
            k
            for k in keys
            if prefixes.shallow(k, values["entry"][recorded & (values["run_key"] == k)])
        ]
        first_inside = _first_seq_per_entry(con, shallow) if shallow else {}
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
    run_col, source_col, entry_col, iter_col, value_col, seq_col = (values[k] for k in values)
    t_run, t_entry, t_iter, t_dur = (timings[k] for k in timings)
    for run_key in sorted(keys, key=lambda k: keys[k]):
        mine = run_col == run_key
        if not mine.any():
            continue
        found = {}
        for source_key in np.unique(source_col[mine]):
            rows = mine & (source_col == source_key)
            coords = prefixes.coordinates(run_key, int(source_key), entry_col[rows], iter_col[rows])
            coords.early = prefixes.before_inner_loops(
                run_key,
                int(source_key),
                first_inside.get((run_key, int(source_key)), {}) if source_key == 0 else {},
                coords,
                seq_col[rows][coords.inside],
            )
            found[int(source_key)] = coords
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
            step = x if axis == "step" else frame.x("step", coords)
            wall = x if axis == "wall" else frame.x("wall", coords)
            out.curves.append(
                Curve(keys[run_key], source, x[order], y[order], step[order], wall[order])
            )
    return out


def _system_curves(
    con: duckdb.DuckDBPyConnection,
    keys: dict[int, str],
    metric: str,
    axis: str,
    metrics: list[str],
) -> Curves:
    """A sampled system figure: x is seconds since the run started on the wall axis; on
    the step and epoch axes, the steps (epochs) done by then, read off the recorded
    iterations' end times (a sample before the first iteration ended sits at 0)."""
    out = Curves(metric, axis, metrics=metrics)
    found = system_metrics.series(con, list(keys.values()), metric)
    by_id = {run_id: run_key for run_key, run_id in keys.items()}
    prefixes = _entry_prefixes(con, list(keys)) if axis != "wall" else None
    for run_id in sorted(found):
        seconds, y = found[run_id]
        x = seconds
        if prefixes is not None:
            x = _done_by(con, prefixes, by_id[run_id], seconds, axis)
        out.curves.append(Curve(run_id, RECORDED, x, y, None, seconds))
    return out


def _done_by(
    con: duckdb.DuckDBPyConnection,
    prefixes: _Prefixes,
    run_key: int,
    seconds: np.ndarray,
    axis: str,
) -> np.ndarray:
    """Steps (or epochs) the run had done `seconds` after its start."""
    timings = con.execute(
        f"""
        SELECT ctx_id >> {ENTRY_SHIFT}, ctx_id & {ITERATION_MASK}, wait_s + iter_s
        FROM iteration_rows WHERE source_key = 0 AND run_key = ?
        """,
        [run_key],
    ).fetchnumpy()
    entry, iteration, duration = (timings[k] for k in timings)
    recorded = prefixes.coordinates(run_key, 0, entry, iteration)
    if not recorded.inside.any():
        return np.zeros(len(seconds))
    frame = _Timeline(recorded, duration.astype(np.float64), [])
    depth = 0 if axis == "epoch" else max(frame.keys)
    ends = frame.ends[depth]
    done = np.arange(1, len(ends) + 1, dtype=np.float64)
    return np.interp(seconds, np.r_[0.0, ends], np.r_[0.0, done])


def _first_seq_per_entry(
    con: duckdb.DuckDBPyConnection, run_keys: list[int]
) -> dict[tuple[int, int], dict[int, int]]:
    """The first seq logged in each loop entry, per run and source: what tells a value
    logged before an iteration's inner loops from one logged after them."""
    rows = con.execute(
        f"""
        SELECT run_key, source_key, ctx_id >> {ENTRY_SHIFT} AS entry, min(seq)
        FROM log_rows WHERE run_key IN (SELECT unnest(?)) AND ctx_id >= 0
        GROUP BY ALL
        """,
        [run_keys],
    ).fetchall()
    out: dict[tuple[int, int], dict[int, int]] = {}
    for run_key, source_key, entry, seq in rows:
        out.setdefault((int(run_key), int(source_key)), {})[int(entry)] = int(seq)
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
    early: np.ndarray | None = None  # bool, n: logged before its iteration's inner loops


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

    def shallow(self, run_key: int, entries: np.ndarray) -> bool:
        """Whether any of these recorded entries sits outside the run's innermost loop."""
        table = self.tables.get((run_key, 0))
        if table is None or not len(entries):
            return False
        depths = table[0]
        entries = entries.astype(np.int64)
        known = entries[(entries >= 0) & (entries < len(depths))]
        found = depths[known]
        return bool(((found >= 0) & (found < self.width - 1)).any())

    def before_inner_loops(
        self,
        run_key: int,
        source_key: int,
        first_seq: dict[int, int],
        coords: _Coordinates,
        seqs: np.ndarray,
    ) -> np.ndarray:
        """Which values came before every row logged inside their iteration's inner loops
        (`first_seq`: entry -> its first seq; `seqs`: the values' own, inside rows only)."""
        early = np.zeros(len(coords.depth), dtype=bool)
        shallow = coords.depth < self.width - 1
        table = self.tables.get((run_key, source_key))
        if not shallow.any() or not first_seq or table is None:
            return early
        depths, prefixes = table
        first: dict[tuple[int, ...], int] = {}  # (level, enclosing iterations) -> first seq
        for entry, seq in first_seq.items():
            if not 0 <= entry < len(depths):
                continue
            depth = int(depths[entry])
            for level in range(1, depth + 1):
                key = (level, *prefixes[entry, :level].tolist())
                if seq < first.get(key, seq + 1):
                    first[key] = seq
        for i in np.flatnonzero(shallow):
            level = int(coords.depth[i]) + 1
            inner = first.get((level, *coords.matrix[i, :level].tolist()))
            early[i] = inner is not None and int(seqs[i]) < inner
        return early


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
        early = _early(coords)
        if early.any():  # before its inner loops: none of them done yet
            probe = np.where(early, self.key(coords.matrix, coords.depth), probe)
        return np.searchsorted(self.keys[deepest], probe, "right").astype(np.float64)

    def _epoch(self, coords: _Coordinates) -> np.ndarray:
        outer = coords.matrix[:, 0].astype(np.float64)
        early = _early(coords)
        if coords.matrix.shape[1] < 2 or 1 not in self.keys:
            return outer + np.where(early, 0.0, 1.0)
        inner = self.levels[0][self.keys[1] // self.weights[0] - 1]  # each one's epoch
        counts = np.bincount(inner, minlength=int(outer.max(initial=0)) + 1).astype(np.float64)
        typical = counts.max(initial=1.0)
        mine = counts[coords.matrix[:, 0]] if len(counts) else np.zeros(len(outer))
        step = coords.matrix[:, 1].astype(np.float64)
        n = np.maximum(np.where(mine > 0, mine, typical), step + 1)
        done = np.where(early, step, step + 1)  # early: before that step's inner loops
        return np.where(coords.depth == 0, outer + np.where(early, 0.0, 1.0), outer + done / n)

    def _wall(self, coords: _Coordinates) -> np.ndarray:
        out = np.full(len(coords.depth), np.nan)
        probe = self.key(coords.matrix, coords.depth)
        early = _early(coords)
        for depth, keys in self.keys.items():
            here = coords.depth == depth
            at = np.maximum(np.searchsorted(keys, probe[here], "right") - 1, 0)
            end = self.ends[depth][at]
            start = end - self.seconds[depth][at]
            found = np.searchsorted(keys, probe[here], "right") >= 1
            out[here] = np.where(found, np.where(early[here], start, end), 0.0)
        return out


def _early(coords: _Coordinates) -> np.ndarray:
    if coords.early is None:
        return np.zeros(len(coords.depth), dtype=bool)
    return coords.early


# --- the chart's arithmetic ----------------------------------------------------------------


def smooth(y: np.ndarray, weight: float) -> np.ndarray:
    """TensorBoard's smoothing: an exponential moving average with `weight` on the past,
    debiased at the start (so the first point is not pulled towards zero)."""
    if weight <= 0 or len(y) < 2:
        return y
    import pandas as pd  # here, not at the top: the workbench's first frame does without it

    finite = np.isfinite(y)
    if finite.all():
        return pd.Series(y).ewm(alpha=1.0 - weight, adjust=True).mean().to_numpy()
    # NaN / inf stay where they are (the chart breaks its line there); the average runs
    # over the finite values only, as TensorBoard's does
    out = y.astype(np.float64, copy=True)
    out[finite] = pd.Series(y[finite]).ewm(alpha=1.0 - weight, adjust=True).mean().to_numpy()
    return out


def finite_runs(y: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each stretch of finite values: where the chart's line may run."""
    finite = np.r_[False, np.isfinite(y), False]
    edges = np.flatnonzero(finite[1:] != finite[:-1])
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


def downsample(
    x: np.ndarray,
    y: np.ndarray,
    lo: float,
    hi: float,
    columns: int,
    rows: int = 0,
    log: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The points `downsample_indices` keeps."""
    picks = downsample_indices(x, y, lo, hi, columns, rows, log)
    return x[picks], y[picks]


def downsample_indices(
    x: np.ndarray,
    y: np.ndarray,
    lo: float,
    hi: float,
    columns: int,
    rows: int = 0,
    log: bool = False,
) -> np.ndarray:
    """Indices of the points in [lo, hi], at most two per screen column: each column's
    min and max (in the order they occur), so a spike one step wide still reaches its
    column. With `rows` (the plot's pixel rows), a column whose min and max share a pixel
    row (on a log scale when `log`) keeps one point: the plotter draws every point it is
    given, and half of them would land on pixels already lit. `x` must be sorted, `y`
    finite.

    The nearest point outside [lo, hi] on each side is kept too: a zoomed-in sparse
    series then still draws its lines to the edges instead of a lone dot (the plot clips
    them at the window)."""
    start = max(int(np.searchsorted(x, lo, "left")) - 1, 0)
    end = min(int(np.searchsorted(x, hi, "right")) + 1, len(x))
    if end - start <= 2 * columns or hi <= lo:
        return np.arange(start, end)
    x, y = x[start:end], y[start:end]
    bucket = np.clip(((x - lo) / (hi - lo) * columns).astype(np.int64), 0, columns - 1)
    # sorted by column, then value: each column's first is its min, its last its max
    order = np.lexsort((y, bucket))
    ordered = bucket[order]
    firsts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    lasts = np.r_[firsts[1:], len(order)] - 1
    low_at, high_at = order[firsts], order[lasts]
    first, second = np.minimum(low_at, high_at), np.maximum(low_at, high_at)
    if rows > 0:
        shown = np.log10(np.where(y > 0, y, np.nan)) if log else y
        span = float(np.nanmax(shown) - np.nanmin(shown)) if np.isfinite(shown).any() else 0.0
        flat = np.abs(shown[high_at] - shown[low_at]) <= span / rows
        second = np.where(flat, first, second)
    return start + np.unique(np.concatenate([first, second]))  # sorted: occurrence order


__all__ = [
    "AXES",
    "AXIS_LABELS",
    "Curve",
    "Curves",
    "downsample",
    "downsample_indices",
    "finite_runs",
    "load_curves",
    "smooth",
]
