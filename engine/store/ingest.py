"""Idempotent ingestion of run journals into the catalog.

Each journal's ingested byte offset is stored in the same transaction as the rows it
produced, so an interrupted or repeated ingestion never duplicates or loses rows. Readers
call `ingest_pending` before every query: the user never runs an import step, and a run
that just ended (or was killed) is visible to the next command. Rows go in as whole
numpy columns; nothing here loops over log rows in Python unless a batch holds strings.
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from itertools import chain
from pathlib import Path

import duckdb
import numpy as np

from florwb_engine import journal, processes
from florwb_engine.journal import VTYPES
from florwb_engine.store import run_context
from florwb_engine.store.db import fetch_one
from florwb_engine.store.schema import RECORDED, ensure_loop_columns, quote

_NUMERIC = (float, int, bool)
_FLOATS = frozenset({float})
_NUMBERS = frozenset({float, int, bool})
_VTYPE_CODE = {v: i for i, v in enumerate(VTYPES)}
_TYPE_CODE = {float: 0, int: 1, bool: 2, str: 3, type(None): 4}


@dataclass
class IngestReport:
    rows: int = 0
    journals: int = 0
    errors: list[str] = field(default_factory=list)


def ingest_pending(con: duckdb.DuckDBPyConnection, journal_dir: Path) -> IngestReport:
    report = IngestReport()
    if not journal_dir.is_dir():
        return report
    files = sorted(journal_dir.glob(f"*{journal.SUFFIX}"))
    if not files:
        return report
    # Rows carry their own order (seq); letting DuckDB write them in parallel is faster.
    con.execute("SET SESSION preserve_insertion_order = false")
    states = {
        row[0]: row[1:]
        for row in con.execute(
            'SELECT file, run_id, source, "offset", next_seq, done FROM journals'
        ).fetchall()
    }
    for path in files:
        state = states.get(path.name)
        if state is not None and state[4]:
            continue
        try:
            while state is None or not state[4]:  # until nothing new (a live run) or done
                rows, new_state = _ingest_one(con, path, state)
                if new_state == state:
                    break
                report.rows += rows
                state = new_state
            report.journals += 1
        except (duckdb.Error, ValueError, TypeError, KeyError, EOFError) as exc:
            _rollback(con)
            report.errors.append(f"{path.name}: {str(exc).splitlines()[0]}")
    con.execute("SET SESSION preserve_insertion_order = true")
    return report


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    with contextlib.suppress(duckdb.Error):  # no transaction was open
        con.execute("ROLLBACK")


@dataclass
class _Keys:
    run_id: str | None
    source: str
    run_key: int = 0
    source_key: int = 0


def _ingest_one(
    con: duckdb.DuckDBPyConnection, path: Path, state: tuple | None
) -> tuple[int, tuple | None]:
    """Ingest what is new in one journal; returns (rows, new state)."""
    run_id, source, offset, next_seq, _done = state or (None, RECORDED, 0, 0, False)
    # Checked before reading: a process found dead now wrote its last bytes already.
    dead = run_id is not None and _is_dead(con, run_id)
    batch = journal.read_from(path, offset)
    if not batch:
        if not dead:
            return 0, state
        con.execute("BEGIN")
        con.execute(
            "UPDATE runs SET status = 'killed' WHERE run_id = ? AND status = 'running'",
            [run_id],
        )
        _save_state(con, path.name, run_id, source, offset, next_seq, True)
        con.execute("COMMIT")
        return 0, (run_id, source, offset, next_seq, True)
    con.execute("BEGIN")
    keys = _Keys(run_id, source)
    done = False
    entries = []
    for event in batch.events:
        kind = event.get("kind")
        if kind == "start":
            keys.run_id = event["run_id"]
            keys.source = event.get("source", RECORDED)
        if kind == "loop":
            entries.append(event)
        else:
            done = _apply_event(con, keys, event) or done
    if keys.run_id is None:
        raise ValueError("journal has no start event")
    _resolve_keys(con, keys)
    _insert_loop_entries(con, keys, entries)
    _insert_iterations(con, keys, batch.timings)
    rows = _insert_logs(con, keys, batch.logs, next_seq)
    new_state = (keys.run_id, keys.source, batch.end_offset, next_seq + rows, done)
    _save_state(con, path.name, *new_state)
    con.execute("COMMIT")
    return rows, new_state


def _resolve_keys(con, keys: _Keys) -> None:
    row = fetch_one(con, "SELECT run_key FROM runs WHERE run_id = ?", [keys.run_id])
    if row is None:
        raise ValueError(f"run {keys.run_id} is unknown")
    keys.run_key = row[0]
    found = fetch_one(con, "SELECT source_key FROM sources WHERE source = ?", [keys.source])
    if found is None:
        found = fetch_one(
            con,
            "INSERT INTO sources SELECT coalesce(max(source_key), 0) + 1, ? FROM sources "
            "RETURNING source_key",
            [keys.source],
        )
    keys.source_key = found[0]


def _save_state(con, file, run_id, source, offset, next_seq, done) -> None:
    con.execute(
        "INSERT OR REPLACE INTO journals VALUES (?, ?, ?, ?, ?, ?)",
        [file, run_id, source, offset, next_seq, done],
    )


def _ts(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds)


def _apply_event(con, keys: _Keys, e: dict) -> bool:
    """Apply one run event; True when it ends the journal."""
    kind = e.get("kind")
    run_id = keys.run_id
    if kind == "start" and keys.source == RECORDED:
        con.execute(
            "INSERT OR IGNORE INTO runs (run_id, run_key, script, argv, cwd, host, pid, "
            "pid_ticks, python, start_time, status) SELECT ?, coalesce(max(run_key), 0) + 1, "
            "?, ?, ?, ?, ?, ?, ?, ?, 'running' FROM runs",
            [
                run_id,
                e.get("script"),
                json.dumps(e.get("argv", [])),
                e.get("cwd"),
                e.get("host"),
                e.get("pid"),
                e.get("pid_ticks"),
                e.get("python"),
                _ts(e.get("time")),
            ],
        )
        if "context" in e:
            run_context.apply(con, run_id, e["context"])
    elif kind == "version":
        con.execute(
            "INSERT OR IGNORE INTO versions VALUES (?, now()::TIMESTAMP, ?, ?, ?)",
            [e["version"], e.get("n_files"), e.get("n_bytes"), json.dumps(e.get("skipped", []))],
        )
        con.execute(
            "UPDATE runs SET version = ?, git_head = ?, git_branch = ?, git_dirty = ? "
            "WHERE run_id = ?",
            [e["version"], e.get("git_head"), e.get("git_branch"), e.get("git_dirty"), run_id],
        )
    elif kind == "version_error":
        con.execute("UPDATE runs SET message = ? WHERE run_id = ?", [e.get("error"), run_id])
    elif kind == "arg":
        value, text, vtype = _one_value(e.get("value"))
        con.execute(
            "INSERT OR REPLACE INTO args VALUES (?, ?, ?, ?, ?)",
            [run_id, e["name"], value, text, vtype],
        )
    elif kind == "checkpoint":
        con.execute(
            "INSERT INTO checkpoints VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                run_id,
                e["loop"],
                e["iteration"],
                e.get("ctx_id"),
                e["path"],
                e.get("bytes"),
                e.get("snapshot_s"),
                e.get("write_s"),
                _ts(e.get("time")),
            ],
        )
    elif kind == "end":
        if keys.source == RECORDED:
            con.execute(
                "UPDATE runs SET end_time = ?, status = ?, exception = ?, "
                "message = coalesce(?, message) WHERE run_id = ?",
                [_ts(e.get("time")), e["status"], e.get("exception"), e.get("message"), run_id],
            )
            if "context" in e:
                run_context.apply(con, run_id, e["context"])
        return True
    return False


def _one_value(v) -> tuple[float | None, str | None, str]:
    if type(v) is tuple:
        return None, v[1], v[0]
    if type(v) in _NUMERIC:
        return float(v), None, VTYPES[_TYPE_CODE[type(v)]]
    if type(v) is str:
        return None, v, "str"
    return None, None, "none"


def _is_dead(con, run_id: str) -> bool:
    """A run with no end event whose process is gone from this host was killed."""
    row = fetch_one(con, "SELECT host, pid, pid_ticks, status FROM runs WHERE run_id = ?", [run_id])
    if row is None or row[3] != "running" or row[0] != socket.gethostname():
        return False
    _host, pid, ticks, _status = row
    return pid is not None and processes.is_gone(pid, ticks)


def _insert_loop_entries(con, keys: _Keys, entries: list[dict]) -> None:
    """One row per loop entry, holding the outer loops' coordinates for its iterations."""
    if not entries:
        return
    mapping = ensure_loop_columns(con, {n for e in entries for n in e["names"]})
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for e in entries:
        groups[tuple(e["names"])].append(e)
    for names, group in groups.items():
        outer_cols = [mapping[n] for n in names[:-1]]
        frame = {  # numpy columns, not pandas: importing pandas costs every reader ~0.3 s
            "entry_id": np.array([e["entry"] for e in group], dtype=np.int64),
            "total": np.array([_or_minus_one(e.get("total")) for e in group], dtype=np.int64),
            **{
                f"c{d}": np.array([e["outer"][d] for e in group], dtype=np.int64)
                for d in range(len(outer_cols))
            },
        }
        con.register("florwb_entries", frame)
        con.execute(
            f"INSERT INTO loop_entries (run_key, source_key, entry_id, loop, path, depth, total, "
            f"own_column{''.join(', ' + quote(c) for c in outer_cols)}) SELECT ?, ?, entry_id, "
            f"?, ?, ?, NULLIF(total, -1), ?{''.join(f', c{d}' for d in range(len(outer_cols)))} "
            f"FROM florwb_entries",
            [
                keys.run_key,
                keys.source_key,
                names[-1],
                "/".join(names),
                len(names) - 1,
                mapping[names[-1]],
            ],
        )
        con.unregister("florwb_entries")


