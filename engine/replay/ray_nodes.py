"""A run launched on several nodes (`torchrun --nnodes N`) replayed across the nodes of a
Ray cluster, as it was launched.

The local executor replays such a run on one machine as one node of all its ranks
(ddp_launch.py). On Ray each recorded node gets a node again: a placement group with one
bundle per recorded node (its processes' CPUs and GPUs: `--cpus-per-task` /
`--gpus-per-task` per process, as for a one-node launch), and one actor per bundle that
relaunches the recorded launcher with `--nnodes N` and a c10d rendezvous on the first
actor's node (a port free there, that actor hosting the store). Every actor lays out the
segment as ray_executor does for one node (the same code, checkpoints and spec from the
object store); each returns its ranks' journals, and the segment's result is all of them,
written by the driver where a local replay writes them, so rows and verdicts are the local
replay's.

Where the bundles go: STRICT_SPREAD (one recorded node per Ray node) when the cluster has
as many live nodes that each hold a bundle; else PACK, when the bundles still fit on the
nodes it has (several launchers then share a Ray node, and meet at the rendezvous as on
one machine); else the segment is failed at once with the reason, not left waiting for
nodes that do not exist. The choice, in one line, and the Ray node each bundle ran on
with the ranks whose journals came from it, are the segment's `placement` in the result
(`florwb replay --json`: `shipped.<segment>.placement`).

The segment's worker is a coordinator actor holding no resources of its own: it makes
the placement group, starts the node actors in it, and ends both when the segment ends
(the placement group is removed, not left holding the cluster's CPUs). Cancel reaches it
as it reaches a one-node worker (`stop`): it tells every node actor to stop its launcher
(its process group, then the ranks torchrun started in sessions of their own). When one
node's launcher fails, the others are stopped: their world can no longer complete. A
coordinator killed by the driver takes its node actors with it (Ray ends the actors an
actor created); its placement group then lives until the driver's Ray job ends.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from typing import TYPE_CHECKING, Any

from florwb_engine.record.ranks import TORCHRUN
from florwb_engine.replay.ray_executor import POLL_S, WarmWorker

if TYPE_CHECKING:
    from florwb_engine.replay.ray_executor import RayOptions

SPREAD = "STRICT_SPREAD"
PACK = "PACK"


def spans_nodes(launch: dict | None) -> bool:
    """Whether a plan's launch is replayed across nodes: a torchrun run of several nodes
    with all its ranks (not rank 0 alone, ddp_launch.fit)."""
    return (
        launch is not None
        and launch.get("launcher") == TORCHRUN
        and int(launch.get("nnodes") or 1) > 1
        and int(launch.get("nproc") or 1) == int(launch.get("world_size") or 1)
    )


def node_bundle(launch: dict, options: RayOptions) -> dict[str, float]:
    """One recorded node's resources: per process `--cpus-per-task` (default 1) and
    `--gpus-per-task` (default 1 for a run on GPUs), times its processes."""
    per_node = int(launch["world_size"]) // int(launch["nnodes"])
    cpus = options.cpus_per_task if options.cpus_per_task is not None else 1.0
    if options.gpus_per_task is not None:
        gpus = options.gpus_per_task
    else:
        gpus = 1.0 if launch.get("devices") else 0.0
    bundle = {"CPU": cpus * per_node}
    if gpus:
        bundle["GPU"] = gpus * per_node
    return bundle


def choose(
    bundle: dict[str, float], nnodes: int, nodes: list[dict[str, float]]
) -> tuple[str | None, str]:
    """(strategy, the one line that says so) for `nnodes` bundles on a cluster whose live
    nodes have `nodes` resources: STRICT_SPREAD when as many nodes each hold a bundle, PACK
    when they fit on fewer, None (and why) when they do not fit at all."""
    fits = [_how_many(bundle, node) for node in nodes]
    need = _words(bundle)
    if sum(1 for n in fits if n > 0) >= nnodes:
        return SPREAD, f"{nnodes} nodes of {need} each: one per Ray node ({SPREAD})"
    if sum(fits) >= nnodes:
        holding = sum(1 for n in fits if n > 0)
        return PACK, (
            f"{nnodes} nodes of {need} each on {holding} Ray node(s) that hold them ({PACK}): "
            f"the cluster has fewer nodes than the run had, so launchers share a node"
        )
    return None, (
        f"the run's {nnodes} nodes need {need} each; the cluster's live nodes hold "
        f"{sum(fits)} such bundle(s)"
    )


def _how_many(bundle: dict[str, float], node: dict[str, float]) -> int:
    """How many bundles fit on one node's resources."""
    counts = [int(node.get(kind, 0.0) // amount) for kind, amount in bundle.items() if amount > 0]
    return min(counts) if counts else 1


def _words(bundle: dict[str, float]) -> str:
    return f"{bundle.get('CPU', 0):g} CPU(s) and {bundle.get('GPU', 0):g} GPU(s)"


def live_nodes() -> list[dict[str, float]]:
    """The resources of the connected cluster's live nodes."""
    import ray

    return [
        {k: float(v) for k, v in n.get("Resources", {}).items()}
        for n in ray.nodes()
        if n.get("Alive")
    ]


def submit(driver: Any, job: Any) -> None:
    """Start the segment's coordinator (a worker of the segment's own, in the driver's
    `pending` and `own` as a one-node launch's actor is), or fail the segment at once with
    the reason where the cluster cannot hold the run's nodes. `driver` and `job`:
    ray_executor's driver and the segment's job."""
    import ray

    launch = job.payload["launch"]
    nnodes = int(launch["nnodes"])
    bundle = node_bundle(launch, driver.options)
    strategy, line = choose(bundle, nnodes, live_nodes())
    if strategy is None:
        job.returncode = -1
        driver.end(job, -1, f"florwb: {line}\n")
        return
    coordinator: Any = ray.remote(NodeGroup)
    actor = coordinator.options(num_cpus=0, max_concurrency=4, max_restarts=0).remote(
        bundle, nnodes, strategy, line
    )
    ref = actor.run.remote(job.payload, job.refs)
    driver.pending[ref] = (job, actor)
    driver.own.add(ref)
    driver.report(job.index, 0, "running", None)


def node_job(job: dict, node: int, nnodes: int, endpoint: str) -> dict:
    """The segment as node `node` of `nnodes` runs it: its share of the processes and the
    rendezvous (ddp_launch.launch_argv), hosted by node 0."""
    launch = dict(job["launch"])
    launch["nproc"] = int(launch["world_size"]) // nnodes
    launch["rendezvous"] = {
        "nnodes": nnodes,
        "endpoint": endpoint,
        "id": "florwb-" + str(job["key"]).replace(":", "-"),
        "host": node == 0,
    }
    return {**job, "launch": launch}


def combined(outs: list[dict], placement: dict, ended: list[int]) -> dict:
    """One segment's result from its nodes' results (`ended`: the nodes in the order they
    ended): every node's journals, the exit code of the node that failed first (0 when
    all finished), the placement's line, then each node's log under a line naming it."""
    failed = [outs[i]["returncode"] for i in ended if outs[i]["returncode"] != 0]
    log = f"florwb: {placement['line']}\n".encode() + b"".join(
        f"florwb: node {i} ({placement['nodes'][i]['node_id'][:12]}):\n".encode() + o["log"]
        for i, o in enumerate(outs)
    )
    return {
        "returncode": failed[0] if failed else 0,
        "journals": {name: data for o in outs for name, data in o["journals"].items()},
        "log": log[-64_000:],
        "placement": placement,
    }


class NodeWorker(WarmWorker):
    """One recorded node's actor: a worker of the segment's own (ray_executor.WarmWorker
    with no idle life) that also says where it runs."""

    def where(self) -> dict:
        """Its Ray node, that node's address and a TCP port free there (for node 0's
        rendezvous)."""
        import ray

        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))  # every address of the node: the other nodes reach it by its IP
            port = int(s.getsockname()[1])
        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "ip": ray.util.get_node_ip_address(),
            "port": port,
        }


