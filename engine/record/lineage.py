"""flordb's `load_checkpoint` and `checkpoints`: a past run's state without running it, and
the lineage a training script that starts from it records.

A run's checkpoints are flor.checkpointing's files (`<loop>-<iteration>.pt`, named by that
file name, holding `{object name: state_dict}`) and the script's own torch.save files,
mirrored per main-loop iteration (named by the path the script saved to, `ckpt.pth`, holding
what it saved). `load_checkpoint(run, name)` picks the latest of that name.

Called while a run records, the load is a `lineage` event: this run started from that
checkpoint of that run, numbered by its call among loads of the same name. A replay of the
run is told the recorded loads (ReplaySpec.starts) and answers each call with the same file,
whatever its `tstamp` argument selects by then: the replay starts where the run started.
"""

from __future__ import annotations

import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from florwb_engine import project as projects
from florwb_engine.journal_events import Lineage
from florwb_engine.record import pull, runtime

KIND_CHECKPOINTING = "checkpointing"
KIND_SAVE = "torch.save"
COLUMNS = ["name", "kind", "backend", "path", "loop", "iteration", "bytes"]

_RUN_ID = re.compile(r"^\d{8}-\d{6}(-[0-9a-f]*)?")
# calls of load_checkpoint per (run, name) in this process: a replay matches the n-th call
_CALLS: dict[tuple[str, str | None], int] = {}
_SAID: set[tuple[str, str]] = set()


class LineageError(RuntimeError):
    """A replay asked for a load the run did not record; the message is one line."""


def resolve_run(project: Path, tstamp: Any) -> str:
    """The run id a flordb `tstamp` names: a run id (or unique prefix), or the run's start
    time as `flor.dataframe` gives it (`start_time`, `tstamp`; a Timestamp or its text)."""
    if isinstance(tstamp, str) and _RUN_ID.match(tstamp):
        return pull.find_run_folder(project, tstamp).name
    when = _as_datetime(tstamp)
    from florwb_engine.store import Store

    with Store(project).session() as con:
        rows = con.execute(
            "SELECT run_id FROM runs WHERE start_time = ? ORDER BY run_id", [when]
        ).fetchall()
        if not rows:  # a time given to the second (`2026-11-21 14:35:01`)
            rows = con.execute(
                "SELECT run_id FROM runs WHERE date_trunc('second', start_time) = ? "
                "ORDER BY run_id",
                [when.replace(microsecond=0)],
            ).fetchall()
    if len(rows) == 1:
        return str(rows[0][0])
    if not rows:
        raise pull.CheckpointError(f"no run started at {when.isoformat()}")
    listed = ", ".join(str(r[0]) for r in rows[:5])
    raise pull.CheckpointError(f"several runs started at {when.isoformat()}: {listed}")


def _as_datetime(tstamp: Any) -> datetime:
    if isinstance(tstamp, datetime):  # pandas.Timestamp is one
        return tstamp.replace(tzinfo=None)
    import pandas as pd  # numpy datetime64 and ISO text with nanoseconds, as pandas reads them

    try:
        stamp = pd.Timestamp(tstamp)
    except (TypeError, ValueError):
        stamp = pd.NaT
    if pd.isna(stamp):
        raise pull.CheckpointError(
            f"{tstamp!r} names no run: pass a run id or the run's start_time/tstamp"
        )
    return stamp.to_pydatetime().replace(tzinfo=None)


def checkpoint_rows(project: Path, run_id: str) -> list[dict[str, Any]]:
    """Every checkpoint of a run as flordb's `checkpoints()` rows, oldest first."""
    rows: list[dict[str, Any]] = []
    for c in pull.list_checkpoints(project, run_id):
        if c.kind != KIND_SAVE:
            rows.append(_row(c.path.name, KIND_CHECKPOINTING, c.path, c))
        for path, target in pull.saved_targets(c):
            rows.append(_row(target, KIND_SAVE, path, c))
    return rows


def _row(name: str, kind: str, path: Path, c: pull.CheckpointFile) -> dict[str, Any]:
    size = path.stat().st_size if path.is_file() else 0
    return {
        "name": name,
        "kind": kind,
        "backend": "state_dict",
        "path": str(path),
        "loop": c.loop,
        "iteration": c.iteration,
        "bytes": size,
    }


def checkpoints_frame(project: Path, tstamp: Any) -> Any:
    """flordb's `flor.checkpoints(tstamp)`: a DataFrame of the run's checkpoints, unread.
    A run with no checkpoint gives an empty frame, as in flordb."""
    import pandas as pd

    try:
        rows = checkpoint_rows(project, resolve_run(project, tstamp))
    except pull.CheckpointError as exc:
        if "has no checkpoints" not in str(exc):
            raise
        rows = []
    return pd.DataFrame(rows, columns=COLUMNS)


