"""Replay segments on a Ray cluster: the same segments, specs and journals as the local
fork server, run on the nodes of a Ray cluster instead of this box.

Nothing is assumed shared between this machine and the nodes: each segment gets the
version's code (a tar of the materialised copy, from the private version store), the files
it restores (flor.checkpointing's checkpoints of iterations first-1 .. last, the script's
own mirrored saves of those iterations, every rank's RNG states, a parent run's checkpoint
it loaded) and its replay spec, through Ray's object store, each version's code and each
file put there once per replay. On the node the segment rebuilds the layout a local replay
has (the code at the project's own absolute path inside a mirror, so `..` and the run's
working directory map the same; a private `.florwb/` holding the journal and the shipped
files), runs the old script as it was launched and returns its journals (one per rank). The
driver writes them where a local worker would have written them, so ingestion, the fidelity
check and cancel are the executor's own (executor.py), unchanged.

Where a segment runs:
- a single-process run on CPU: on a warm worker, a detached Ray actor that keeps a fork
  server (forkserver.py) with the scripts' imports done between replays, so a replay on a
  cluster that replayed before forks its scripts from a warm interpreter, as the local
  executor does with its shared fork server, and starts no Ray worker of its own;
- a run on GPUs, or a multi-process run (torchrun, mp.spawn): a worker of its own (an
  actor for that segment alone, killed when it ends) that holds the resources of all its
  processes on one node and relaunches the recorded launcher there (ddp_launch.py);
- a torchrun run of several nodes: a placement group with one node actor per recorded
  node, meeting at a rendezvous (ray_nodes.py).

Files the snapshot left out (data folders, large files) are copied from the project's path
when the node has that path (a local cluster, a shared filesystem), within the copy budget
of contain.py, so the old script's writes never reach the user's files, and the files the
run created are removed again; elsewhere the script reads them as it would on a fresh
checkout. Left-out files that changed since the run are restored from git on this machine
(executor._prepare) and shipped with the code. The cluster's Python needs florwb and the
script's imports installed, as any Ray job does.

Cancel (Ctrl-C, or the `cancel` event): every worker running a segment is told to stop it;
it stops the script's process group (SIGTERM, SIGKILL after 3 s) and whatever the script's
launcher started in sessions of its own (torchrun's ranks). A worker of a segment's own
that has not started by then is killed; one that does not answer within GIVE_UP_S is
killed (its fork server, no longer listened to, stops the script).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
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
from florwb_engine.project import journal_dir, store_dir
from florwb_engine.replay.cores import recorded_thread_env, recorded_threads, thread_env
from florwb_engine.replay.ddp_launch import launch_argv, launch_env, segment_journals
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
    placement: dict | None = None  # a multi-node segment's nodes (ray_nodes.py)

    @property
    def total(self) -> int:
        return self.code_bytes + self.checkpoint_bytes


def require_ray() -> None:
    """RayUnavailable, with the install hint, where Ray is not installed (found without
    importing it: a command that hands its replay to the driver never imports Ray)."""
    import importlib.util

    try:
        found = importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise RayUnavailable(INSTALL_HINT)


def connect(options: RayOptions) -> bool:
    """Connect to (or start) Ray; True when this call started it (then the caller shuts
    it down). RayUnavailable, with the reason in one line, when it cannot."""
    require_ray()
    import ray

    if ray.is_initialized():
        return False
    address = options.address or os.environ.get("RAY_ADDRESS") or None
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = address or "this machine"
        raise RayUnavailable(f"cannot reach Ray at {where}: {str(exc).splitlines()[0]}") from exc
    return True


def will_start(options: RayOptions) -> bool:
    """Whether running the replay starts Ray on this machine: no cluster named
    (`--address`, RAY_ADDRESS), none connected here and no warm driver holding one."""
    if cluster() is not None:
        return False
    return not (options.address or os.environ.get("RAY_ADDRESS"))


@dataclass
class Cluster:
    """What planning needs of the cluster a replay runs on, from this process's own Ray
    connection or from the warm driver (ray_driver.py) that holds one: its CPUs, its
    largest live node's (CPUs, GPUs) and whether this florwb's warm workers are up."""

    cpus: float
    largest: tuple[float, float]
    warm: bool

    @classmethod
    def here(cls) -> Cluster:
        """The connected cluster's, read through this process's Ray."""
        import ray

        return cls(float(ray.cluster_resources().get("CPU", 1.0)), largest_node(), warm_pool_up())


def cluster() -> Cluster | None:
    """The cluster this command is connected to: through the warm driver it talks to
    (ray_driver.current), else its own initialised Ray; None when neither."""
    from florwb_engine.replay import ray_driver

    client = ray_driver.current()
    if client is not None and not client.lost:
        return client.cluster
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return Cluster.here()
    return None


def cluster_slots(options: RayOptions) -> int:
    """How many tasks of `options.cpus_per_task` CPUs the cluster runs at once: the
    connected one's, or this machine's where the replay will start Ray (ray.init gives it
    every CPU)."""
    per_task = options.cpus_per_task or 1.0
    connected = cluster()
    cpus = connected.cpus if connected is not None else float(os.cpu_count() or 1)
    return max(1, int(cpus // per_task))


def largest_gpus() -> int | None:
    """The GPUs of the connected cluster's largest live node (a multi-process run's
    processes are one task on one node); None when not connected."""
    connected = cluster()
    return None if connected is None else int(connected.largest[1])


def start_s() -> float:
    """What a replay on Ray pays once before its segments run (cost.py): Ray's start where
    the replay starts it (no warm driver, no cluster named), then the workers' imports; with
    a connected cluster whose warm workers are up, next to nothing."""
    from florwb_engine.replay.cost import RAY_IMPORT_S, RAY_INIT_S, RAY_WARM_S

    connected = cluster()
    if connected is None:
        return RAY_INIT_S + RAY_IMPORT_S
    return RAY_WARM_S if connected.warm else RAY_IMPORT_S


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


def segment_files(spec: ReplaySpec) -> list[str]:
    """Every file the segment may read from the project's checkpoints folder, relative to
    it: flor.checkpointing's checkpoints of iterations first-1 .. last, the script's own
    mirrored saves of those iterations (manifest, saved files, RNG states), the run's
    RNG states at its start, each rank's copies of those (`rank<r>/`), and the files of
    other runs its flor.load_checkpoint calls loaded."""
    folder = Path(spec.checkpoint_dir)
    names = list(segment_checkpoints(spec).values())
    for i in range(spec.first - 1, spec.last + 1):
        manifest = spec.mirrored.get(str(i))
        if manifest is None:
            continue
        names.append(manifest)
        try:
            listed = json.loads((folder / manifest).read_text())
        except (OSError, ValueError):  # the replay says so where it restores it
            continue
        names.extend(str(s["file"]) for s in listed.get("saves", ()) if s.get("file"))
        if listed.get("rng"):
            names.append(str(listed["rng"]))
    if spec.start_rng:
        names.append(Path(spec.start_rng).name)
    ranks = [f"rank{r}/{name}" for r in range(1, spec.world_size) for name in names]
    found = [f"{spec.run_id}/{name}" for name in names + ranks if (folder / name).is_file()]
    for start in spec.starts:  # relative to the checkpoints folder (record/lineage.py)
        path = str(start.get("path") or "")
        if path and not Path(path).is_absolute() and (folder.parent / path).is_file():
            found.append(path)
    return list(dict.fromkeys(found))


def task_resources(project: Path, run_id: str, options: RayOptions) -> tuple[float, float]:
    """(CPUs, GPUs) one of the run's segments asks Ray for: the flags, else one CPU and the
    GPUs the run used (run_context: device_kind 'cuda', gpu_count)."""
    return runs_resources(project, [run_id], options)[run_id]


def runs_resources(
    project: Path, run_ids: list[str], options: RayOptions
) -> dict[str, tuple[float, float]]:
    """task_resources of each run, read in one catalog session."""
    cpus = options.cpus_per_task if options.cpus_per_task is not None else 1.0
    if options.gpus_per_task is not None:
        return {run_id: (cpus, options.gpus_per_task) for run_id in run_ids}
    wanted = list(dict.fromkeys(run_ids))
    with Store(project).session() as con:
        rows = con.execute(
            "SELECT run_id, device_kind, gpu_count FROM run_context "
            f"WHERE run_id IN ({', '.join('?' * len(wanted))})",
            wanted,
        ).fetchall()
    used = {run_id: float(count or 1) for run_id, kind, count in rows if kind == "cuda"}
    return {run_id: (cpus, used.get(run_id, 0.0)) for run_id in wanted}


def launch_resources(launch: dict, options: RayOptions) -> tuple[float, float]:
    """(CPUs, GPUs) of the one task that relaunches a multi-process run: per process the
    flags (else one CPU, and one GPU when the run used GPUs), times the processes."""
    nproc = int(launch.get("nproc") or 1)
    cpus = options.cpus_per_task if options.cpus_per_task is not None else 1.0
    if options.gpus_per_task is not None:
        gpus = options.gpus_per_task
    else:
        gpus = 1.0 if launch.get("devices") else 0.0
    return cpus * nproc, gpus * nproc


def largest_node() -> tuple[float, float]:
    """(CPUs, GPUs) of the connected cluster's largest live node: what one task can hold."""
    import ray

    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    return (
        max((float(r.get("CPU", 0)) for r in nodes), default=0.0),
        max((float(r.get("GPU", 0)) for r in nodes), default=0.0),
    )


