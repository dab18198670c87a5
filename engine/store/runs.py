"""The run listing: one query and one row type for every reader of runs.

`florwb runs` (table and `--json`), the workbench's version history, run detail and
`Store.runs()` all list runs through `list_runs`, so a run shows the same status, counts,
args and data-wait share wherever it is read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, cast

import duckdb

from florwb_engine.contract.checkpoint_files import MANIFEST_SUFFIX
from florwb_engine.store import lineage, run_context
from florwb_engine.store.schema import entry_join
from florwb_engine.store.values import decode_value
from florwb_engine.store.verdicts import Verdict, latest_verdict, run_verdicts

# What `runs.status` holds: set by the recording runtime at the end of a run, "running"
# until then, "killed" once ingestion finds its process gone without an end record,
# "unreadable" when its journal holds a chunk this florwb cannot read (store/ingest.py).
RunStatus = Literal["running", "finished", "failed", "interrupted", "killed", "unreadable"]


@dataclass
class RunRow:
    """One recorded run with what the CLI and the workbench show about it."""

    run_id: str
    version: str | None
    script: str | None
    start_time: datetime | None
    end_time: datetime | None
    status: RunStatus
    exception: str | None
    message: str | None
    host: str | None
    argv: list[str]
    git_head: str | None
    git_branch: str | None
    git_dirty: bool | None
    args: dict[str, Any]
    issues: list[dict[str, Any]]  # what could not be kept exactly (store/issues.py)
    n_logs: int  # values the run recorded
    n_replayed: int  # values replays filled in for names it never recorded
    n_checkpoints: int
    replays: list[str]  # replay ids that filled in values for this run
    data_wait_s: float | None  # seconds spent waiting on data iterators (all loops)
    data_wait_share: float | None  # of the main loop's time; None when not measured
    context: dict[str, Any] | None  # where it ran and what it needed (store/run_context.py)
    world_size: int = 1  # processes of a torchrun / mp.spawn launch (store/run_ranks.py)
    launcher: dict[str, Any] | None = None  # how it was launched: launcher, nnodes, argv
    # its replays' verdicts, oldest first (store/verdicts.py: replay_id, names, verdict,
    # compared, rows, divergence, missing, strict)
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    # main-loop iterations with a flor.checkpointing checkpoint: where a replay can start
    # and what an outer-mode replay restores instead of re-executing
    restorable: list[int] = field(default_factory=list)
    # main-loop iterations with a mirrored torch.save and no flor.checkpointing file: a
    # replay restores them only where the plan finds they hold the whole state
    saved: list[int] = field(default_factory=list)
    main_iterations: int = 0  # iterations of the main loop recorded (so far, while running)

    @property
    def restorable_text(self) -> str:
        """`12/40`, and `+N saves` for iterations only the script's own torch.save holds."""
        if not self.main_iterations and not self.restorable and not self.saved:
            return ""
        text = f"{len(self.restorable)}/{self.main_iterations}"
        return text + (f" +{len(self.saved)} saves" if self.saved else "")

    # the checkpoints of other runs it started from, flor.load_checkpoint's calls
    # (store/lineage.py: name, call, parent, checkpoint, kind, loop, iteration, path)
    started_from: list[dict[str, Any]] = field(default_factory=list)

    @property
    def parents(self) -> list[str]:
        """The runs it started from, first loaded first."""
        return list(dict.fromkeys(str(s["parent"]) for s in self.started_from))

    loop_s: float | None = None  # the main loop's recorded iterations, summed
    # the rank of a multi-process run that failed first (store/run_ranks.py); None when
    # no rank failed or the run is of one process
    failed_rank: int | None = None

    def took(self, now: datetime | None = None) -> tuple[float | None, str]:
        """How long the run took, and how to read it: "" start to end; "so far" while it
        records (start to `now`); "at least" for a run that left no end (killed): the
        time of the main-loop iterations it recorded, a lower bound."""
        if self.duration_s is not None:
            return self.duration_s, ""
        if self.status == "running" and self.start_time is not None:
            elapsed = ((now or datetime.now()) - self.start_time).total_seconds()
            return max(elapsed, 0.0), "so far"
        return self.loop_s, "at least" if self.loop_s is not None else ""

    @property
    def verdict(self) -> Verdict | None:
        """The latest replay's verdict: what the run reads as (None: never replayed)."""
        return latest_verdict(self.verdicts)

    @property
    def duration_s(self) -> float | None:
        if self.start_time and self.end_time:
            return (self.end_time - self.start_time).total_seconds()
        return None

    def to_json(self) -> dict[str, Any]:
        """The object `florwb runs --json` prints (keys documented in the README)."""
        return {
            "run_id": self.run_id,
            "version": self.version,
            "script": self.script,
            "start_time": self.start_time.isoformat() if self.start_time else None,
            "end_time": self.end_time.isoformat() if self.end_time else None,
            "duration_s": self.duration_s,
            "status": self.status,
            "exception": self.exception,
            "message": self.message,
            "failed_rank": self.failed_rank,
            "host": self.host,
            "argv": self.argv,
            "git_head": self.git_head,
            "git_branch": self.git_branch,
            "git_dirty": self.git_dirty,
            "args": self.args,
            "issues": self.issues,
            "n_logs": self.n_logs,
            "n_replayed": self.n_replayed,
            "n_checkpoints": self.n_checkpoints,
            "data_wait_s": self.data_wait_s,
            "data_wait_share": self.data_wait_share,
            "context": self.context,
            "world_size": self.world_size,
            "launcher": self.launcher,
            "verdict": self.verdict,
            "verdicts": self.verdicts,
            "restorable": self.restorable,
            "saved_iterations": self.saved,
            "main_iterations": self.main_iterations,
            "started_from": self.started_from,
        }


