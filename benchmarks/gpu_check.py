"""florwb's GPU path on a real CUDA device: the checks a machine without one cannot run.

Run by benchmarks/gpu_check.sh on a GPU machine (never by the test suite; on a machine
without CUDA it says so and exits 2). Each check prints `CHECK <name> PASS|FAIL <detail>`,
timings print `RESULT <name> <value> <unit>`, and the processes' output goes under OUT
(argv[1]). Exit 1 when a check failed.

  log_no_sync        a CUDA training loop run with torch.cuda.set_sync_debug_mode("warn"):
                     flor.log of CUDA scalars (fp32, bf16, fp16, int64, bool, requires_grad,
                     modified in place after the call), flor.loop and the checkpoints of a
                     CUDA model make no synchronising CUDA call; the stored values equal
                     what .item() gives, bit for bit; the checkpoints hold the CUDA RNG
                     states; the run context holds the peak GPU memory
  log_call_latency   with the GPU busy (queued matmuls), one flor.log of a CUDA scalar
                     returns without waiting for them, where .item() waits
  replay_cuda        statements added later replay from the checkpoints (outer) and from
                     the start (inner) and equal a forward run of today's script: the CUDA
                     RNG (dropout, torch.randn on the device) restored at each segment
  replay_nccl        a 1-GPU torchrun run on the NCCL backend records as one run and its
                     replay equals a forward torchrun of today's script
  log_side_stream    flor.log of CUDA scalars computed on a stream of the script's own
                     (torch.cuda.stream), changed in place on that stream after the call,
                     interleaved with values logged on the default stream: no synchronising
                     call, and every stored value equals what .item() gives
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="gpu-check-"))
RESULTS: list[tuple[str, bool, str]] = []
DRY = os.environ.get("GPU_CHECK_DEVICE") == "cpu"  # this script's own logic, on a CPU

# Draws its seed from python's `random` after the first florwb call (start RNG states; SEED
# gives a forward run the recorded one), its epochs draw noise on the device and dropout
# uses the CUDA RNG (checkpointed RNG states): a replay equals the run only with both back.
TRAIN = """
import json
import os
import random
import sys
import threading
import warnings

import torch
import florwb as flor