def choose(rows: list[dict[str, Any]], name: str | None, run_id: str) -> dict[str, Any]:
    """The row `name` picks (the latest of that name); with no name, the one file the script
    saved, else flor.checkpointing's latest. One-line errors list the names there are."""
    if not rows:
        raise pull.CheckpointError(f"run {run_id} has no checkpoint")
    if name is None:
        targets = {r["name"] for r in rows if r["kind"] == KIND_SAVE}
        own = [r for r in rows if r["kind"] == KIND_CHECKPOINTING]
        if len(targets) == 1 and not own:
            return [r for r in rows if r["kind"] == KIND_SAVE][-1]
        if own and not targets:
            return own[-1]
        names = sorted({r["name"] for r in rows if r["kind"] == KIND_SAVE} | {own[-1]["name"]})
        raise pull.CheckpointError(
            f"run {run_id} has several checkpoints ({', '.join(names[:6])}): pass a name "
            "from flor.checkpoints(tstamp)"
        )
    named = [r for r in rows if r["name"] == name]
    if named:
        return named[-1]
    have = sorted({r["name"] for r in rows})
    listed = ", ".join(have[:6]) + (" ..." if len(have) > 6 else "")
    raise pull.CheckpointError(f"run {run_id} has no checkpoint {name!r}; it has: {listed}")


def read(row: dict[str, Any], map_location: Any = "cpu", weights_only: bool = True) -> Any:
    """A checkpoint as its kind holds it: `{object name: state_dict}` for
    flor.checkpointing's, what the script saved for a torch.save."""
    import torch

    # torch.serialization.load: the script's torch.load may be wrapped by florwb's replay
    state = torch.serialization.load(
        row["path"], map_location=map_location, weights_only=weights_only
    )
    if row["kind"] == KIND_CHECKPOINTING and isinstance(state, dict) and "objects" in state:
        return state["objects"]
    return state


def load_checkpoint(
    run: runtime.Run | None,
    tstamp: Any,
    name: str | None = None,
    *,
    map_location: Any = "cpu",
    weights_only: bool = True,
) -> Any:
    """flordb's `flor.load_checkpoint` for `run`, the run this process records or replays
    (None: neither, as in a notebook that only reads)."""
    project = run.project if run is not None else projects.find_project()
    call = 0
    if run is not None:
        key = (run.run_id, name)
        call = _CALLS.get(key, 0)
        _CALLS[key] = call + 1
    if run is not None and run.replayer is not None:
        return _replayed(run, tstamp, name, call, map_location, weights_only)
    run_id = resolve_run(project, tstamp)
    row = choose(checkpoint_rows(project, run_id), name, run_id)
    state = read(row, map_location, weights_only)
    if run is not None:
        runtime.EVENTS.append(
            Lineage(
                call=call,
                name=name,
                parent=run_id,
                checkpoint=row["name"],
                checkpoint_kind=row["kind"],
                loop=row["loop"],
                iteration=row["iteration"],
                path=_relative(project, Path(row["path"])),
            ).to_dict()
        )
    return state


def _relative(project: Path, path: Path) -> str:
    try:
        return str(path.resolve().relative_to(projects.checkpoint_dir(project).resolve()))
    except ValueError:
        return str(path)


def _replayed(
    run: runtime.Run,
    tstamp: Any,
    name: str | None,
    call: int,
    map_location: Any,
    weights_only: bool,
) -> Any:
    """The checkpoint the replayed run loaded at this call, whatever `tstamp` is now."""
    spec = run.replayer.spec  # type: ignore[union-attr]
    for start in spec.starts:
        if start.get("name") == name and int(start.get("call", 0)) == call:
            break
    else:
        raise LineageError(
            f"florwb: flor.load_checkpoint({name!r}) call {call + 1} was not made by run "
            f"{spec.run_id} when it recorded: its replay cannot start from another checkpoint"
        )
    path = Path(str(start["path"]))
    if not path.is_absolute():
        path = Path(spec.checkpoint_dir).parent / path
    now = tstamp if isinstance(tstamp, str) else str(tstamp)
    said = (str(start["parent"]), now)
    if not now.startswith(str(start["parent"])) and said not in _SAID:
        _SAID.add(said)
        print(
            f"florwb: replaying {spec.run_id} from {start['checkpoint']} of run "
            f"{start['parent']}, the checkpoint it loaded when it recorded",
            file=sys.stderr,
        )
    row = {"path": str(path), "kind": start.get("kind") or KIND_SAVE}
    return read(row, map_location, weights_only)


def forget_calls(run_id: str) -> None:
    """A run ended: its load counts go with it."""
    for key in [k for k in _CALLS if k[0] == run_id]:
        del _CALLS[key]