# ---------------------------------------------------------------- the driver


def run_all(
    tasks: list[SegmentTask],
    store: Store,
    on_progress: Callable[[Progress], None] | None,
    cancel: threading.Event,
    options: RayOptions,
    ingest_early: Callable[[Store], None],
    workers: int = 1,
) -> dict[int, Shipment]:
    """Run every task on Ray, writing each returned journal where a local worker writes
    it and setting each task's returncode; the bytes each segment put into the object
    store are returned. At most `workers` single-process segments run at once, on as
    many warm workers; a multi-process run or one on GPUs is a task of its own.

    Where this process has not initialised Ray itself, the warm driver (ray_driver.py)
    runs them: it holds the cluster's connection between commands, so the command
    imports, connects to and disconnects from nothing (FLORWB_FORKSERVER_IDLE_S=0: the
    command connects itself, as it always did)."""
    from florwb_engine.replay import ray_driver
    from florwb_engine.replay.executor import Progress, sigint_sets_cancel

    if not tasks:
        return {}
    jobs = segment_jobs(tasks, options)
    notify = on_progress or (lambda _p: None)

    def report(i: int, done: int, state: SegmentState, returncode: int | None) -> None:
        task = tasks[i]
        if returncode is not None:
            task.returncode = returncode
        if state == "running":
            task.request = i
        notify(Progress(task.plan.run_id, task.segment.index, done, jobs[i].total, state))

    ray = sys.modules.get("ray")
    here = ray is not None and ray.is_initialized()
    if not here and ray_driver.enabled():
        client = ray_driver.current()
        if client is None or client.lost:
            client = ray_driver.connect(options, start=True)
            assert client is not None  # started, or RayUnavailable

        def ended(i: int, returncode: int) -> None:
            if returncode == 0 and not cancel.is_set():
                if any(t.returncode is None for t in tasks):
                    ingest_early(store)  # while the driver runs the next ones

        with sigint_sets_cancel(cancel):  # Ctrl-C cancels what was submitted
            return client.run(jobs, workers, options, report, ended, cancel)
    started_here = connect(options)
    try:
        with sigint_sets_cancel(cancel):  # Ctrl-C while submitting cancels what was submitted
            return drive(jobs, workers, options, report, cancel, lambda: ingest_early(store))
    finally:
        if started_here:
            sys.modules["ray"].shutdown()