dev = os.environ.get("GPU_CHECK_DEVICE", "cuda")  # cpu: a dry run of this script's logic
torch.zeros(1, device=dev)  # CUDA initialised before the first florwb call
epochs = flor.arg("epochs", 4)
steps = flor.arg("steps", 25)
seed = int(os.environ.get("SEED", "0")) or random.randint(1, 10**6)  # SEED: a forward run
flor.log("seed", seed)
torch.manual_seed(seed)  # the CPU's and every GPU's
net = torch.nn.Sequential(
    torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(256, 1)
).to(dev)
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
x = torch.randn(512, 64, device=dev)
y = torch.randn(512, 1, device=dev)
count = torch.zeros((), device=dev, dtype=torch.int64)
from kept import KEPT, keep  # device copies of what was logged, read after the loop
syncs = []
debug = torch.cuda.set_sync_debug_mode if dev == "cuda" else lambda mode: None
with flor.checkpointing(model=net, optimizer=opt, count=count, every=1):
    caught = []  # (thread, where, message): the mode warns in whichever thread syncs

    def note(message, category, filename, lineno, file=None, line=None):
        where = f"{filename}:{lineno}"
        caught.append((threading.current_thread().name, where, str(message)))

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = note
        debug("warn")
        for epoch in flor.loop("epoch", range(epochs)):
            noise = torch.randn(1, device=dev)
            for step in flor.loop("step", range(steps)):
                loss = ((net(x + noise) - y) ** 2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
                count += 1
                flor.log("loss", loss)  # requires grad
                flor.log("loss_bf16", loss.to(torch.bfloat16))
                flor.log("loss_fp16", loss.detach().half().reshape(1))
                flor.log("count", count)
                flor.log("positive", loss > 0.5)
                keep(loss, count)
                count += 1000  # in place after the call: the logged value is the one before
                count -= 1000
            flor.log("noise", noise)
        debug(0)
    syncs = [f"{where}: {text}" for thread, where, text in caught if thread == "MainThread"]
    # the mode's own first warning says it is a prototype: not a synchronising call
    syncs = [t for t in syncs if "ynchroniz" in t and "prototype feature" not in t]
    # florwb's own threads may wait (the flusher on a copy's event): said, not a failure
    elsewhere = sorted({f"{t} {where}" for t, where, _ in caught if t != "MainThread"})
flor.commit()
expected = {"loss": [], "loss_bf16": [], "loss_fp16": [], "count": [], "positive": []}
for loss, n in KEPT:
    expected["loss"].append(loss.item())
    expected["loss_bf16"].append(loss.to(torch.bfloat16).item())
    expected["loss_fp16"].append(loss.half().item())
    expected["count"].append(n.item())
    expected["positive"].append((loss > 0.5).item())
print(json.dumps({"syncs": syncs, "elsewhere": elsewhere, "expected": expected}))
"""

EPOCH_LEVEL = '            flor.log("noise", noise)\n'
ADD_EPOCH = '            flor.log("wsq", sum((p.double() ** 2).sum() for p in net.parameters()))\n'
STEP_LEVEL = '                flor.log("positive", loss > 0.5)\n'
ADD_STEP = (
    '                flor.log("gsq", sum((p.grad.double() ** 2).sum() for p in net.parameters()))\n'
)

LATENCY = """
import json
import time

import torch
import florwb as flor

a = torch.randn(8192, 8192, device="cuda")
flor.arg("n", 1)
s = torch.zeros((), device="cuda")
for _ in range(3):  # warm-up: cuBLAS, the pinned host allocator, the first Staged value
    flor.log("warm", (a @ a).sum())
torch.cuda.synchronize()
out = {}
for name, read in (("flor_log", lambda t: flor.log("busy", t)), ("item", lambda t: t.item())):
    times = []
    for _ in range(5):
        b = a
        for _ in range(8):
            b = b @ a  # queued, ~tens of ms of GPU work
        t = b[0, 0] + s
        start = time.perf_counter()
        read(t)
        times.append(time.perf_counter() - start)
        torch.cuda.synchronize()
    out[name] = sorted(times)[2]
flor.commit()
print(json.dumps(out))
"""

NCCL = """
import os
import torch
import torch.distributed as dist
import florwb as flor

dev = os.environ.get("GPU_CHECK_DEVICE", "cuda")  # cpu: a dry run of this script's logic
if dev == "cuda":
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl" if dev == "cuda" else "gloo")
rank = dist.get_rank()
torch.manual_seed(0)
layers = [torch.nn.Linear(16, 32), torch.nn.Dropout(0.1), torch.nn.Linear(32, 1)]
net = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(*layers).to(dev))
torch.cuda.manual_seed(100 + rank)
torch.manual_seed(100 + rank) if dev == "cpu" else None
opt = torch.optim.SGD(net.parameters(), lr=0.05)
epochs = flor.arg("epochs", 3)
with flor.checkpointing(model=net, optimizer=opt, every=1):
    for epoch in flor.loop("epoch", range(epochs)):
        shift = torch.randn(1, device=dev)
        for step in flor.loop("step", range(5)):
            x = torch.randn(32, 16, device=dev) + shift
            loss = (net(x) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            flor.log("loss", loss)
        flor.log("shift", shift)
dist.destroy_process_group()
"""
NCCL_EPOCH = '        flor.log("shift", shift)\n'
NCCL_ADD = '        flor.log("wsum", sum(p.double().sum() for p in net.parameters()))\n'
SIDE = """
import contextlib
import json
import os
import threading
import warnings

import torch
import florwb as flor

dev = os.environ.get("GPU_CHECK_DEVICE", "cuda")  # cpu: a dry run of this script's logic
torch.zeros(1, device=dev)
steps = flor.arg("steps", 300)
cuda = dev == "cuda"
side = torch.cuda.Stream() if cuda else None
on_side = (lambda: torch.cuda.stream(side)) if cuda else contextlib.nullcontext
a = torch.randn(512, 512, device=dev) / 512
acc = torch.zeros((), device=dev)
count = torch.zeros((), device=dev, dtype=torch.int64)
if cuda:
    side.wait_stream(torch.cuda.current_stream())  # a and acc exist before the side stream reads
kept = {"side": [], "side_count": [], "main": [], "temp": []}
caught = []
debug = torch.cuda.set_sync_debug_mode if cuda else lambda mode: None


def note(message, category, filename, lineno, file=None, line=None):
    caught.append((threading.current_thread().name, f"{filename}:{lineno}", str(message)))


with warnings.catch_warnings():
    warnings.simplefilter("always")
    warnings.showwarning = note
    debug("warn")
    for step in flor.loop("step", range(steps)):
        with on_side():
            b = a @ a  # queued on the side stream
            acc += b[step % 512, 0]
            count += 1
            flor.log("side", acc)
            flor.log("side_count", count)
            flor.log("temp", (b * 2)[0, 1])  # a temporary freed right after the call
            kept["side"].append(acc.clone())
            kept["side_count"].append(count.clone())
            kept["temp"].append((b * 2)[0, 1].clone())
            acc.mul_(0.5)  # in place after the call, on the same stream
            count += 1000
        flor.log("main", a[0, step % 512] * 3)  # the default stream, between side values
        kept["main"].append((a[0, step % 512] * 3).clone())
    debug(0)
syncs = [f"{w}: {t}" for th, w, t in caught if th == "MainThread" and "ynchroniz" in t]
syncs = [t for t in syncs if "prototype feature" not in t]
flor.commit()
if cuda:
    torch.cuda.synchronize()
expected = {name: [t.item() for t in ts] for name, ts in kept.items()}
print(json.dumps({"syncs": syncs, "expected": expected}))
"""

GIT_ENV = {
    "GIT_AUTHOR_NAME": "gpu-check",
    "GIT_AUTHOR_EMAIL": "gpu@example.invalid",
    "GIT_COMMITTER_NAME": "gpu-check",
    "GIT_COMMITTER_EMAIL": "gpu@example.invalid",
}


def sh(cmd: list[str], cwd: Path, log: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run `cmd`, keep its output under OUT/log, raise with its tail when it fails."""
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **GIT_ENV, "OMP_NUM_THREADS": "4"},
    )
    with open(OUT / log, "a") as f:
        f.write(f"$ {' '.join(cmd)}  (rc {proc.returncode})\n{proc.stdout}\n{proc.stderr}\n")
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-20:])
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{tail}")
    return proc


