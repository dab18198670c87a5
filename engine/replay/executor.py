"""Replay execution: materialise each version, run segments in worker processes, check
fidelity, and land the results in the store tagged with the replay.

Workers are the old scripts themselves, run with their recorded argv and a ReplaySpec by
processes forked from a warm fork server (forkserver.py); they write their own journals,
so results reach the store through the same idempotent ingestion as recordings. A failed
run's rows are removed and its stderr tail reported while the other runs go on; cancelling
stops every worker and removes the replay's rows, so nothing half-written stays behind.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Union

import duckdb

from florwb_engine import versions
from florwb_engine.contract.replay_spec import ENV, PREFIX, ReplaySpec
from florwb_engine.journal import replay_journal_name
from florwb_engine.project import journal_dir, store_dir
from florwb_engine.record import start_rng
from florwb_engine.replay import contain, ddp_launch
from florwb_engine.replay.cores import (
    recorded_thread_env,
    recorded_threads,
    thread_env,
    threads_per_worker,
)
from florwb_engine.replay.cost import ranges
from florwb_engine.replay.errors import PlanError
from florwb_engine.replay.facts import main_iterations
from florwb_engine.replay.forkserver import ForkServer, script_imports, signal_worker, warm_workers
from florwb_engine.replay.mirror import mirrored_path, mirrored_project
from florwb_engine.replay.plan import Plan, RunPlan, Segment, plan_replay
from florwb_engine.replay.profile import Profiler, WorkerTimes
from florwb_engine.store import Store, StoreBusy, verdicts
from florwb_engine.store.replays import (
    ReplayStatus,
    compare_with_recorded,
    delete_rows,
    finish_replay,
    record_replay,
    remove_results,
)
from florwb_engine.store.verdicts import Verdict
from florwb_engine.versions.inputs import run_bytes

if TYPE_CHECKING:
    from florwb_engine.replay.ray_executor import RayOptions, Shipment

POLL_S = 0.2
# journal bytes that finished segments wrote worth ingesting while the others still run
EARLY_INGEST_BYTES = 1 << 20

# A segment's process: queued, forked, or ended (`cancelled` when the replay was).
SegmentState = Literal["waiting", "running", "finished", "failed", "cancelled"]
# One run's outcome: `diverged` when recomputed values differ from what the run recorded.
RunReplayStatus = Literal["finished", "diverged", "failed", "cancelled"]
# never linked or copied into a replay's code folder (the Ray executor leaves them out too)
SKIP_LINKS = {".florwb", ".git", "__pycache__"}
# Where segments run: "local" (the fork server) or "ray" / RayOptions (ray_executor.py).
Executor = Union[Literal["local", "ray"], "RayOptions"]


@dataclass
class Progress:
    run_id: str
    segment: int
    done: int
    total: int
    state: SegmentState


@dataclass
class RunResult:
    run_id: str
    status: RunReplayStatus
    error: str | None = None
    divergence: str | None = None
    compared: int = 0
    rows: int = 0
    at_risk: list[str] = field(default_factory=list)  # changed left-out files it read
    verdict: Verdict | None = None  # store/verdicts.py; None when it failed or was cancelled
    strict: bool = False  # the verdict is the strict re-run's (from the start, one segment)
    missing: str | None = None  # recorded main-loop iterations it did not replay: "iter 30"


@dataclass
class ReplayResult:
    replay_id: str
    status: ReplayStatus
    runs: list[RunResult] = field(default_factory=list)
    elapsed_s: float = 0.0
    shipped: dict[int, Shipment] = field(default_factory=dict)  # segment -> bytes sent (ray)
    profile: dict | None = None  # where the time went (profile.py); not in to_json
    finished: bool = False  # its status is stored (executor's own bookkeeping; not in to_json)
    ended: datetime | None = None  # when its row says it ended (not in to_json)

    def to_json(self) -> dict:
        found = asdict(self)
        del found["profile"], found["finished"], found["ended"]
        return found


@dataclass
class SegmentTask:
    """One segment's worker: what it runs and the files it reports through (both
    executors, local and Ray, drive these)."""

    plan: RunPlan
    segment: Segment
    spec_path: Path
    progress_path: Path
    log_path: Path
    argv: list[str]
    cwd: Path
    project: Path
    contain: dict | None = None  # how the worker enters its private overlay (namespace mode)
    code_dir: Path | None = None  # the materialised version (shipped by remote executors)
    mirror: Path | None = None  # the base of the project's mirror holding code_dir
    request: int | None = None  # the fork server's number for this worker
    pid: int | None = None
    returncode: int | None = None
    requested_at: float | None = None  # Unix times: asked of the fork server, seen ended
    exited_at: float | None = None


def execute(
    plan: Plan,
    *,
    on_progress: Callable[[Progress], None] | None = None,
    cancel: threading.Event | None = None,
    server: ForkServer | None = None,
    executor: Executor = "local",
    started_at: float | None = None,
) -> ReplayResult:
    """Run the plan on `plan.workers` processes forked by `server` (from warm_workers),
    which is used and closed; without one, one is started. `executor="ray"` (or
    RayOptions) runs the segments as Ray tasks instead (ray_executor.py). `started_at`:
    when the user started the replay (Unix time), so the result's profile counts the
    command's start and planning too."""
    began_at = datetime.now()  # the replay's row starts here: its one duration
    profiler = Profiler(started_at if started_at is not None else time.time())
    cancel = cancel or threading.Event()
    project = plan.project
    store = Store(project)
    workdir = store_dir(project) / "replays" / plan.replay_id
    remote = _remote_options(executor)
    profiler.measured_workers = remote is None
    if remote is not None and server is not None:
        server.close()  # a warm local server is not needed: the tasks run on Ray
        server = None
    containment: contain.Containment | None = None  # Ray tasks contain themselves
    try:
        if remote is None:
            containment = contain.choose(project, store_dir(project))  # before anything starts
    except contain.ContainmentError:
        if server is not None:
            server.close()
        raise
    server = server or (warm_workers(project) if remote is None else None)
    result = ReplayResult(plan.replay_id, "finished")
    tasks: list[SegmentTask] = []
    journals = journal_dir(project)
    ingested_bytes = 0  # of the replay's journals, when they were last ingested

    def ingest_early(store: Store) -> None:
        """Finished segments' rows in while the others run, when they are many: a catalog
        session of its own costs more than a few rows ingested with the rest at the end."""
        nonlocal ingested_bytes
        size = _journal_bytes(journals, plan.replay_id)
        if size - ingested_bytes < EARLY_INGEST_BYTES:
            return
        with profiler.span("ingest"):
            _ingest_early(store)
        ingested_bytes = size

    try:
        with profiler.span("ingest"), store.session() as con:
            record_replay(con, plan.replay_id, plan.names, plan.to_json(), started=began_at)
        # after its row: a work folder without a running replay is a leftover readers remove
        workdir.mkdir(parents=True, exist_ok=True)

        def run(plan: Plan) -> list[SegmentTask]:
            with profiler.span("materialise"):
                prepared = _prepare(plan, workdir, server, containment)
            tasks.extend(prepared)
            began, ingested = time.time(), profiler.spans.get("ingest", 0.0)
            if remote is None:
                assert server is not None
                _import_meanwhile("numpy")  # the ingestion of their rows needs it
                _run_all(prepared, plan.workers, server, store, on_progress, cancel, ingest_early)
            else:
                from florwb_engine.replay import ray_executor

                result.shipped.update(
                    ray_executor.run_all(
                        prepared, store, on_progress, cancel, remote, ingest_early, plan.workers
                    )
                )
            ingested = profiler.spans.get("ingest", 0.0) - ingested
            profiler.run_s += max(0.0, time.time() - began - ingested)
            profiler.workers.extend(filter(None, map(_worker_times, prepared)))
            return prepared

        first = run(plan)
        shipped = result.shipped
        with profiler.span("ingest"):
            result = _collect(plan, first, store, cancel.is_set(), finish=True)
        result.shipped = shipped
        if _retried(result) and not cancel.is_set():
            _retry_strict(plan, result, first, store, run, cancel)
        if not result.finished:
            with profiler.span("ingest"), store.session() as con:
                _finish(plan, result, con)
        # the duration the CLI, the Replay tab, past replays and the replay detail all show
        assert result.ended is not None
        result.elapsed_s = (result.ended - began_at).total_seconds()
    except BaseException:
        _remove_results(store, project, plan.replay_id)
        with store.session() as con:
            finish_replay(con, plan.replay_id, "failed", plan.to_json())
        raise
    finally:
        if server is not None:
            profiler.fork_server = dict(server.identity)
            server.close()
        shutil.rmtree(workdir, ignore_errors=True)
        for task in tasks:
            if task.contain is not None:
                contain.remove_scratch(Path(task.contain["scratch"]))
    result.profile = profiler.result()
    return result