class NodeGroup:
    """The coordinator of one multi-node segment (a Ray actor holding no resources)."""

    def __init__(self, bundle: dict[str, float], nnodes: int, strategy: str, line: str) -> None:
        self._bundle = bundle
        self._nnodes = nnodes
        self._strategy = strategy
        self._line = line
        self._stop = threading.Event()

    def stop(self, key: str) -> None:
        self._stop.set()

    def run(self, job: dict, refs: dict) -> dict:
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        cancelled = {"returncode": -signal.SIGTERM, "journals": {}, "log": b"cancelled\n"}
        group = placement_group([self._bundle] * self._nnodes, strategy=self._strategy)
        workers: list[Any] = []
        try:
            if not self._wait([group.ready()]):
                return cancelled
            node: Any = ray.remote(NodeWorker)
            workers = [
                node.options(
                    num_cpus=self._bundle.get("CPU", 0.0),
                    num_gpus=self._bundle.get("GPU", 0.0),
                    max_concurrency=4,  # stop() reaches a worker busy in run()
                    max_restarts=0,
                    scheduling_strategy=PlacementGroupSchedulingStrategy(
                        placement_group=group, placement_group_bundle_index=i
                    ),
                ).remote(0.0, True)
                for i in range(self._nnodes)
            ]
            places = [w.where.remote() for w in workers]
            if not self._wait(places):
                return cancelled
            where = ray.get(places)
            endpoint = f"{where[0]['ip']}:{where[0]['port']}"
            runs = [
                w.run.remote(node_job(job, i, self._nnodes, endpoint), refs)
                for i, w in enumerate(workers)
            ]
            outs, ended = self._run(job["key"], workers, runs)
            placement = {
                "strategy": self._strategy,
                "line": self._line,
                "endpoint": endpoint,
                "nodes": [
                    {
                        "node_id": w["node_id"],
                        "ip": w["ip"],
                        "ranks": sorted(_ranks(o["journals"])),
                    }
                    for w, o in zip(where, outs, strict=True)
                ],
            }
            return combined(outs, placement, ended)
        finally:
            for worker in workers:
                with contextlib.suppress(Exception):  # gone already
                    ray.kill(worker)
            with contextlib.suppress(Exception):  # removed with its creator already
                remove_placement_group(group)

    def _wait(self, refs: list[Any]) -> bool:
        """Wait for `refs`; False when told to stop first."""
        import ray

        pending = list(refs)
        while pending:
            if self._stop.is_set():
                return False
            _ready, pending = ray.wait(pending, num_returns=len(pending), timeout=POLL_S)
        return True

    def _run(self, key: str, workers: list[Any], runs: list[Any]) -> tuple[list[dict], list[int]]:
        """Every node's result, in node order, and the nodes in the order they ended. Told
        to stop, or one node failed: every node still running is told to stop (a world
        missing a node cannot finish)."""
        import ray
        from ray.exceptions import RayError

        outs: dict[int, dict] = {}
        ended: list[int] = []
        index = {ref: i for i, ref in enumerate(runs)}
        pending = list(runs)
        stopped = False
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=POLL_S)
            for ref in ready:
                ended.append(index[ref])
                try:
                    outs[index[ref]] = ray.get(ref)
                except RayError as exc:  # its actor died: the node's launcher with it
                    outs[index[ref]] = {
                        "returncode": -1,
                        "journals": {},
                        "log": f"ray: {str(exc).strip()[-2000:]}\n".encode(),
                    }
            failed = any(o["returncode"] != 0 for o in outs.values())
            if pending and not stopped and (self._stop.is_set() or failed):
                stopped = True
                for i, ref in enumerate(runs):
                    if ref in pending:
                        workers[i].stop.remote(key)
        return [outs[i] for i in range(len(runs))], ended


def _ranks(journals: dict[str, bytes]) -> set[int]:
    """The ranks whose journals a node returned (`...rank<r>.journal`)."""
    found = set()
    for name in journals:
        stem = name.rsplit(".rank", 1)
        if len(stem) == 2 and stem[1].split(".", 1)[0].isdigit():
            found.add(int(stem[1].split(".", 1)[0]))
    return found


__all__ = [
    "PACK",
    "SPREAD",
    "NodeGroup",
    "NodeWorker",
    "choose",
    "combined",
    "live_nodes",
    "node_bundle",
    "node_job",
    "spans_nodes",
    "submit",
]