# Beside TRAIN: what it logged, kept on the device and read with .item() after the loop (a
# module of its own, so the loop changes nothing in place that a replay would restore).
KEPT = """
KEPT = []


def keep(loss, count):
    KEPT.append([loss.detach().clone(), count.clone()])
"""


def project(name: str, script: str) -> Path:
    root = Path(tempfile.mkdtemp(prefix=f"gpu-{name}-")) / "project"
    root.mkdir()
    (root / "train.py").write_text(script)
    (root / "kept.py").write_text(KEPT)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "v1"]):
        sh(["git", *args], root, f"{name}.log")
    return root


def commit(root: Path, name: str) -> None:
    sh(["git", "commit", "-qam", "today"], root, f"{name}.log")


def values(root: Path, name: str, run_id: str, source: str) -> dict:
    from florwb_engine.store import Store

    rows = Store(root).query(
        "SELECT coalesce(rank, 0) AS rank, coalesce(epoch, -1) AS epoch, "
        "coalesce(step, -1) AS step, value FROM logs "
        f"WHERE name = '{name}' AND run_id = '{run_id}' AND source = '{source}'"
    )
    return {(int(r.rank), int(r.epoch), int(r.step)): r.value for r in rows.itertuples()}


CHECKS: list = []


def check(fn):
    """Register a check: main() runs them in order, each whatever the others did."""
    CHECKS.append(fn)
    return fn


def run_check(fn) -> None:
    name = fn.__name__.removeprefix("check_")
    start = time.perf_counter()
    try:
        detail = fn()
        ok = True
    except Exception as exc:  # noqa: BLE001 - every check runs and says why it failed
        ok, detail = False, f"{type(exc).__name__}: {exc}"
        with open(OUT / f"{name}.log", "a") as f:
            f.write(traceback.format_exc())
    took = time.perf_counter() - start
    print(f"CHECK {name} {'PASS' if ok else 'FAIL'} ({took:.1f}s) {detail}", flush=True)
    RESULTS.append((name, ok, detail))


