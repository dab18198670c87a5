"""`florwb replay`: hindsight logging from the command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from florwb.output import json_safe, write_table
from florwb_engine.errors import FlorwbError

if TYPE_CHECKING:  # the engine loads on first use: `florwb --help` must stay instant
    from florwb_engine.replay.executor import ReplayResult
    from florwb_engine.replay.forkserver import ForkServer
    from florwb_engine.replay.plan import Plan


def add_parsers(sub) -> None:
    p = sub.add_parser("replay", help="fill new log statements in for past runs")
    p.add_argument("names", metavar="NAME[,NAME]", help="log statement names in today's script")
    p.add_argument("--where", help="SQL condition on runs and their args, e.g. 'lr > 0.01'")
    p.add_argument(
        "--workers",
        type=int,
        help="worker processes (default: one per core, no more than independent segments)",
    )
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="where segments run: worker processes here (default) or tasks on a Ray cluster",
    )
    p.add_argument("--address", help="Ray cluster address (default: RAY_ADDRESS, else local)")
    p.add_argument(
        "--gpus-per-task", type=float, help="GPUs per Ray task (default: what the run used)"
    )
    p.add_argument("--cpus-per-task", type=float, help="CPUs per Ray task (default: 1)")
    p.add_argument(
        "--iter",
        action="append",
        default=[],
        metavar="LOOP=all|last|none|i,j,k",
        help="replay only these iterations of the main loop (flordb's --iter; repeatable)",
    )
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--json", action="store_true", help="print the plan (and result) as JSON")
    p.add_argument(
        "--profile",
        action="store_true",
        help="say where the replay's time went (start, worker start, restore, compute, ...)",
    )
    p.set_defaults(func=cmd_replay)


def cmd_replay(args: argparse.Namespace) -> int:
    from florwb_engine.project import find_project
    from florwb_engine.replay import warm_workers

    if args.workers is not None and args.workers < 1:
        raise FlorwbError("--workers must be at least 1")
    ray_flags = [args.address, args.gpus_per_task, args.cpus_per_task]
    if args.executor != "ray" and any(flag is not None for flag in ray_flags):
        raise FlorwbError("--address, --gpus-per-task, --cpus-per-task need --executor ray")
    for flag, value in (
        ("--gpus-per-task", args.gpus_per_task),
        ("--cpus-per-task", args.cpus_per_task),
    ):
        if value is not None and value < 0:
            raise FlorwbError(f"{flag} must not be negative")
    names = [n for n in args.names.split(",") if n.strip()]
    project = find_project(None)
    # imports what the scripts need while we plan (only for the local workers)
    server = warm_workers(project, names) if args.executor == "local" else None
    try:
        return _replay(args, project, names, server)
    finally:
        if server is not None:
            server.close()


def _executor(args: argparse.Namespace):
    if args.executor == "local":
        return "local"
    from florwb_engine.replay import ray_driver
    from florwb_engine.replay.ray_executor import RayOptions, connect, require_ray, will_start

    options = RayOptions(args.address, args.gpus_per_task, args.cpus_per_task)
    # before planning: an unreachable cluster or a missing Ray is said at once (RayUnavailable)
    require_ray()
    if ray_driver.enabled():  # Ray stays in the warm driver: never imported here
        named = bool(options.address or os.environ.get("RAY_ADDRESS"))
        # a warm driver answers now; a cluster named gets one now (connecting it); Ray
        # started by the replay, when it runs, so its start is in the estimate
        ray_driver.connect(options, start=named)
    elif not will_start(options):
        connect(options)
    return options


def _replay(
    args: argparse.Namespace, project: Path, names: list[str], server: ForkServer | None
) -> int:
    from florwb_engine.replay import execute, plan_replay
    from florwb_engine.replay.cores import available_cores, default_workers, threads_per_worker
    from florwb_engine.replay.narrow import narrow, parse_iter_arg
    from florwb_engine.replay.plan import DONE

    iters = dict(parse_iter_arg(text) for text in args.iter)
    cores = available_cores()
    executor = _executor(args)
    if executor != "local":  # the cluster's task slots stand for the cores
        from florwb_engine.replay.ray_executor import cluster_slots

        cores = cluster_slots(executor)
    plan = plan_replay(
        project,
        names,
        where=args.where,
        workers=args.workers or cores,
        executor="local" if executor == "local" else "ray",
    )
    narrow(plan, iters)
    segments = sum(len(run.segments) for run in plan.ready())
    if args.workers is None:  # planned for every core; use no more workers than segments
        plan.workers = min(plan.workers, default_workers(segments, cores))
        where = "core(s)" if executor == "local" else "Ray task slot(s)"
        why = f"the default: {cores} {where}, {segments} independent segment(s)"
    else:
        why = "--workers" + (f", more than the {cores} core(s)" if args.workers > cores else "")
    if plan.notes:  # the planner ran fewer workers: recorded threads fill the cores
        why = plan.notes[0]
    threads = threads_per_worker(min(plan.workers, max(1, segments)), cores)
    sharing = {"workers_why": why, "threads_per_worker": threads}
    recorded = [r.threads["torch"] for r in plan.ready() if r.threads]
    each = f"{threads} thread(s) each"
    if recorded and len(recorded) == len(plan.ready()):
        each = f"threads as recorded ({', '.join(map(str, sorted(set(recorded))))})"
    elif recorded:
        each += ", runs that recorded theirs with those"
    if args.json and not args.yes:
        _dump({"plan": {**plan.to_json(), **sharing}, "result": None})
        return 0
    if not args.json:
        _print_plan(plan, f"{why}; {each}")
        for warning in plan.warnings:
            print(f"warning: {warning}", file=sys.stderr)
    ready = plan.ready()
    if not ready:
        if not args.json:
            print("nothing to replay")
        else:
            _dump({"plan": {**plan.to_json(), **sharing}, "result": None})
        return 0 if any(r.status == DONE for r in plan.runs) else 1
    if not args.yes:
        if not sys.stdin.isatty():
            raise FlorwbError("confirmation needed: run in a terminal or pass --yes")
        answer = input(f"Replay {len(ready)} run(s)? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("not replayed")
            return 0
    cancel = threading.Event()
    progress = None if args.json else _progress_printer()
    result = execute(
        plan,
        on_progress=progress,
        cancel=cancel,
        server=server,
        executor=executor,
        started_at=_process_start(),
    )
    profiled = {"profile": result.profile} if args.profile else {}
    if executor != "local":
        from florwb_engine.replay import ray_driver

        client = ray_driver.current()  # which warm driver ran it (None: this command)
        profiled["ray_driver"] = client.identity if client is not None else None
    if args.json:
        _dump({"plan": {**plan.to_json(), **sharing}, "result": result.to_json(), **profiled})
    else:
        _print_result(result)
        if args.profile and result.profile:
            from florwb_engine.replay.profile import text

            print("\n".join(text(result.profile)))
    if result.status == "cancelled":
        return 130
    return 1 if any(r.status == "failed" for r in result.runs) else 0


def _process_start() -> float | None:
    """When this command's process started, so `--profile` counts the interpreter's
    start and the imports before planning as the replay's start."""
    import time

    from florwb_engine.processes import running_for

    age = running_for(os.getpid())
    return None if age is None else time.time() - age