def _import_meanwhile(module: str) -> None:
    """Import `module` in a thread while the workers run: this process mostly waits for
    them, and what comes after them needs it."""
    import importlib

    threading.Thread(target=importlib.import_module, args=(module,), daemon=True).start()


def _journal_bytes(journals: Path, replay_id: str) -> int:
    """The size of a replay's journals so far (every segment's, every rank's)."""
    total = 0
    for path in journals.glob(replay_journal_name(replay_id, "*")):
        with contextlib.suppress(OSError):  # removed meanwhile (a failed segment's)
            total += path.stat().st_size
    return total


def _worker_times(task: SegmentTask) -> WorkerTimes | None:
    """A local worker's times: the executor's, and what its runtime wrote when it
    finished (record/replaying.py: `profile` in its progress file)."""
    if task.requested_at is None or task.exited_at is None:
        return None
    times = WorkerTimes(task.requested_at, task.exited_at)
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):  # it never finished
        reported = json.loads(task.progress_path.read_text())["profile"]
        times.run_start = float(reported["run_start"])
        times.end = float(reported["end"])
        times.restore_s = float(reported["restore_s"])
        times.loads = int(reported["loads"])
    return times


def _remote_options(executor: Executor) -> RayOptions | None:
    """None for the local fork server; the Ray executor's options otherwise."""
    if executor == "local":
        return None
    from florwb_engine.replay.ray_executor import RayOptions

    if executor == "ray":
        return RayOptions()
    if isinstance(executor, RayOptions):
        return executor
    raise ValueError(f"unknown executor {executor!r}: local or ray")