STATE: dict = {}


@check
def check_log_no_sync() -> str:
    import torch

    from florwb_engine.project import checkpoint_dir
    from florwb_engine.store import Store
    from florwb_engine.store.values import decode_value

    root = project("log_no_sync", TRAIN)
    report = json.loads(sh([sys.executable, "train.py"], root, "log_no_sync.log").stdout)
    STATE["cuda_project"] = root
    assert report["syncs"] == [], f"synchronising calls in florwb: {report['syncs'][:5]}"
    store = Store(root)
    run = store.runs()[0]
    rows = store.query(
        f"SELECT name, value, text, vtype FROM logs WHERE run_id = '{run['run_id']}' ORDER BY seq"
    )
    logged: dict = {}
    for name, value, text, vtype in rows.itertuples(index=False):
        logged.setdefault(name, []).append(decode_value(value, text, vtype))
    for name, want in report["expected"].items():
        got = logged.get(name)
        assert got == want, f"{name}: stored {got[:3] if got else got} != .item() {want[:3]}"
    assert len(logged["noise"]) == 4 and all(type(v) is float for v in logged["noise"])
    saved = sorted((checkpoint_dir(root) / run["run_id"]).glob("*.pt"))
    assert len(saved) == 4, f"{len(saved)} checkpoints"
    if DRY:
        return f"dry run on the CPU: {len(saved)} checkpoints, values stored as .item() gives"
    rng = torch.load(saved[-1], weights_only=True)["rng"]
    assert "cuda" in rng and len(rng["cuda"]) == torch.cuda.device_count(), "no CUDA RNG state"
    context = store.query(
        f"SELECT device_kind, gpu_peak_bytes FROM run_context WHERE run_id = '{run['run_id']}'"
    )
    kind, peak = context.device_kind.iloc[0], context.gpu_peak_bytes.iloc[0]
    assert kind == "cuda" and peak is not None and peak[0] > 0, f"context {kind} {peak}"
    n = sum(len(v) for v in report["expected"].values())
    if report["elsewhere"]:
        print(f"# synchronising calls on florwb's threads: {report['elsewhere']}", flush=True)
    return f"{n} CUDA scalars stored exactly, 0 syncs, 4 checkpoints with CUDA RNG, peak {peak}"


@check
def check_log_call_latency() -> str:
    if DRY:
        return "skipped in a dry run on the CPU"
    root = project("latency", LATENCY)
    out = json.loads(sh([sys.executable, "train.py"], root, "latency.log").stdout)
    print(f"RESULT cuda_busy_flor_log_call_s {out['flor_log']:.6g} s", flush=True)
    print(f"RESULT cuda_busy_item_call_s {out['item']:.6g} s", flush=True)
    assert out["flor_log"] < out["item"] / 10, out
    return f"flor.log {out['flor_log'] * 1e6:.0f} us vs .item() {out['item'] * 1e6:.0f} us"


@check
def check_log_side_stream() -> str:
    from florwb_engine.store import Store
    from florwb_engine.store.values import decode_value

    root = project("log_side_stream", SIDE)
    report = json.loads(sh([sys.executable, "train.py"], root, "log_side_stream.log").stdout)
    assert report["syncs"] == [], f"synchronising calls in florwb: {report['syncs'][:5]}"
    run_id = Store(root).runs()[0]["run_id"]
    rows = Store(root).query(
        f"SELECT name, value, text, vtype FROM logs WHERE run_id = '{run_id}' ORDER BY seq"
    )
    logged: dict = {}
    for name, value, text, vtype in rows.itertuples(index=False):
        logged.setdefault(name, []).append(decode_value(value, text, vtype))
    for name, want in report["expected"].items():
        got = logged.get(name)
        assert got == want, f"{name}: stored {got[:3] if got else got} != .item() {want[:3]}"
    n = sum(len(v) for v in report["expected"].values())
    return f"{n} values from a side stream and the default stream stored exactly, 0 syncs"