def _dump(obj) -> None:
    json.dump(json_safe(obj), sys.stdout, indent=1)
    sys.stdout.write("\n")


def _print_plan(plan: Plan, workers_why: str) -> None:
    from florwb_engine.replay.plan import READY

    ready = plan.ready()
    print(
        f"Replay {', '.join(plan.names)}: {len(ready)} of {len(plan.runs)} run(s), "
        f"{plan.workers} worker(s) ({workers_why}), estimated {plan.estimate_s:.0f} s"
    )
    rows = []
    for run in plan.runs:
        if run.status == READY:
            spans = ", ".join(
                f"{s.first}-{s.last}" if s.last > s.first else str(s.first)
                for s in run.segments
                if s.last >= s.first
            )
            what = f"{run.main_loop} {spans}" if spans else "up to the main loop"
            if not spans and run.main_loop is None:
                what = "the whole script"
            rows.append(
                [
                    run.run_id,
                    (run.version or "")[:8],
                    run.mode,
                    what,
                    f"{run.estimate_s:.0f}s",
                    "; ".join(run.notes),
                ]
            )
        else:
            rows.append([run.run_id, (run.version or "")[:8], run.status, "", "", run.reason])
    # The notes say why a run is skipped or how it replays: written whole, never cut.
    write_table(
        ["run", "version", "mode", "replays", "estimate", "notes"], rows, sys.stdout, last="full"
    )
    if note := plan.denser_note():
        print(note)


TTY_PROGRESS_EVERY_S = 1.0  # on a terminal, a running segment's count at most this often


def _progress_printer(stream=None):
    """Progress on stderr. To a pipe or a file (CI logs, `| tee`): one line when a segment
    starts and one when it ends, so a replay's log has two lines per segment however many
    iterations it replays; on a terminal also the running count, at most once a second."""
    stream = stream or sys.stderr
    tty = stream.isatty()
    shown: dict[tuple[str, int], tuple[str, float]] = {}

    def show(p) -> None:
        if p.state == "waiting":
            return
        key = (p.run_id, p.segment)
        last = shown.get(key)
        now = time.monotonic()
        if last is not None and last[0] == p.state:
            if not tty or p.state != "running" or now - last[1] < TTY_PROGRESS_EVERY_S:
                return
        shown[key] = (p.state, now)
        print(f"  {p.run_id} segment {p.segment}: {p.done}/{p.total} {p.state}", file=stream)

    return show


def _print_result(result: ReplayResult) -> None:
    rows = []
    for r in result.runs:
        detail = f"{r.rows} values, {r.compared} checked against the run"
        if r.strict:
            detail += ", after a strict re-run"
        if r.missing:
            detail += f", missing: {r.missing}"
        shown = detail if r.status == "finished" else "see below"
        rows.append([r.run_id, r.status, r.verdict or "", shown])
    write_table(["run", "replay", "verdict", "detail"], rows, sys.stdout)
    for r in result.runs:
        if r.divergence:
            print(f"{r.run_id} diverged, its values withheld: {r.divergence}")
        if r.error:
            print(f"{r.run_id} failed, {r.error}")
        if r.missing:
            print(f"{r.run_id} missing: {r.missing} (recorded, not replayed)")
        if r.at_risk:
            print(f"{r.run_id} values at risk: {', '.join(r.at_risk)} changed since the run")
    print(f"replay {result.replay_id} {result.status} in {result.elapsed_s:.1f} s")