def _prepare(
    plan: Plan,
    workdir: Path,
    server: ForkServer | None,
    containment: contain.Containment | None,
) -> list[SegmentTask]:
    """Materialise each version and write each segment's spec. Without `containment` (a
    Ray replay) the files the snapshot left out are not placed here: each task copies
    them on its node (ray_executor.py)."""
    project = plan.project
    code_dirs: dict[str, tuple[Path, Path]] = {}  # -> (code folder, its mirror)
    tasks = []
    for run in plan.ready():
        assert run.version and run.script and run.code is not None and run.mode is not None
        key = f"{run.version}:{sorted(run.inputs.items())}"  # the run's bytes of left-out files
        for segment in run.segments:
            # A run that created files gets a folder per segment: what one segment writes
            # where the run did (its `snapshot.pt`) must not be found by the next one.
            at = f"{key}:{segment.index}" if run.hide else key
            if at not in code_dirs:
                mirror = workdir / "code" / f"{run.version[:12]}-{len(code_dirs)}"
                code_dirs[at] = (_code_folder(project, run, mirror, containment), mirror)
                if server is not None:
                    code_dir = code_dirs[at][0]
                    server.preload(
                        script_imports(run.code),
                        [project, code_dir, (code_dir / run.script).parent],
                    )
            code_dir, mirror = code_dirs[at]
            cwd = _mapped_cwd(project, code_dir, run.cwd, mirror)
            stem = f"{segment.index:03d}"
            checkpoint_dir = store_dir(project) / "checkpoints" / run.run_id
            start_states = checkpoint_dir / start_rng.FILE
            spec = ReplaySpec(
                replay_id=plan.replay_id,
                run_id=run.run_id,
                segment=segment.index,
                mode=run.mode,
                main_loop=run.main_loop,
                first=segment.first,
                last=segment.last,
                skip_inner=segment.skip_inner,
                checkpoint_dir=str(checkpoint_dir),
                checkpoints=run.checkpoints,
                args=run.args,
                progress_file=str(workdir / f"{stem}.progress"),
                start_rng=str(start_states) if start_states.exists() else "",
                world_size=run.launch["world_size"] if run.launch else 1,
                mirrored=run.mirrored,
                saved_map=run.saved_map,
                starts=run.starts,
            )
            spec_path = workdir / f"{stem}.spec.json"
            spec.save(spec_path)
            # a multi-process run starts as it was launched (ddp_launch.py)
            argv = ddp_launch.launch_argv(run.launch, [str(code_dir / run.script), *run.argv[1:]])
            tasks.append(
                SegmentTask(
                    run,
                    segment,
                    spec_path,
                    Path(spec.progress_file),
                    workdir / f"{stem}.log",
                    argv,
                    cwd,
                    project,
                    _contain_request(
                        containment,
                        Path(tempfile.gettempdir()) / f"florwb-{plan.replay_id}-{stem}",
                        _hidden_behind_links(code_dir, run.hide),
                    ),
                    code_dir,
                    mirror,
                )
            )
    return tasks