# (job index, iterations done, state, returncode once it ended)
Report = Callable[[int, int, "SegmentState", "int | None"], None]


@dataclass
class SegmentJob:
    """One segment as the driver needs it, in JSON-able form (it crosses a socket to the
    warm driver, ray_driver.py, which runs on this machine): where its spec, code and log
    are, how its run was launched, and the (CPUs, GPUs) it asks Ray for."""

    run_id: str
    segment: int
    total: int  # iterations
    spec_path: str
    code_dir: str
    log_path: str
    project: str
    script: str
    argv: list[str]
    cwd: str  # relative to the mirror base where inside it (_relative_cwd)
    recorded_threads: dict | None
    launch: dict | None
    hide: list[str]
    imports: list[str]  # what the script imports: the warm workers preload it
    cpus: float
    gpus: float

    @property
    def warm(self) -> bool:
        """Runs on a warm worker: one process and no GPU (resources Ray need not hold)."""
        return not self.launch and not self.gpus


def segment_jobs(tasks: list[SegmentTask], options: RayOptions) -> list[SegmentJob]:
    """Each task as the driver needs it; the runs' resources read in one catalog session
    (a driver never opens the project's catalog)."""
    single = [t.plan.run_id for t in tasks if not t.plan.launch]
    resources = runs_resources(tasks[0].project, single, options) if single else {}
    jobs = []
    for task in tasks:
        launch = task.plan.launch
        if launch:
            cpus, gpus = launch_resources(launch, options)
        else:
            cpus, gpus = resources[task.plan.run_id]
        assert task.code_dir is not None and task.plan.script is not None
        jobs.append(
            SegmentJob(
                run_id=task.plan.run_id,
                segment=task.segment.index,
                total=task.segment.last - task.segment.first + 1,
                spec_path=str(task.spec_path),
                code_dir=str(task.code_dir),
                log_path=str(task.log_path),
                project=str(task.project),
                script=task.plan.script,
                argv=task.plan.argv[1:],
                cwd=_relative_cwd(task),
                recorded_threads=task.plan.threads,
                launch=launch,
                hide=task.plan.hide,
                imports=script_imports(task.plan.code or ""),
                cpus=cpus,
                gpus=gpus,
            )
        )
    return jobs