_ENTRY_OF = (
    "LEFT JOIN loop_entries e ON e.run_key = ? AND e.source_key = ? AND "
    f"e.entry_id = {{ctx}} >> {journal.ENTRY_SHIFT}"
)


def _repeats(name_keys: np.ndarray, ctx_ids: np.ndarray) -> dict[str, np.ndarray]:
    """(name_key, ctx_id, n): values logged again in an iteration of the same name.

    Sorting by name keeps each name's rows in log order, so a repeat is the same ctx_id
    twice in a row; numpy does it in a few ms per million rows, DuckDB's DISTINCT count
    took a third of the ingestion time."""
    order = np.argsort(name_keys, kind="stable")
    keys, ctxs = name_keys[order], ctx_ids[order]
    again = np.flatnonzero((keys[1:] == keys[:-1]) & (ctxs[1:] == ctxs[:-1])) + 1
    if not len(again):
        empty = np.empty(0, dtype=np.int64)
        return {"name_key": empty, "ctx_id": empty, "n": empty}
    pairs, counts = np.unique(
        np.stack([keys[again].astype(np.int64), ctxs[again]]), axis=1, return_counts=True
    )
    return {"name_key": pairs[0], "ctx_id": pairs[1], "n": counts.astype(np.int64)}


def _or_minus_one(total: int | None) -> int:
    return -1 if total is None else total