def _code_folder(
    project: Path, run: RunPlan, mirror: Path, containment: contain.Containment | None
) -> Path:
    """The run's version materialised in `mirror`, with the run's bytes of changed inputs,
    the left-out files linked (namespace) or copied, and the files the run created hidden."""
    assert run.version and run.script and run.code is not None
    code_dir = mirrored_project(mirror, project)  # `..` reaches the project's parent
    versions.materialize(store_dir(project), run.version, code_dir)
    (code_dir / run.script).write_text(run.code)
    _restore_inputs(project, code_dir, run.inputs)
    if containment is not None and containment.mode == "namespace":
        _link_missing(project, code_dir)  # writes through them land in the overlay
    elif containment is not None:
        contain.copy_missing(project, code_dir, SKIP_LINKS)
    hide_created(code_dir, run.hide)
    return code_dir


def hide_created(code_dir: Path, hide: list[str]) -> None:
    """Remove the links or copies of files the run created from the replay's own folder:
    the old script must not find what it wrote in a later run of its own (the Ray
    executor's tasks too, after copying the left-out files on their node)."""
    for path in hide:
        target = code_dir / path
        if not _behind_link(code_dir, path) and (target.is_symlink() or target.is_file()):
            target.unlink()


def _behind_link(code_dir: Path, path: str) -> bool:
    """Whether a folder on the way to `path` is a link out of `code_dir` (to the user's
    folder): the file can only be hidden inside the worker's overlay."""
    folder = code_dir
    for part in Path(path).parts[:-1]:
        folder = folder / part
        if folder.is_symlink():
            return True
    return False


def _hidden_behind_links(code_dir: Path, hide: list[str]) -> list[str]:
    return [str(code_dir / path) for path in hide if _behind_link(code_dir, path)]


def _contain_request(
    containment: contain.Containment | None, scratch: Path, hide: list[str]
) -> dict | None:
    """The worker's containment request, with the created files it must hide in its
    overlay; in copy mode left-out folders are copies, so nothing is behind a link."""
    if containment is None:
        return None
    request = containment.request(scratch)
    if request is not None and hide:
        request["hide"] = hide
    return request