def _replay(root: Path, names: list[str], run_id: str, mode: str, workers: int) -> str:
    from florwb_engine.replay import execute, plan_replay

    plan = plan_replay(root, names, run_ids=[run_id], workers=workers)
    (run_plan,) = plan.ready()
    assert run_plan.mode == mode, f"planned {run_plan.mode}, not {mode}: {run_plan.notes}"
    result = execute(plan)
    assert result.status == "finished", f"{result.status}: {result.runs}"
    assert result.runs[0].compared > 0, "no recorded value recomputed"
    return plan.replay_id


def _equal_forward(root: Path, run_id: str, replays: dict, forward_id: str) -> str:
    worst = 0.0
    for name, replay_id in replays.items():
        replayed = values(root, name, run_id, replay_id)
        forward = values(root, name, forward_id, "record")
        assert replayed and set(forward) == set(replayed), f"{name}: rows differ"
        for key, want in forward.items():
            diff = abs(replayed[key] - want)
            worst = max(worst, diff / max(abs(want), 1e-12))
        assert worst <= 1e-6, f"{name}: relative difference {worst:.3g}"
    exact = all(
        values(root, n, run_id, r) == values(root, n, forward_id, "record")
        for n, r in replays.items()
    )
    return "bit-equal" if exact else f"equal within {worst:.2g} relative"


@check
def check_replay_cuda() -> str:
    from florwb_engine.store import Store

    root = STATE.get("cuda_project")
    assert root is not None, "log_no_sync did not record"
    run_id = Store(root).runs()[0]["run_id"]
    script = root / "train.py"
    script.write_text(
        script.read_text()
        .replace(EPOCH_LEVEL, EPOCH_LEVEL + ADD_EPOCH)
        .replace(STEP_LEVEL, STEP_LEVEL + ADD_STEP)
    )
    commit(root, "log_no_sync")
    replays = {
        "wsq": _replay(root, ["wsq"], run_id, "outer", workers=2),
        "gsq": _replay(root, ["gsq"], run_id, "inner", workers=2),
    }
    before = {r["run_id"] for r in Store(root).runs()}
    (seed,) = values(root, "seed", run_id, "record").values()
    os.environ["SEED"] = str(int(seed))
    try:
        sh([sys.executable, "train.py"], root, "log_no_sync.log")
    finally:
        del os.environ["SEED"]
    (forward_id,) = {r["run_id"] for r in Store(root).runs()} - before
    return "outer and inner replays (2 segments) " + _equal_forward(
        root, run_id, replays, forward_id
    )


def _torchrun(root: Path) -> None:
    from florwb_engine.replay import ddp_launch

    port = str(ddp_launch.free_port())
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=1"]
    sh([*cmd, "--master_port", port, "train.py"], root, "replay_nccl.log")


@check
def check_replay_nccl() -> str:
    from florwb_engine.store import Store

    root = project("replay_nccl", NCCL)
    _torchrun(root)
    runs = Store(root).run_rows()
    assert len(runs) == 1, f"{len(runs)} runs"
    run_id = runs[0].run_id
    script = root / "train.py"
    script.write_text(script.read_text().replace(NCCL_EPOCH, NCCL_EPOCH + NCCL_ADD))
    commit(root, "replay_nccl")
    replays = {"wsum": _replay(root, ["wsum"], run_id, "outer", workers=1)}
    _torchrun(root)
    (forward_id,) = {r.run_id for r in Store(root).run_rows()} - {run_id}
    how = "gloo, a dry run" if DRY else "nccl, 1 GPU"
    return f"torchrun {how}: replay " + _equal_forward(root, run_id, replays, forward_id)


def main() -> None:
    import torch

    OUT.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available() and not DRY:
        print("# no CUDA device: these checks need one (benchmarks/gpu_check.sh)")
        sys.exit(2)
    name = "a dry run on the CPU" if DRY else torch.cuda.get_device_name(0)
    print(f"# torch {torch.__version__}, {name}", flush=True)
    only = set(sys.argv[2:])  # names of checks to run; all when none
    for fn in CHECKS:
        if not only or fn.__name__.removeprefix("check_") in only:
            run_check(fn)
    failed = [name for name, ok, _ in RESULTS if not ok]
    print(f"# {len(RESULTS) - len(failed)}/{len(RESULTS)} GPU checks passed; logs in {OUT}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
