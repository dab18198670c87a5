"""florwb: hindsight logging for model training.

`import florwb as flor` is a drop-in for `import flordb as flor`. Importing this package
stays cheap (no DuckDB, pandas, torch or textual): those load only when a call needs them.
"""

from __future__ import annotations

import sys
from typing import Any

from florwb_engine.record import (
    arg,
    checkpointing,
    commit,
    iteration,
    load_checkpoint,
    log,
    loop,
    set_checkpoint_budget,
    set_ckpt_interval,
)

__all__ = [
    "arg",
    "checkpointing",
    "checkpoints",
    "cleanup",
    "commit",
    "dataframe",
    "io",
    "iteration",
    "load",
    "load_checkpoint",
    "load_into",
    "log",
    "loop",
    "query",
    "replay",
    "restore",
    "set_capture",
    "set_checkpoint_budget",
    "set_ckpt_interval",
]
__version__ = "0.1.0"


def _store() -> Any:
    from florwb_engine import project
    from florwb_engine.record import runtime
    from florwb_engine.store import Store

    run = runtime.current()
    if run is not None:
        run.try_flush()  # a script reading its own logs sees them
        return Store(run.project)
    return Store(project.find_project())


def dataframe(*names: str, diverged: bool = False) -> Any:
    """pandas DataFrame: one row per run x loop coordinates, one column per name; with
    no names, as flordb's, every name logged outside any loop (one row per run).

    Values of diverged replays are left out with a warning saying how many;
    `diverged=True` puts them in, named in a `diverged` column."""
    from florwb_engine.store.flordb_frame import flordb_columns, run_level_names

    store = _store()
    with store.pinned():  # one snapshot for the frame and the queries that complete it
        if not names:
            names = run_level_names(store)
            if not names:
                import pandas as pd

                print(
                    "florwb: no value was logged outside a loop: nothing to show", file=sys.stderr
                )
                return pd.DataFrame()
        frame = flordb_columns(store, store.dataframe(*names, diverged=diverged), names)
    withheld = frame.attrs.get("withheld")
    if withheld:
        import warnings

        warnings.warn(withheld.note("diverged=True"), stacklevel=2)
    return frame


def query(sql: str) -> Any:
    """pandas DataFrame with the result of read-only SQL over the project's catalog."""
    return _store().query(sql)


def io(run_id: str | None = None, grep: str | None = None, *, channel: str | None = None) -> Any:
    """pandas DataFrame of what runs printed (stdout, stderr) and logged (`logging`, the
    level as channel): one row per line with its run, loop coordinates and repeat count
    `n`. `run_id` (a unique prefix works) picks one run; `grep` is a regular expression.
    flordb's channels pick lines as there: `flor.io("io::stdout")`, `"io::log"` (every
    logging level), `"io::log::error"` (one level)."""
    from florwb_engine.store.console import read_io

    if run_id is not None and run_id.startswith("io::") and channel is None:
        run_id, channel = None, run_id
    frame = read_io(_store(), run_id, grep)
    if channel is None:
        return frame
    kind = channel.removeprefix("io::")
    if kind == "log":
        keep = ~frame["channel"].isin(["stdout", "stderr"])
    else:
        keep = frame["channel"] == kind.removeprefix("log::").lower()
    return frame[keep].reset_index(drop=True)


def set_capture(
    enabled: bool | None = None,
    max_line: int | None = None,
    max_records: int | None = None,
    **_ignored: Any,
) -> None:
    """flordb's switch for keeping printed and logged lines: `set_capture(False)` before
    the run starts (or FLORWB_CAPTURE=0 / FLOR_CAPTURE=0) keeps none; `max_line` characters
    per line, `max_records` lines per run."""
    from florwb_engine.record import capture

    if enabled is not None:
        capture.settings.enabled = bool(enabled)
        if not enabled:
            capture.uninstall()
    if max_line is not None:
        capture.settings.max_line = int(max_line)
    if max_records is not None:
        capture.settings.max_lines = int(max_records)


def _project(project: Any = None) -> Any:
    from pathlib import Path

    from florwb_engine import project as projects
    from florwb_engine.record import runtime

    if project is not None:
        return Path(project)
    run = runtime.current()
    return run.project if run is not None else projects.find_project()