def _restore_inputs(project: Path, code_dir: Path, inputs: dict[str, str]) -> None:
    """Write the run's bytes of left-out files that changed since (from the user's git),
    before the rest is linked or copied: the old script reads what the run read."""
    for path, blob in inputs.items():
        data = run_bytes(project, blob)
        if data is None:
            raise ReplayInputError(f"git no longer holds the bytes {path} had in the run")
        target = code_dir / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


class ReplayInputError(Exception):
    """A left-out file's run bytes vanished from git between planning and replaying."""


def _mapped_cwd(project: Path, code_dir: Path, cwd: str | None, mirror: Path) -> Path:
    """The run's working directory inside the materialised copy, when it was in the project
    (recorded relative to it; older records hold an absolute path), or in the mirror of
    the project's parent folders when it was one of them."""
    if not cwd:
        return code_dir
    path = Path(cwd)
    if path.is_absolute():
        try:
            path = path.resolve().relative_to(project.resolve())
        except ValueError:
            return mirrored_path(mirror, path) or (path if path.is_dir() else code_dir)
    target = code_dir / path
    target.mkdir(parents=True, exist_ok=True)
    return target


def _link_missing(source: Path, target: Path) -> None:
    """Make files the snapshot left out (data folders, large files) reachable by the same
    relative paths, so the old script finds the data the run read."""
    for src, there in contain.left_out(source, target, SKIP_LINKS, depth=3):
        there.symlink_to(src)


def _run_all(
    tasks: list[SegmentTask],
    workers: int,
    server: ForkServer,
    store: Store,
    on_progress,
    cancel: threading.Event,
    ingest_early: Callable[[Store], None] = lambda store: _ingest_early(store),
) -> None:
    notify = on_progress or (lambda _p: None)
    waiting, active = list(tasks), list[SegmentTask]()  # changed in place: fill() sees them
    # Workers share the cores: each gets cores // (workers running at once) threads, or the
    # threads its run recorded (the planner ran fewer workers to make room: cores.py).
    threads = thread_env(threads_per_worker(min(max(1, workers), max(1, len(tasks)))))
    last_seen: dict[int, tuple] = {}
    stopping: dict[int, float] = {}  # request -> when its worker was asked to stop

    def fill() -> None:
        if cancel.is_set():
            waiting.clear()
        while waiting and len(active) < max(1, workers):
            task = waiting.pop(0)
            env = {ENV: str(task.spec_path), "FLORWB_PROJECT": str(task.project)}
            recorded = recorded_threads(task.plan.threads)  # the run's own, where recorded
            env.update(recorded_thread_env(recorded) if recorded is not None else threads)
            env.update(ddp_launch.launch_env(task.plan.launch))  # a free port for mp.spawn
            task.requested_at = time.time()
            task.request = server.start(task.argv, task.cwd, env, task.log_path, task.contain)
            active.append(task)

    with sigint_sets_cancel(cancel):
        while waiting or active:
            try:
                fill()
                server.poll(POLL_S)
                for task in active:
                    _update(task, server)
                    if cancel.is_set():
                        _stop(task, stopping, server)
                ended = [t for t in active if t.returncode is not None]
                active[:] = [t for t in active if t.returncode is None]
                _report(tasks, last_seen, notify, cancel.is_set())
                if any(t.returncode == 0 for t in ended) and (waiting or active):
                    fill()
                    ingest_early(store)
            except KeyboardInterrupt:  # Ctrl-C where the handler above is not installed
                cancel.set()
    _report(tasks, last_seen, notify, cancel.is_set())