def drive(
    jobs: list[SegmentJob],
    workers: int,
    options: RayOptions,
    report: Report,
    cancel: threading.Event,
    ingest_early: Callable[[], None] = lambda: None,
) -> dict[int, Shipment]:
    """Run the jobs on the Ray this process is connected to (the command's own, or the
    warm driver's): each journal and log written where a local worker leaves it, each
    job's progress and returncode told to `report`; the bytes each segment put into the
    object store, by segment."""
    driver = _Driver(report, cancel, options, ingest_early)
    driver.run(jobs, workers)
    return driver.shipped


@dataclass
class _Job:
    index: int  # in the replay's list: what `report` names it by
    task: SegmentJob
    payload: dict  # what the node needs, in JSON-able form
    refs: dict  # {"code": ref, "files": {relative path: ref}}: fetched on the node
    returncode: int | None = None

    @property
    def warm(self) -> bool:
        return self.task.warm

    @property
    def cpus(self) -> float:
        return self.task.cpus

    @property
    def gpus(self) -> float:
        return self.task.gpus


class _Driver:
    def __init__(self, report: Report, cancel, options, ingest_early) -> None:
        self.report = report
        self.cancel = cancel
        self.options = options
        self.ingest_early = ingest_early
        self.shipped: dict[int, Shipment] = {}
        self._put: dict[Path, tuple[Any, int]] = {}  # what is in the object store already
        # ref -> (job, the worker running it: a warm one, or its own when in `own`)
        self.pending: dict[Any, tuple[_Job, Any]] = {}
        self.own: set[Any] = set()

    def run(self, segments: list[SegmentJob], workers: int) -> None:
        warm = [s for s in segments if s.warm]
        pool = warm_pool(max(1, min(workers, len(warm)))) if warm else []
        modules = list(dict.fromkeys(m for s in warm for m in s.imports))
        for actor in pool:  # torch and the rest imported while the code is shipped
            actor.preload.remote(modules)
        jobs = []
        for index, segment in enumerate(segments):
            if self.cancel.is_set():
                return
            jobs.append(self._job(index, segment))
        queue = [j for j in jobs if j.warm]
        own = [j for j in jobs if not j.warm]
        if own:
            from florwb_engine.replay import ray_nodes

            fits = largest_node()
            for job in own:
                if ray_nodes.spans_nodes(job.payload["launch"]):
                    ray_nodes.submit(self, job)  # a placement group across nodes
                else:
                    self._submit(job, fits)
        free = list(pool)
        self._wait(queue, free)

    def _job(self, index: int, task: SegmentJob) -> _Job:
        """Put the task's code (once per version) and files (once per replay) into the
        object store; what it put is the segment's shipment."""
        code_dir = Path(task.code_dir)
        spec = ReplaySpec.load(Path(task.spec_path))
        code_ref, code_bytes = self._put_once(code_dir, lambda: code_archive(code_dir))
        folder = Path(spec.checkpoint_dir).parent
        files, file_bytes = {}, 0
        for name in segment_files(spec):
            files[name], size = self._put_once(folder / name, (folder / name).read_bytes)
            file_bytes += size
        self.shipped[task.segment] = Shipment(code_bytes, file_bytes)
        launch = task.launch
        processes = int(launch["nproc"]) if launch else 1
        payload = {
            "key": f"{spec.replay_id}:{spec.segment}",
            "spec": spec.__dict__,
            "project": task.project,
            "script": task.script,
            "argv": task.argv,
            "cwd": task.cwd,
            "threads": max(1, int(task.cpus // processes)),
            "recorded_threads": task.recorded_threads,  # the run's own, where it recorded them
            "launch": launch,
            "hide": task.hide,
        }
        return _Job(index, task, payload, {"code": code_ref, "files": files})

    def _put_once(self, key: Path, read: Callable[[], bytes]) -> tuple[Any, int]:
        """(object ref, bytes put now): 0 bytes when an earlier segment put it."""
        import ray

        if key in self._put:
            return self._put[key][0], 0
        data = read()
        self._put[key] = (ray.put(data), len(data))
        return self._put[key][0], len(data)

    def end(self, job: _Job, returncode: int, why: str | None = None) -> None:
        """The segment ended: its log says `why` where its own did not land, and
        `report` hears its returncode."""
        task = job.task
        if why is not None:
            Path(task.log_path).write_text(why)
        state: SegmentState = (
            "finished" if returncode == 0 else "cancelled" if self.cancel.is_set() else "failed"
        )
        self.report(job.index, task.total if returncode == 0 else 0, state, returncode)

    def _submit(self, job: _Job, fits: tuple[float, float]) -> None:
        """A worker of its own (an actor for this segment alone, killed when it ends)
        holding the run's processes' CPUs and GPUs; refused at once, with the reason, when
        no node of the cluster has them (Ray would wait forever)."""
        import ray

        if job.cpus > fits[0] or job.gpus > fits[1]:
            self.end(
                job,
                -1,
                f"florwb: the segment needs {job.cpus:g} CPU(s) and {job.gpus:g} GPU(s) on one "
                f"node; the cluster's largest node has {fits[0]:g} and {fits[1]:g}\n",
            )
            return
        own: Any = ray.remote(WarmWorker)
        actor = own.options(
            num_cpus=job.cpus, num_gpus=job.gpus, max_concurrency=4, max_restarts=0
        ).remote(0.0, True)
        ref = actor.run.remote(job.payload, job.refs)
        self.pending[ref] = (job, actor)
        self.own.add(ref)
        self.report(job.index, 0, "running", None)

    def _dispatch(self, queue: list[_Job], free: list[Any]) -> None:
        while queue and free and not self.cancel.is_set():
            job, actor = queue.pop(0), free.pop(0)
            ref = actor.run.remote(job.payload, job.refs)
            self.pending[ref] = (job, actor)
            self.report(job.index, 0, "running", None)

    def _wait(self, queue: list[_Job], free: list[Any]) -> None:
        import ray

        cancelled_at: float | None = None
        forced = False
        self._dispatch(queue, free)
        while self.pending:
            try:
                if self.cancel.is_set() and cancelled_at is None:
                    cancelled_at = time.monotonic()
                    queue.clear()
                    for job, actor in self.pending.values():  # it stops the script's processes
                        actor.stop.remote(job.payload["key"])  # (SIGTERM, then SIGKILL)
                elif cancelled_at is not None:
                    waited = time.monotonic() - cancelled_at
                    if waited > 2 * STOP_GRACE_S + 1 and not forced:
                        forced = True  # a worker of its own not even started: it goes
                        for ref in self.own & set(self.pending):
                            ray.kill(self.pending[ref][1])
                    elif waited > STOP_GRACE_S + GIVE_UP_S:  # Ray never answered
                        self._give_up()
                        break
                ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=POLL_S)
                for ref in ready:
                    job, actor = self.pending.pop(ref)
                    alive = self._ended(job, ref)
                    if ref in self.own:
                        self.own.discard(ref)
                        with contextlib.suppress(Exception):  # gone already
                            ray.kill(actor)  # its resources go back to the cluster
                    elif alive:
                        free.append(actor)
                    if job.returncode == 0 and (self.pending or queue):
                        self._dispatch(queue, free)
                        if not self.cancel.is_set():
                            self.ingest_early()
                self._dispatch(queue, free)
                if queue and not free and not any(a for _j, a in self.pending.values()):
                    self._lost(queue)  # every warm worker died: the rest cannot run
            except KeyboardInterrupt:  # Ctrl-C where the handler is not installed
                self.cancel.set()
        if queue:  # a warm worker died and took the last one with it
            self._lost(queue)

    def _lost(self, queue: list[_Job]) -> None:
        for job in queue:
            job.returncode = -1
            self.end(job, -1, "ray: the replay's warm workers died before it ran\n")
        queue.clear()

    def _ended(self, job: _Job, ref: Any) -> bool:
        """Land what the segment returned; False when its warm worker died with it."""
        import ray
        from ray.exceptions import RayActorError, RayError, TaskCancelledError

        alive = True
        why = None
        try:
            out = ray.get(ref)
        except TaskCancelledError:
            returncode, why = -signal.SIGTERM, "cancelled\n"
        except RayError as exc:
            alive = not isinstance(exc, RayActorError)
            returncode = -1
            if self.cancel.is_set():  # its worker killed on cancel
                why = "cancelled\n"
            else:
                why = f"ray: {str(exc).strip()[-2000:]}\n"
        else:
            returncode = _land(job.task, out)
            if out.get("placement"):  # where a multi-node segment's nodes ran
                self.shipped[job.task.segment].placement = out["placement"]
        job.returncode = returncode
        self.end(job, returncode, why)
        return alive

    def _give_up(self) -> None:
        """Cancelled and not confirmed: the warm workers still running are killed (their
        fork servers, no longer listened to, stop the scripts) and the tasks written off."""
        import ray

        for job, actor in self.pending.values():
            with contextlib.suppress(Exception):  # gone already
                ray.kill(actor)
            job.returncode = -signal.SIGKILL
            self.end(job, -signal.SIGKILL, "cancelled; Ray did not confirm\n")
        self.pending.clear()


def _relative_cwd(task: SegmentTask) -> str:
    """The task's working directory relative to the mirror base when it is inside it
    (the usual case), else the absolute path (used on the node when it exists there)."""
    if task.mirror is not None:
        with contextlib.suppress(ValueError):
            return str(task.cwd.relative_to(task.mirror))
    return str(task.cwd)


def _land(task: SegmentJob, out: dict) -> int:
    """Write what the task returned where a local worker leaves it (its journal, one per
    rank for a multi-process run); its returncode."""
    Path(task.log_path).write_bytes(out["log"])
    journals = journal_dir(Path(task.project))
    journals.mkdir(parents=True, exist_ok=True)
    for name, data in out["journals"].items():
        target = journals / Path(name).name
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)
    return int(out["returncode"])


