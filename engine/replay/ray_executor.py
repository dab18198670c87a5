"""Replay segments as Ray tasks: the same segments, specs and journals as the local fork
server, run on the nodes of a Ray cluster instead of this box.

Nothing is assumed shared between this machine and the nodes: each task gets the version's
code (a tar of the materialised copy, from the private version store), the checkpoints its
segment restores (iterations first-1 .. last) and its replay spec, all through Ray's object
store. On the node the task rebuilds the layout a local replay has (the code at the project's
own absolute path inside a mirror, so `..` and the run's working directory map the same; a
private `.florwb/` holding the journal and the shipped checkpoints), runs the old script
in a process forked from a fork server the Ray worker keeps between its tasks (so only its
first segment pays `import torch`), and returns the journal bytes. The driver writes them
where a local worker would have written its journal, so ingestion, the fidelity check and
cancel are the executor's own (executor.py), unchanged.

Files the snapshot left out (data folders, large files) are copied from the project's path
when the node has that path (a local cluster, a shared filesystem), within the copy budget
of contain.py, so the old script's writes never reach the user's files; elsewhere the
script reads them as it would on a fresh checkout. Left-out files that changed since the
run are restored from git on this machine (executor._prepare) and shipped with the code.
The cluster's Python needs florwb and the script's imports installed, as any Ray job does.

Cancel (Ctrl-C, or the `cancel` event): every task is cancelled through Ray, which raises
KeyboardInterrupt in the task; the task stops its script's process group. A task still
there after 3 s is force-cancelled: its Ray worker is killed, and its fork server, no
longer listened to, stops the script.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from florwb_engine.contract.replay_spec import ENV, ReplaySpec
from florwb_engine.errors import FlorwbError
from florwb_engine.journal import replay_journal_name
from florwb_engine.project import journal_dir, store_dir
from florwb_engine.replay.cores import recorded_thread_env, recorded_threads, thread_env
from florwb_engine.replay.forkserver import ForkServer, script_imports, signal_worker
from florwb_engine.store import Store

if TYPE_CHECKING:
    from florwb_engine.replay.executor import Progress, SegmentState, SegmentTask

POLL_S = 0.2
STOP_GRACE_S = 3.0
GIVE_UP_S = 30.0  # after a forced cancel, how long Ray gets to report the tasks ended
INSTALL_HINT = "the ray executor needs Ray: pip install 'florwb[ray]'"


class RayUnavailable(FlorwbError, RuntimeError):
    """Ray is not installed or the cluster cannot be reached: said in one line."""


@dataclass
class RayOptions:
    """Where and how the segments run on Ray. `address`: an existing cluster (`auto`,
    `ray://host:10001`, `host:6379`); None connects to RAY_ADDRESS or the driver's
    initialised Ray, else starts Ray on this machine for the replay. Per-task resources:
    given, or from the run's recorded devices (GPUs the run used; one CPU)."""

    address: str | None = None
    gpus_per_task: float | None = None
    cpus_per_task: float | None = None


@dataclass
class Shipment:
    """What one segment's task receives and what it cost to send."""

    code_bytes: int
    checkpoint_bytes: int

    @property
    def total(self) -> int:
        return self.code_bytes + self.checkpoint_bytes


def connect(options: RayOptions) -> bool:
    """Connect to (or start) Ray; True when this call started it (then the caller shuts
    it down). RayUnavailable, with the reason in one line, when it cannot."""
    try:
        import ray
    except ImportError:
        raise RayUnavailable(INSTALL_HINT) from None
    if ray.is_initialized():
        return False
    address = options.address or os.environ.get("RAY_ADDRESS") or None
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = address or "this machine"
        raise RayUnavailable(f"cannot reach Ray at {where}: {str(exc).splitlines()[0]}") from exc
    return True