@contextlib.contextmanager
def sigint_sets_cancel(cancel: threading.Event) -> Iterator[None]:
    """Ctrl-C sets `cancel` instead of raising KeyboardInterrupt wherever the loop happens
    to be (half way through starting a worker, or ingesting), so a cancel always ends as a
    clean cancel. Only the main thread can install a signal handler: the workbench runs
    replays in a thread worker and cancels through the event itself."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda _signum, _frame: cancel.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _ingest_early(store: Store) -> None:
    """Ingest finished segments while the next ones run, not all after the last one.

    Ctrl-C in the middle of a DuckDB query reaches us as DuckDB's "Query interrupted"
    error, not as KeyboardInterrupt: it is turned back into one, so it cancels the replay
    like Ctrl-C anywhere else (the ingestion's transaction is rolled back)."""
    try:
        store.ingest()
    except StoreBusy:  # someone else holds the database: the final ingestion takes them in
        return
    except (duckdb.InterruptException, RuntimeError) as exc:
        if isinstance(exc, duckdb.InterruptException) or "interrupted" in str(exc).lower():
            raise KeyboardInterrupt from exc
        raise


def _update(task: SegmentTask, server: ForkServer) -> None:
    if task.pid is None and task.request in server.started:
        started = server.started[task.request]
        if isinstance(started, str):  # could not fork: say why where its stderr would be
            task.log_path.write_text(started + "\n")
            task.returncode = -1
            task.exited_at = time.time()
            return
        task.pid = started
    if task.pid is not None and task.pid in server.exited:
        task.returncode = server.exited[task.pid]
        task.exited_at = time.time()


def _stop(task: SegmentTask, stopping: dict[int, float], server: ForkServer) -> None:
    """SIGTERM to the worker's process group, SIGKILL if it is still there after 3 s. A
    worker the server has not started yet (it is still importing) is given up after 3 s,
    with the server, so it never starts."""
    if task.returncode is not None or task.request is None:
        return
    now = time.monotonic()
    first = task.request not in stopping
    asked = stopping.setdefault(task.request, now)
    if task.pid is None:
        if now - asked > 3:
            server.kill()
            task.returncode = -1
    elif first:
        signal_worker(task.pid, signal.SIGTERM)
    elif now - asked > 3:
        signal_worker(task.pid, signal.SIGKILL)


def _report(tasks: list[SegmentTask], seen: dict[int, tuple], notify, cancelled: bool) -> None:
    for task in tasks:
        done, total = 0, task.segment.last - task.segment.first + 1
        with contextlib.suppress(OSError, ValueError, KeyError):  # not written yet
            data = json.loads(task.progress_path.read_text())
            done, total = data["done"], data["total"]
        if task.returncode is None:
            state: SegmentState = "running" if task.request is not None else "waiting"
        elif task.returncode == 0:
            state = "finished"  # also on cancel: a segment that ended well is kept
        else:
            state = "cancelled" if cancelled else "failed"
        key = (done, total, state)
        if seen.get(task.segment.index) != key:
            seen[task.segment.index] = key
            notify(Progress(task.plan.run_id, task.segment.index, done, total, state))


def _collect(
    plan: Plan,
    tasks: list[SegmentTask],
    store: Store,
    cancelled: bool,
    *,
    strict: bool = False,
    finish: bool = False,
) -> ReplayResult:
    """Ingest the replay journals, check each run against what it recorded and store its
    verdict (a diverged run's rows withheld: store/verdicts.py). `strict`: the runs of a
    strict re-run; the rest of the replay is not touched even when it was cancelled.
    `finish`: the replay is finished in the same session (one catalog connection less)
    unless a run diverged and will be retried; `result.finished` says whether it was."""
    project = plan.project
    by_run: dict[str, list[SegmentTask]] = {}
    for task in tasks:
        by_run.setdefault(task.plan.run_id, []).append(task)
    # On cancel, a run whose every segment ended well is kept (its work is finished and
    # verified); the others are removed as if never started.
    complete = {
        run_id for run_id, run_tasks in by_run.items() if all(t.returncode == 0 for t in run_tasks)
    }
    if cancelled and not complete and not strict:
        _remove_results(store, project, plan.replay_id)
        runs = [RunResult(r.run_id, "cancelled") for r in plan.ready()]
        return ReplayResult(plan.replay_id, "cancelled", runs)
    failed: dict[str, str] = {}
    stopped: set[str] = set()
    for run_id, run_tasks in by_run.items():
        if run_id in complete:
            continue
        if cancelled:
            stopped.add(run_id)
        else:
            bad = next(t for t in run_tasks if t.returncode != 0)
            failed[run_id] = _stderr_tail(bad.log_path, bad.returncode)
        _unlink_journals(project, plan.replay_id, run_tasks)
    results = []
    with store.session() as con:  # ingests the replay journals
        for run in plan.ready():
            if run.run_id in stopped or (cancelled and run.run_id not in by_run):
                delete_rows(con, plan.replay_id, run.run_id)
                results.append(RunResult(run.run_id, "cancelled"))
                continue
            if run.run_id in failed:
                delete_rows(con, plan.replay_id, run.run_id)
                results.append(RunResult(run.run_id, "failed", error=failed[run.run_id]))
                continue
            compared, mismatch = compare_with_recorded(con, plan.replay_id, run.run_id)
            rows = con.execute(
                "SELECT count(*) FROM log_rows l JOIN sources s USING (source_key) "
                "JOIN runs r ON r.run_key = l.run_key WHERE s.source = ? AND r.run_id = ?",
                [plan.replay_id, run.run_id],
            ).fetchall()[0][0]
            status: RunReplayStatus = "diverged" if mismatch else "finished"
            verdict = verdicts.verdict_of(compared, mismatch)
            missing = not_replayed(con, plan.replay_id, run)
            results.append(
                RunResult(
                    run.run_id,
                    status,
                    None,
                    mismatch,
                    compared,
                    int(rows),
                    run.at_risk,
                    verdict=verdict,
                    strict=strict,
                    missing=missing,
                )
            )
            verdicts.record(
                con,
                plan.replay_id,
                run.run_id,
                verdict,
                compared=compared,
                rows=int(rows),
                divergence=mismatch,
                missing=missing,
                strict=strict,
            )
            for path in run.at_risk:  # said where the run's other issues are said
                con.execute(
                    "INSERT OR REPLACE INTO run_issues VALUES (?, ?, 'input changed', ?, 1)",
                    [run.run_id, plan.replay_id, f"{path} changed since the run"],
                )
        collected = ReplayResult(plan.replay_id, _overall(results), results)
        if finish and not (_retried(collected) and not cancelled):
            _finish(plan, collected, con)
    return collected


def _retried(result: ReplayResult) -> bool:
    """Whether a run diverged: it is retried strictly before the replay finishes."""
    return any(r.verdict == "diverged" for r in result.runs)


def _overall(results: list[RunResult]) -> ReplayStatus:
    statuses = {r.status for r in results}
    if "cancelled" in statuses:
        return "cancelled"
    if statuses == {"failed"}:
        return "failed"
    if "diverged" in statuses:
        return "diverged"
    return "partial" if "failed" in statuses else "finished"


def _finish(plan: Plan, result: ReplayResult, con: duckdb.DuckDBPyConnection) -> None:
    result.status = _overall(result.runs) if result.runs else result.status
    result.finished = True
    kept = {
        r.run_id: {
            k: getattr(r, k) for k in ("verdict", "compared", "rows", "divergence", "strict")
        }
        for r in result.runs
        if r.verdict is not None
    }
    if kept:  # beside the journals, for a catalog rebuilt from them (store/verdicts.py)
        verdicts.write_sidecar(journal_dir(plan.project), plan.replay_id, kept)
    detail = {**plan.to_json(), "results": [asdict(r) for r in result.runs]}
    result.ended = finish_replay(con, plan.replay_id, result.status, detail)


def _unlink_journals(project: Path, replay_id: str, tasks: list[SegmentTask]) -> None:
    """The segments' journals, ingested or not: rows about to be removed must not come
    back with the next ingestion."""
    for task in tasks:  # one journal per segment, or per rank (ddp_launch.py)
        for journal in ddp_launch.segment_journals(
            journal_dir(project), replay_id, task.segment.index
        ):
            journal.unlink(missing_ok=True)


def _retry_strict(
    plan: Plan,
    result: ReplayResult,
    tasks: list[SegmentTask],
    store: Store,
    run: Callable[[Plan], list[SegmentTask]],
    cancel: threading.Event,
) -> None:
    """A divergence is retried before it is reported: each diverged run is planned again
    strictly (from its start, one segment, no checkpoint or own save restored) and
    replayed under the same replay id. The strict verdict replaces the first one; only a
    run that diverges strictly too stays diverged, named unreproducible. Planning it
    again reads today's script as the first plan did."""
    first = {r.run_id: r for r in result.runs if r.verdict == "diverged"}
    with store.session() as con:  # the diverged rows go; the strict re-run logs them again
        for run_id in first:
            _unlink_journals(
                plan.project, plan.replay_id, [t for t in tasks if t.plan.run_id == run_id]
            )
            delete_rows(con, plan.replay_id, run_id)
    retried: dict[str, RunResult] = {}
    try:
        strict: Plan | str = plan_replay(
            plan.project,
            plan.names,
            run_ids=list(first),
            workers=min(plan.workers, len(first)),
            executor=plan.executor,
            strict=True,
        )
    except PlanError as exc:  # the first pass's other runs stand whatever this says
        strict = str(exc)
    if isinstance(strict, Plan) and strict.ready():
        strict.replay_id = plan.replay_id
        offset = 1 + max((t.segment.index for t in tasks), default=-1)
        for run_plan in strict.ready():
            for segment in run_plan.segments:
                segment.index += offset
        second = run(strict)
        collected = _collect(strict, second, store, cancel.is_set(), strict=True)
        retried = {r.run_id: r for r in collected.runs}
    with store.session() as con:
        for run_id, before in first.items():
            after = retried.get(run_id)
            if after is None or after.status == "failed":
                # no strict verdict: the first one stands, with nothing left to serve
                why = after.error if after else _skip_reason(strict, run_id)
                before.divergence = f"{before.divergence} (the strict re-run could not run: {why})"
                before.rows = 0
                verdicts.record(
                    con,
                    plan.replay_id,
                    run_id,
                    "diverged",
                    compared=before.compared,
                    divergence=before.divergence,
                    strict=True,
                )
                after = before
            elif after.verdict == "diverged":
                after.divergence = f"unreproducible: {after.divergence}"
                con.execute(
                    "UPDATE replay_runs SET divergence = ? WHERE replay_id = ? AND run_id = ?",
                    [after.divergence, plan.replay_id, run_id],
                )
            result.runs[result.runs.index(before)] = after


def _skip_reason(plan: Plan | str, run_id: str) -> str:
    if isinstance(plan, str):
        return plan
    found = next((r for r in plan.runs if r.run_id == run_id), None)
    return (found.reason if found else None) or "not planned"


def not_replayed(con: duckdb.DuckDBPyConnection, replay_id: str, run: RunPlan) -> str | None:
    """The main-loop iterations the run recorded and the replay did not execute, named
    (`iter 30`); None when it executed them all or needed none (statements before the
    main loop)."""
    if run.mode == PREFIX or run.main_loop is None:
        return None
    recorded = main_iterations(con, run.run_id, run.main_loop)
    missing = sorted(recorded - main_iterations(con, run.run_id, run.main_loop, replay_id))
    if not missing:
        return None
    return f"{run.main_loop} {ranges(missing).removeprefix('iterations ')}"


def _remove_results(store: Store, project: Path, replay_id: str) -> None:
    with store.session() as con:
        remove_results(con, project, replay_id)


def _stderr_tail(path: Path, returncode: int | None, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        text = []
    tail = "\n".join(text[-lines:]) if text else "(no output)"
    return f"exit {returncode}: {tail}"