# ---------------------------------------------------------------- warm workers

NAMESPACE = "florwb"


def warm_pool(n: int) -> list[Any]:
    """`n` warm workers: Ray actors that outlive the replay (detached) and keep a fork
    server with the scripts' imports done, so a replay forks its scripts from a warm
    interpreter as the local executor does. They hold no Ray resources (the replay runs
    at most `workers` segments at once, as many as the cluster has task slots) and end
    after FLORWB_FORKSERVER_IDLE_S without a segment. Named by florwb's code, so a
    changed florwb never talks to an old one."""
    import ray

    from florwb_engine.replay.forkserver import code_key, idle_seconds

    actor = ray.remote(WarmWorker)
    key = code_key()
    return [
        actor.options(
            name=f"warm-{key}-{i}",
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            max_concurrency=4,  # stop() reaches a worker busy in run()
            max_restarts=0,
            scheduling_strategy="SPREAD",
        ).remote(idle_seconds())
        for i in range(n)
    ]


def warm_pool_up() -> bool:
    """Whether the connected cluster has this florwb's first warm worker already."""
    import ray

    from florwb_engine.replay.forkserver import code_key

    try:
        ray.get_actor(f"warm-{code_key()}-0", namespace=NAMESPACE)
    except ValueError:
        return False
    return True