def load(
    run_id: str,
    loop_iteration: int | None = None,
    map_location: Any = None,
    *,
    loop: str | None = None,
    project: Any = None,
) -> dict[str, Any]:
    """State_dicts (name -> state_dict, names as given to `flor.checkpointing`) of a past
    run at an iteration of its outer loop, the latest checkpointed one by default; read
    with `torch.load(weights_only=True)`. `run_id` may be a unique prefix."""
    from florwb_engine.record import pull

    return pull.load(
        _project(project), run_id, loop_iteration, loop=loop, map_location=map_location
    )


def load_into(
    run_id: str,
    iteration: int | None = None,
    *,
    map_location: Any = None,
    rng: bool = False,
    loop: str | None = None,
    project: Any = None,
    **objects: Any,
) -> Any:
    """Restore objects in place from a past run's checkpoint:
    `flor.load_into(run, model=net, optimizer=opt, epoch=3)`. Objects are matched by their
    `flor.checkpointing` names (or the keys and file names of the script's own torch.save);
    an int keyword names the outer loop and its iteration (`iteration=3` works too); the
    latest checkpoint by default. `rng=True` also restores the RNG states saved with it.
    Returns the checkpoint used (iteration, path, bytes, kind)."""
    from florwb_engine.record import pull

    return pull.load_into(
        _project(project), run_id, objects, iteration, loop=loop, map_location=map_location, rng=rng
    )


def checkpoints(tstamp: Any) -> Any:
    """flordb's list of a run's checkpoints, unread: a DataFrame with `name` (the
    flor.checkpointing file `epoch-000003.pt`, or the path a torch.save wrote), `kind`
    (`checkpointing` / `torch.save`), `backend`, `path`, and florwb's `loop`, `iteration`,
    `bytes`. `tstamp` is a run id or the run's `tstamp`/`start_time` from flor.dataframe."""
    from florwb_engine.record import lineage

    return lineage.checkpoints_frame(_project(), tstamp)


def replay(
    apply_vars: Any,
    narrow_iters: Any = None,
    where_clause: str | None = None,
    overrides: Any = None,
) -> Any:
    """flordb's replay from Python (a notebook): fill `apply_vars` (log names in today's
    script) in for the past runs matching `where_clause` (SQL over runs and args), the main
    loop narrowed by `narrow_iters` ([(loop, "all"|"last"|"none"|"0,2" or flordb's
    IterSpec)]). Plans and executes with the engine the CLI uses, without asking; prints the
    plan's one-line summary. Returns `flor.dataframe(*apply_vars)` with the replay's result
    as `frame.attrs["replay"]`. `overrides` are refused: a replay runs what each run ran."""
    from florwb_engine.replay import execute, plan_replay
    from florwb_engine.replay.cores import available_cores, default_workers
    from florwb_engine.replay.narrow import as_spec, narrow

    if overrides:
        raise ValueError(
            "florwb replays each run with the args it recorded; overrides would compute "
            "values no run had (run the script with --kwargs instead)"
        )
    names = [apply_vars] if isinstance(apply_vars, str) else list(apply_vars)
    project = _project()
    cores = available_cores()
    plan = plan_replay(project, names, where=where_clause, workers=cores)
    narrow(plan, {name: as_spec(spec) for name, spec in (narrow_iters or [])})
    segments = sum(len(run.segments) for run in plan.ready())
    plan.workers = min(plan.workers, default_workers(segments, cores))  # as `florwb replay`
    print(
        f"florwb: replay {', '.join(plan.names)}: {len(plan.ready())} of {len(plan.runs)} "
        f"run(s), estimated {plan.estimate_s:.0f} s"
    )
    for run in plan.runs:
        if run.reason:
            print(f"florwb: {run.run_id} {run.status}: {run.reason}")
    result = execute(plan) if plan.ready() else None
    frame = dataframe(*names)
    frame.attrs["replay"] = result.to_json() if result is not None else None
    return frame


_SAID: set[str] = set()


def _retired(name: str, note: str) -> None:
    """Say once per process what florwb does instead of a call flordb retired."""
    if name not in _SAID:
        _SAID.add(name)
        import sys

        print(f"florwb: flor.{name}(...) has no effect: {note}", file=sys.stderr)


def restore(path: Any = None, *target: Any, **keyed: Any) -> None:
    """flordb retired it (a no-op there too); florwb restores checkpoints in replays itself."""
    _retired(
        "restore",
        "replays restore flor.checkpointing's checkpoints themselves; "
        "flor.load_into(run, model=net) restores a past run's objects in place",
    )


def cleanup() -> None:
    """flordb's exit hook: end the run that is recording, as interpreter exit would."""
    commit()