def list_runs(con: duckdb.DuckDBPyConnection, run_id: str | None = None) -> list[RunRow]:
    """Every run (or the one `run_id`), oldest first.

    `n_replayed` leaves out what replays recomputed of names the run recorded (kept to
    check fidelity): those are not new values. Counts come from the integer-keyed tables
    (`name_stats`, `iteration_rows`) joined once per run, not from per-row views: the
    workbench lists 1,000 runs over tens of millions of log rows without waiting.
    """
    only = "WHERE r.run_id = ?" if run_id is not None else ""
    params = [run_id] if run_id is not None else []
    rows = con.execute(
        f"""
        SELECT r.run_id, r.version, r.script, r.start_time, r.end_time, r.status,
               r.exception, r.message, r.host, r.argv, r.git_head, r.git_branch, r.git_dirty,
               coalesce(ns.n_logs, 0), coalesce(ck.n, 0), coalesce(rp.sources, []),
               w.wait_s, w.loop_s, coalesce(ns.n_replayed, 0), r.world_size, r.launcher,
               coalesce(ck.restorable, []), coalesce(ck.saved, []), coalesce(w.main_n, 0)
        FROM runs r
        LEFT JOIN (SELECT run_key, sum(n) FILTER (WHERE source_key = 0) AS n_logs,
                          sum(n) FILTER (WHERE NOT recorded) AS n_replayed
                   FROM (SELECT run_key, source_key, n, bool_or(source_key = 0)
                                OVER (PARTITION BY run_key, name_key) AS recorded
                         FROM name_stats)
                   GROUP BY run_key) ns ON ns.run_key = r.run_key
        LEFT JOIN ({_CHECKPOINTED}) ck ON ck.run_id = r.run_id
        LEFT JOIN (SELECT n.run_key, list(DISTINCT s.source ORDER BY s.source) AS sources
                   FROM name_stats n JOIN sources s ON s.source_key = n.source_key
                   WHERE n.source_key != 0 AND s.source != 'extract'
                   GROUP BY n.run_key) rp ON rp.run_key = r.run_key
        LEFT JOIN (SELECT i.run_key, sum(i.wait_s) AS wait_s,
                          sum(i.wait_s + i.iter_s) FILTER (WHERE e.depth = 0) AS loop_s,
                          count(*) FILTER (WHERE e.entry_id = m.entry_id) AS main_n
                   FROM iteration_rows i {entry_join("i", "e")}
                   LEFT JOIN ({_MAIN_ENTRY}) m ON m.run_key = i.run_key
                   WHERE i.source_key = 0 GROUP BY i.run_key) w ON w.run_key = r.run_key
        {only}
        ORDER BY r.start_time, r.run_key
        """,
        params,
    ).fetchall()
    args = run_args(con, run_id)
    issues = run_issues(con)
    contexts = run_context.contexts(con)
    from florwb_engine.store.run_ranks import first_failures  # it imports RunStatus from here

    failed_first = first_failures(con)
    verdicts = run_verdicts(con, run_id)
    loaded = lineage.parents(con)
    out = []
    for r in rows:
        wait_s, loop_s = r[16], r[17]
        out.append(
            RunRow(
                run_id=r[0],
                version=r[1],
                script=r[2],
                start_time=r[3],
                end_time=r[4],
                status=cast(RunStatus, r[5] or "running"),
                exception=r[6],
                message=r[7],
                host=r[8],
                argv=json.loads(r[9]) if r[9] else [],
                git_head=r[10],
                git_branch=r[11],
                git_dirty=r[12],
                args=args.get(r[0], {}),
                issues=issues.get(r[0], []),
                n_logs=int(r[13]),
                n_replayed=int(r[18]),
                n_checkpoints=int(r[14]),
                replays=list(r[15]),
                data_wait_s=wait_s,
                data_wait_share=(wait_s / loop_s) if wait_s is not None and loop_s else None,
                context=contexts.get(r[0]),
                world_size=int(r[19] or 1),
                launcher=json.loads(r[20]) if r[20] else None,
                verdicts=verdicts.get(r[0], []),
                restorable=[int(i) for i in r[21]],
                saved=[int(i) for i in r[22] if int(i) not in set(r[21])],
                main_iterations=int(r[23]),
                started_from=lineage.lineage_of(con, r[0]) if r[0] in loaded else [],
                loop_s=loop_s,
                failed_rank=failed_first.get(r[0]),
            )
        )
    return out