class WarmWorker:
    """A Ray actor that runs one segment at a time from its fork server: a warm worker
    (detached, kept between replays; `idle_s`: how long, 0 for ever) or a segment's own
    (`own`)."""

    def __init__(self, idle_s: float, own: bool = False) -> None:
        self._server: ForkServer | None = None
        self._places = _Places()
        self._own = own  # a segment's own worker: killed after its one segment
        self._lock = threading.Lock()  # one segment at a time: two replays take turns
        self._stops: dict[str, threading.Event] = {}
        self._busy = 0
        self._used = time.monotonic()
        if idle_s > 0:
            threading.Thread(target=self._end_when_idle, args=(idle_s,), daemon=True).start()

    def preload(self, modules: list[str]) -> int:
        with self._lock:
            self._warm().preload(modules)
        return os.getpid()

    def run(self, job: dict, refs: dict) -> dict:
        stop = self._stops.setdefault(job["key"], threading.Event())
        self._busy += 1
        try:
            with self._lock:
                if stop.is_set():
                    return {"returncode": -signal.SIGTERM, "journals": {}, "log": b"cancelled\n"}
                return _run_job(self._warm(), self._places, job, refs, stop)
        finally:
            if self._own:
                self._places.close()
            self._stops.pop(job["key"], None)
            self._busy -= 1
            self._used = time.monotonic()

    def stop(self, key: str) -> None:
        self._stops.setdefault(key, threading.Event()).set()

    def _warm(self) -> ForkServer:
        if self._server is None or self._server.lost():
            self._server = ForkServer(self._places.root / "forkserver.log")
        return self._server

    def _end_when_idle(self, idle_s: float) -> None:
        while True:
            time.sleep(min(idle_s, 5.0))
            if not self._busy and time.monotonic() - self._used > idle_s:
                if self._server is not None:
                    self._server.close()
                self._places.close()
                os._exit(0)