def cluster_slots(options: RayOptions) -> int:
    """How many tasks of `options.cpus_per_task` CPUs the connected cluster runs at once."""
    import ray

    cpus = float(ray.cluster_resources().get("CPU", 1.0))
    per_task = options.cpus_per_task or 1.0
    return max(1, int(cpus // per_task))


def code_archive(code_dir: Path) -> bytes:
    """The materialised version as a tar: real files only (links to the project's data are
    made again on the node, where they resolve)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        for root, dirs, files in os.walk(code_dir):
            dirs[:] = [d for d in dirs if not (Path(root) / d).is_symlink()]
            for name in files:
                path = Path(root) / name
                if not path.is_symlink():
                    tar.add(path, arcname=str(path.relative_to(code_dir)), recursive=False)
    return buffer.getvalue()


def segment_checkpoints(spec: ReplaySpec) -> dict[str, str]:
    """The checkpoint files the segment restores: iterations first-1 .. last."""
    wanted = {str(i) for i in range(spec.first - 1, spec.last + 1)}
    return {i: name for i, name in spec.checkpoints.items() if i in wanted}


def task_resources(project: Path, run_id: str, options: RayOptions) -> tuple[float, float]:
    """(CPUs, GPUs) one of the run's segments asks Ray for: the flags, else one CPU and the
    GPUs the run used (run_context: device_kind 'cuda', gpu_count)."""
    cpus = options.cpus_per_task if options.cpus_per_task is not None else 1.0
    if options.gpus_per_task is not None:
        return cpus, options.gpus_per_task
    with Store(project).session() as con:
        row = con.execute(
            "SELECT device_kind, gpu_count FROM run_context WHERE run_id = ?", [run_id]
        ).fetchall()
    gpus = float(row[0][1] or 1) if row and row[0][0] == "cuda" else 0.0
    return cpus, gpus


# ---------------------------------------------------------------- the driver


def run_all(
    tasks: list[SegmentTask],
    store: Store,
    on_progress: Callable[[Progress], None] | None,
    cancel: threading.Event,
    options: RayOptions,
    ingest_early: Callable[[Store], None],
) -> dict[int, Shipment]:
    """Run every task on Ray, writing each returned journal where a local worker writes
    it and setting each task's returncode; the bytes shipped per segment are returned."""
    from florwb_engine.replay.executor import sigint_sets_cancel

    started_here = connect(options)
    import ray

    notify = on_progress or (lambda _p: None)
    try:
        remote = ray.remote(max_retries=0)(run_segment)
        shipped: dict[int, Shipment] = {}
        pending: dict[Any, SegmentTask] = {}
        with sigint_sets_cancel(cancel):  # Ctrl-C while submitting cancels what was submitted
            _submit(tasks, remote, options, pending, shipped, notify, cancel)
            _wait(pending, store, notify, cancel, ingest_early)
        return shipped
    finally:
        if started_here:
            ray.shutdown()


def _submit(tasks, remote, options, pending, shipped, notify, cancel) -> None:
    """Ship each task's code (once per version), checkpoints and spec, and start it."""
    import ray

    from florwb_engine.replay.executor import Progress

    archives: dict[Path, Any] = {}
    blobs: dict[Path, Any] = {}
    resources: dict[str, tuple[float, float]] = {}
    for task in tasks:
        if cancel.is_set():
            return
        assert task.code_dir is not None
        if task.code_dir not in archives:
            archives[task.code_dir] = code_archive(task.code_dir)
            blobs[task.code_dir] = ray.put(archives[task.code_dir])
        spec = ReplaySpec.load(task.spec_path)
        files = {}
        sizes = 0
        for name in segment_checkpoints(spec).values():
            path = Path(spec.checkpoint_dir) / name
            if path not in blobs:
                blobs[path] = ray.put(path.read_bytes())
            files[name] = blobs[path]
            sizes += path.stat().st_size
        if spec.start_rng:
            path = Path(spec.start_rng)
            if path not in blobs:
                blobs[path] = ray.put(path.read_bytes())
            files[path.name] = blobs[path]
            sizes += path.stat().st_size
        if task.plan.run_id not in resources:
            resources[task.plan.run_id] = task_resources(task.project, task.plan.run_id, options)
        cpus, gpus = resources[task.plan.run_id]
        job = {
            "spec": spec.__dict__,
            "project": str(task.project),
            "script": str(Path(task.argv[0]).relative_to(task.code_dir)),
            "argv": task.argv[1:],
            "cwd": _relative_cwd(task),
            "threads": max(1, int(cpus)),
            "recorded_threads": task.plan.threads,  # the run's own, where it recorded them
        }
        ref = remote.options(num_cpus=cpus, num_gpus=gpus).remote(job, blobs[task.code_dir], files)
        pending[ref] = task
        task.request = len(pending)
        shipped[task.segment.index] = Shipment(len(archives[task.code_dir]), sizes)
        total = task.segment.last - task.segment.first + 1
        notify(Progress(task.plan.run_id, task.segment.index, 0, total, "running"))


def _relative_cwd(task: SegmentTask) -> str:
    """The task's working directory relative to the mirror base when it is inside it
    (the usual case), else the absolute path (used on the node when it exists there)."""
    if task.mirror is not None:
        with contextlib.suppress(ValueError):
            return str(task.cwd.relative_to(task.mirror))
    return str(task.cwd)


def _wait(pending, store, notify, cancel, ingest_early) -> None:
    import ray
    from ray.exceptions import RayError, TaskCancelledError

    from florwb_engine.replay.executor import Progress

    cancelled_at: float | None = None
    forced_at: float | None = None
    while pending:
        try:
            if cancel.is_set() and cancelled_at is None:
                cancelled_at = time.monotonic()
                for ref in pending:
                    ray.cancel(ref, force=False)
            elif cancelled_at is not None and time.monotonic() - cancelled_at > STOP_GRACE_S:
                if forced_at is None:
                    forced_at = time.monotonic()
                    for ref in pending:
                        ray.cancel(ref, force=True)
                elif time.monotonic() - forced_at > GIVE_UP_S:  # Ray never answered
                    for task in pending.values():
                        task.returncode = -signal.SIGKILL
                        task.log_path.write_text("cancelled; Ray did not confirm\n")
                    pending.clear()
                    break
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            for ref in ready:
                task = pending.pop(ref)
                total = task.segment.last - task.segment.first + 1
                try:
                    out = ray.get(ref)
                except TaskCancelledError:
                    task.returncode = -signal.SIGTERM
                    task.log_path.write_text("cancelled\n")
                except RayError as exc:
                    task.returncode = -1
                    task.log_path.write_text(f"ray: {str(exc).strip()[-2000:]}\n")
                else:
                    task.returncode = _land(task, out)
                done = total if task.returncode == 0 else 0
                state: SegmentState = (
                    "finished"
                    if task.returncode == 0
                    else "cancelled"
                    if cancel.is_set()
                    else "failed"
                )
                notify(Progress(task.plan.run_id, task.segment.index, done, total, state))
                if task.returncode == 0 and pending and not cancel.is_set():
                    ingest_early(store)
        except KeyboardInterrupt:  # Ctrl-C where the handler is not installed
            cancel.set()


def _land(task: SegmentTask, out: dict) -> int:
    """Write what the task returned where a local worker leaves it; its returncode."""
    task.log_path.write_bytes(out["log"])
    if out["journal"] is not None:
        spec = ReplaySpec.load(task.spec_path)
        target = journal_dir(task.project) / replay_journal_name(spec.replay_id, spec.segment)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_bytes(out["journal"])
        os.replace(tmp, target)
    return int(out["returncode"])


# ---------------------------------------------------------------- on the node


def run_segment(job: dict, code: bytes, files: dict[str, Any]) -> dict:
    """One segment, inside a Ray task: unpack, run the old script, return its journal."""
    import ray

    base = Path(tempfile.mkdtemp(prefix="florwb-ray-"))
    try:
        # the mirror of the project's ancestry, as a local replay has it (mirror.py)
        from florwb_engine.replay import contain
        from florwb_engine.replay.executor import SKIP_LINKS
        from florwb_engine.replay.mirror import mirrored_project

        project = Path(job["project"])
        mirror = base / "code"
        code_dir = mirrored_project(mirror, project)
        with tarfile.open(fileobj=io.BytesIO(code), mode="r:gz") as tar:
            tar.extractall(code_dir, filter="data")
        if project.is_dir():  # copies, never links: the script's writes stay in the task
            contain.copy_missing(project, code_dir, SKIP_LINKS)
        home = base / "home"  # the task's own project: journal and checkpoints
        spec = ReplaySpec(**job["spec"])
        ckpt_dir = store_dir(home) / "checkpoints" / spec.run_id
        ckpt_dir.mkdir(parents=True)
        values = ray.get(list(files.values())) if files else []
        for name, data in zip(files, values):
            (ckpt_dir / name).write_bytes(data)
        spec.checkpoint_dir = str(ckpt_dir)
        if spec.start_rng:
            spec.start_rng = str(ckpt_dir / Path(spec.start_rng).name)
        spec.progress_file = str(base / "progress.json")
        spec_path = base / "spec.json"
        spec.save(spec_path)
        cwd = Path(job["cwd"])
        cwd = cwd if cwd.is_absolute() and cwd.is_dir() else mirror / cwd
        if not cwd.is_dir():
            cwd = code_dir
        env = {
            **os.environ,
            ENV: str(spec_path),
            "FLORWB_PROJECT": str(home),
            **_threads_env(job),
        }
        log_path = base / "stderr.log"
        script = code_dir / job["script"]
        server = _warm_server()
        server.preload(
            script_imports(script.read_text(errors="replace")), [project, code_dir, script.parent]
        )
        request = server.start([str(script), *job["argv"]], cwd, env, log_path)
        returncode = _wait_for_worker(server, request, log_path)
        journal = journal_dir(home) / replay_journal_name(spec.replay_id, spec.segment)
        return {
            "returncode": returncode,
            "journal": journal.read_bytes() if journal.exists() else None,
            "log": log_path.read_bytes()[-64_000:],
        }
    finally:
        import shutil

        shutil.rmtree(base, ignore_errors=True)


# The Ray worker process outlives its tasks: its fork server (forkserver.py) is kept, so
# only the first segment on a worker pays `import torch`; later ones fork a warm process.
_WARM: ForkServer | None = None


def _warm_server() -> ForkServer:
    global _WARM
    if _WARM is None or _WARM.lost():
        log = Path(tempfile.gettempdir()) / f"florwb-ray-forkserver-{os.getpid()}.log"
        _WARM = ForkServer(log)
    return _WARM


def _wait_for_worker(server: ForkServer, request: int, log_path: Path) -> int:
    """The segment's exit code. On KeyboardInterrupt (ray.cancel) the script's process
    group gets SIGTERM, SIGKILL after STOP_GRACE_S, before the interrupt goes on."""
    pid: int | None = None
    try:
        while True:
            server.poll(POLL_S)
            started = server.started.get(request)
            if isinstance(started, str):  # could not fork: say why where stderr would be
                log_path.write_text(started + "\n")
                return -1
            pid = started
            if pid is not None and pid in server.exited:
                return server.exited.pop(pid)
    except KeyboardInterrupt:
        if pid is not None:
            _stop_worker(server, pid)
        raise
    finally:
        server.started.pop(request, None)


def _stop_worker(server: ForkServer, pid: int) -> None:
    signal_worker(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while pid not in server.exited and time.monotonic() < deadline:
        server.poll(POLL_S)
    if pid not in server.exited:
        signal_worker(pid, signal.SIGKILL)
        deadline = time.monotonic() + STOP_GRACE_S
        while pid not in server.exited and time.monotonic() < deadline:
            server.poll(POLL_S)
    server.exited.pop(pid, None)


def _threads_env(job: dict) -> dict[str, str]:
    """The task's threads: the run's recorded settings, else one per CPU it was given."""
    recorded = recorded_threads(job.get("recorded_threads"))
    return recorded_thread_env(recorded) if recorded is not None else thread_env(job["threads"])