# Per run: its checkpoints, and the distinct main-loop iterations flor.checkpointing's files
# (restorable) and mirrored torch.save manifests (saved) are of.
_CHECKPOINTED = f"""
    SELECT run_id, count(*) AS n,
           list(DISTINCT iteration ORDER BY iteration)
               FILTER (WHERE NOT ends_with(path, '{MANIFEST_SUFFIX}')) AS restorable,
           list(DISTINCT iteration ORDER BY iteration)
               FILTER (WHERE ends_with(path, '{MANIFEST_SUFFIX}')) AS saved
    FROM checkpoints GROUP BY run_id"""

# Per run: the recorded entry of its main loop, the first outermost loop entry of the loop
# its checkpoints are of (else the first outermost one), as replay planning takes it.
_MAIN_ENTRY = """
    SELECT e.run_key,
           arg_min(e.entry_id, (c.loop IS NULL, e.entry_id)) AS entry_id
    FROM loop_entries e JOIN runs r ON r.run_key = e.run_key
    LEFT JOIN (SELECT run_id, min(loop) AS loop FROM checkpoints GROUP BY run_id) c
           ON c.run_id = r.run_id AND c.loop = e.loop
    WHERE e.source_key = 0 AND e.depth = 0
    GROUP BY e.run_key"""


def args_that_differ(runs: Iterable[tuple[str | None, Mapping[str, Any]]]) -> list[str]:
    """Arg names whose value is not the same in every run of the same script (an arg one
    run of that script lacks counts as differing); `runs` holds (script, args) pairs. What
    tells runs of a sweep apart, shown first by `florwb runs`, the History tab and the
    chart's legend. Runs of different scripts are told apart by their script already: an
    arg only one script takes, constant across its runs, does not differ."""
    by_script: dict[str | None, list[Mapping[str, Any]]] = {}
    for script, args in runs:
        by_script.setdefault(script, []).append(args)
    differ: set[str] = set()
    for listed in by_script.values():
        names = {name for args in listed for name in args}
        differ.update(
            n for n in names if len({repr(args.get(n, "<unset>")) for args in listed}) > 1
        )
    return sorted(differ)


def run_args(con: duckdb.DuckDBPyConnection, run_id: str | None = None) -> dict[str, dict]:
    """Per run id, its recorded args by name (decoded), for every run or just `run_id`."""
    only = "WHERE run_id = ? " if run_id is not None else ""
    args: dict[str, dict[str, Any]] = {}
    for rid, name, value, text, vtype in con.execute(
        f"SELECT run_id, name, value, text, vtype FROM args {only}ORDER BY run_id, name",
        [run_id] if run_id is not None else [],
    ).fetchall():
        args.setdefault(rid, {})[name] = decode_value(value, text, vtype)
    return args


def run_issues(con: duckdb.DuckDBPyConnection) -> dict[str, list[dict]]:
    """Per run, what could not be kept exactly (see ingest): kind, detail, count."""
    issues: dict[str, list[dict]] = {}
    for run_id, source, kind, detail, n in con.execute(
        "SELECT run_id, source, kind, detail, n FROM run_issues ORDER BY run_id, kind, detail"
    ).fetchall():
        issues.setdefault(run_id, []).append(
            {"source": source, "kind": kind, "detail": detail, "n": int(n)}
        )
    return issues