def _insert_iterations(con, keys: _Keys, blocks: list) -> None:
    if not blocks:
        return
    frame = {
        name: np.concatenate([np.frombuffer(b[i], dtype=dtype) for b in blocks])
        for i, (name, dtype) in enumerate(
            (("ctx_id", np.int64), ("wait_s", np.float64), ("iter_s", np.float64))
        )
    }
    con.register("florwb_iterations", frame)
    con.execute(
        "INSERT INTO iteration_rows SELECT ?, ?, ctx_id, wait_s, iter_s FROM florwb_iterations",
        [keys.run_key, keys.source_key],
    )
    con.unregister("florwb_iterations")


def split_values(values: list) -> tuple[np.ndarray, list | None, np.ndarray]:
    """(numbers, texts or None, vtype codes) for one block of logged values.

    All-float blocks (the usual case) convert in C; strings, None and JSON need a pass in
    Python. Ints beyond float range keep their exact digits as text.
    """
    types = set(map(type, values))
    if types <= _FLOATS:
        return np.array(values, dtype=np.float64), None, np.zeros(len(values), np.uint8)
    if types <= _NUMBERS:
        with contextlib.suppress(OverflowError):  # ints beyond float: the pass below keeps digits
            number = np.array(values, dtype=np.float64)
            codes = np.fromiter(map(_TYPE_CODE.__getitem__, map(type, values)), np.uint8)
            return number, None, codes
    number = np.array([_as_float(v) for v in values], dtype=np.float64)
    text = [_as_text(v) for v in values]
    codes = np.fromiter(
        (_TYPE_CODE[type(v)] if type(v) is not tuple else _VTYPE_CODE[v[0]] for v in values),
        np.uint8,
        len(values),
    )
    return number, text, codes


def _as_float(v) -> float | None:
    if type(v) in _NUMERIC:
        try:
            return float(v)
        except OverflowError:
            return None
    return None


def _as_text(v) -> str | None:
    if type(v) is str:
        return v
    if type(v) is tuple:
        return v[1]
    if type(v) is int and not -(2**63) <= v < 2**63:
        return str(v)
    return None


def _log_columns(values_blocks: list[list]) -> dict:
    values, texts, vtypes = [], [], []
    for block in values_blocks:
        number, text, code = split_values(block)
        values.append(number)
        texts.append(text)
        vtypes.append(code)
    value = np.concatenate(values)
    vtype = np.concatenate(vtypes)
    text = None
    if any(t is not None for t in texts):
        text = list(
            chain.from_iterable(
                t if t is not None else [None] * len(v) for t, v in zip(texts, values)
            )
        )
    nan = np.isnan(value) & (vtype <= 2)
    return {"value": value, "vtype": vtype, "text": text, "nan": nan if nan.any() else None}