# ---------------------------------------------------------------- on the node


class _Places:
    """A worker's folders on its node (`florwb-ray-<pid>-*` in the temp folder): the
    mirror of each project's ancestry, kept between its segments and brought up to date
    for each (mirror.py; thousands of links where a project sits in a crowded folder such
    as /tmp), and each segment's own folder, removed after the segment without it waiting.
    A worker killed with its cluster (Ray kills its workers outright) has them removed by
    a reaper process that waits for it to end; any left over (a reaper killed too) by the
    next worker that starts."""

    PREFIX = "florwb-ray-"

    def __init__(self) -> None:
        import subprocess

        _remove_dead_places()
        self.root = Path(tempfile.mkdtemp(prefix=f"{self.PREFIX}{os.getpid()}-"))
        self._mirrors: dict[str, Path] = {}
        self._made = 0
        self._reaper = subprocess.Popen(  # reads until this worker ends, then removes root
            [sys.executable, "-I", "-S", "-c", _REAP, str(self.root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def mirror(self, project: Path) -> tuple[Path, Path]:
        """(the mirror's base, the empty folder in it that stands for `project`)."""
        from florwb_engine.replay.mirror import mirrored_project

        base = self._mirrors.setdefault(str(project), self.root / f"mirror-{len(self._mirrors)}")
        return base, mirrored_project(base, project)

    def segment(self) -> Path:
        self._made += 1
        folder = self.root / f"segment-{self._made}"
        folder.mkdir()
        return folder

    def discard(self, *folders: Path) -> None:
        """Move `folders` out of the way at once (the next segment finds its code folder
        empty) and remove them in the background."""
        import shutil

        gone = []
        for folder in folders:
            self._made += 1
            trash = self.root / f"trash-{self._made}"
            with contextlib.suppress(OSError):
                folder.rename(trash)
                gone.append(trash)

        def remove() -> None:
            for trash in gone:
                shutil.rmtree(trash, ignore_errors=True)

        if gone:
            threading.Thread(target=remove, daemon=True).start()

    def close(self) -> None:
        import shutil

        shutil.rmtree(self.root, ignore_errors=True)
        if self._reaper.stdin is not None:
            self._reaper.stdin.close()
        self._reaper.wait()


_REAP = (
    "import shutil, sys; sys.stdin.buffer.read(); shutil.rmtree(sys.argv[1], ignore_errors=True)"
)


def _remove_dead_places() -> None:
    """Remove the folders of workers that ended without removing theirs (killed)."""
    import shutil

    from florwb_engine.processes import is_gone

    with contextlib.suppress(OSError):
        for entry in os.scandir(tempfile.gettempdir()):
            pid = entry.name.removeprefix(_Places.PREFIX).split("-", 1)[0]
            if entry.name.startswith(_Places.PREFIX) and pid.isdigit() and entry.is_dir():
                if is_gone(int(pid), None):
                    shutil.rmtree(entry.path, ignore_errors=True)


def _run_job(
    server: ForkServer, places: _Places, job: dict, refs: dict, stop: threading.Event
) -> dict:
    """Unpack the segment, run the old script as it was launched, return its journals."""
    import ray

    from florwb_engine.replay import contain
    from florwb_engine.replay.executor import SKIP_LINKS, hide_created

    base = places.segment()
    # the mirror of the project's ancestry, as a local replay has it (mirror.py)
    project = Path(job["project"])
    mirror, code_dir = places.mirror(project)
    try:
        with tarfile.open(fileobj=io.BytesIO(ray.get(refs["code"])), mode="r:gz") as tar:
            tar.extractall(code_dir, filter="data")
        if project.is_dir():  # copies, never links: the script's writes stay in the task
            contain.copy_missing(project, code_dir, SKIP_LINKS)
        hide_created(code_dir, job["hide"])  # files the run created: absent, as locally
        home = base / "home"  # the task's own project: journal and checkpoints
        spec = ReplaySpec(**job["spec"])
        checkpoints = store_dir(home) / "checkpoints"
        ckpt_dir = checkpoints / spec.run_id
        ckpt_dir.mkdir(parents=True)
        names = list(refs["files"])
        for name, data in zip(names, ray.get([refs["files"][n] for n in names])):
            target = checkpoints / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
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
            **launch_env(job["launch"]),  # a free port here for mp.spawn
        }
        log_path = base / "stderr.log"
        script = code_dir / job["script"]
        server.preload(
            script_imports(script.read_text(errors="replace")), [project, code_dir, script.parent]
        )
        # a multi-process run starts as it was launched, its rendezvous on this node
        argv = launch_argv(job["launch"], [str(script), *job["argv"]])
        request = server.start(argv, cwd, env, log_path)
        returncode = _wait_for_worker(server, request, log_path, stop)
        journals = segment_journals(journal_dir(home), spec.replay_id, spec.segment)
        return {
            "returncode": returncode,
            "journals": {p.name: p.read_bytes() for p in journals if p.exists()},
            "log": log_path.read_bytes()[-64_000:] if log_path.exists() else b"",
        }
    finally:
        places.discard(code_dir, base)


def _wait_for_worker(
    server: ForkServer, request: int, log_path: Path, stop: threading.Event
) -> int:
    """The segment's exit code. When `stop` is set (the worker was told to stop) the
    script's processes are stopped (_stop_worker)."""
    try:
        while True:
            server.poll(POLL_S)
            started = server.started.get(request)
            if isinstance(started, str):  # could not fork: say why where stderr would be
                log_path.write_text(started + "\n")
                return -1
            if started is not None and started in server.exited:
                return server.exited.pop(started)
            if started is not None and stop.is_set():
                _stop_worker(server, started)
                return -signal.SIGTERM
    finally:
        server.started.pop(request, None)


def _stop_worker(server: ForkServer, pid: int) -> None:
    """SIGTERM to the script's process group, SIGKILL after STOP_GRACE_S; a launcher's
    processes in sessions of their own (torchrun starts each rank so) that outlive it are
    killed after it."""
    family = descendants(pid)
    signal_worker(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while pid not in server.exited and time.monotonic() < deadline:
        server.poll(POLL_S)
    if pid not in server.exited:
        signal_worker(pid, signal.SIGKILL)
        deadline = time.monotonic() + STOP_GRACE_S
        while pid not in server.exited and time.monotonic() < deadline:
            server.poll(POLL_S)
    for child in family:
        signal_worker(child, signal.SIGKILL)
    server.exited.pop(pid, None)


def descendants(pid: int) -> list[int]:
    """The processes below `pid` (children first), from /proc; none where there is none."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue  # ended meanwhile
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            found.append(child)
            todo.append(child)
    return found


def _threads_env(job: dict) -> dict[str, str]:
    """The task's threads: the run's recorded settings, else its CPUs shared by its
    processes."""
    recorded = recorded_threads(job.get("recorded_threads"))
    return recorded_thread_env(recorded) if recorded is not None else thread_env(job["threads"])