def _name_keys(con, names: set[str]) -> dict[str, int]:
    listed = sorted(names)
    found = dict(
        con.execute(
            "SELECT name, name_key FROM name_keys WHERE name IN (SELECT unnest(?))", [listed]
        ).fetchall()
    )
    missing = [n for n in listed if n not in found]
    if missing:
        start = con.execute("SELECT coalesce(max(name_key), 0) + 1 FROM name_keys").fetchall()[0][0]
        new = {n: start + i for i, n in enumerate(missing)}
        con.executemany("INSERT INTO name_keys VALUES (?, ?)", [[k, n] for n, k in new.items()])
        found.update(new)
    return found


def _insert_logs(con, keys: _Keys, blocks: list, first_seq: int) -> int:
    if not blocks:
        return 0
    unpacked = [journal.unpack_logs(b) for b in blocks]
    names = list(chain.from_iterable(u[0] for u in unpacked))
    n = len(names)
    index = _name_keys(con, set(names))
    cols = _log_columns([u[1] for u in unpacked])
    frame = {
        "seq": np.arange(first_seq, first_seq + n, dtype=np.int64),
        "name_key": np.fromiter(map(index.__getitem__, names), dtype=np.int32, count=n),
        "value": cols["value"],
        "ctx_id": np.fromiter(chain.from_iterable(u[2] for u in unpacked), np.int64, n),
    }
    vtype_sql = "0::UTINYINT"  # all floats, the usual case: a constant, not a column to copy
    if cols["vtype"].any():
        frame["vtype"] = cols["vtype"]
        vtype_sql = "b.vtype"
    value_sql = "b.value"
    if cols["nan"] is not None:  # numpy NaN means NULL to DuckDB: keep logged NaNs apart
        frame["nan"] = cols["nan"]
        value_sql = "CASE WHEN b.nan THEN 'NaN'::DOUBLE ELSE b.value END"
    text_sql = "NULL"
    if cols["text"] is not None:
        frame["text"] = np.array(cols["text"], dtype=object)
        text_sql = "b.text"
    con.register("florwb_logs", frame)
    con.execute(
        f"INSERT INTO log_rows SELECT ?, ?, b.seq, b.name_key, {value_sql}, {text_sql}, "
        f"{vtype_sql}, b.ctx_id FROM florwb_logs b",
        [keys.run_key, keys.source_key],
    )
    # n_repeat counts values logged again in an iteration that already had one of that
    # name: while it is 0, the pivot may take any value of an iteration instead of the
    # last one (faster). A name's iterations only grow (ctx ids increase along a loop
    # path), so an iteration split across two batches shows as first_ctx = last_ctx.
    con.register("florwb_repeats", _repeats(frame["name_key"], frame["ctx_id"]))
    con.execute(
        "INSERT INTO name_stats SELECT ?, ?, g.name_key, g.path, g.n, g.n_numeric, g.n_int, "
        "coalesce(r.n, 0) + coalesce((g.first_ctx = s.last_ctx)::INT, 0), g.last_ctx FROM ("
        "SELECT b.name_key, coalesce(e.path, '') AS path, count(*) AS n, "
        f"sum(({vtype_sql} <= 2)::INT) AS n_numeric, sum(({vtype_sql} IN (1, 2))::INT) AS n_int, "
        "min(b.ctx_id) AS first_ctx, max(b.ctx_id) AS last_ctx FROM florwb_logs b "
        f"{_ENTRY_OF.format(ctx='b.ctx_id')} GROUP BY ALL) g "
        "LEFT JOIN (SELECT r.name_key, coalesce(e.path, '') AS path, sum(r.n) AS n "
        f"FROM florwb_repeats r {_ENTRY_OF.format(ctx='r.ctx_id')} GROUP BY ALL) r "
        "ON r.name_key = g.name_key AND r.path = g.path "
        "LEFT JOIN name_stats s ON s.run_key = ? AND s.source_key = ? AND "
        "s.name_key = g.name_key AND s.path = g.path ON CONFLICT DO UPDATE "
        "SET n = n + excluded.n, n_numeric = n_numeric + excluded.n_numeric, "
        "n_int = n_int + excluded.n_int, n_repeat = n_repeat + excluded.n_repeat, "
        "last_ctx = greatest(last_ctx, excluded.last_ctx)",
        [keys.run_key, keys.source_key] * 4,
    )
    con.unregister("florwb_repeats")
    con.unregister("florwb_logs")
    return n
