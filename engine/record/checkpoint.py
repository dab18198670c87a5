"""Adaptive periodic checkpointing (FLOR): state_dicts plus RNG states of outer-loop
iterations, as often as a compute-time budget allows. The state is copied where the
iteration's inner loops end (FLOR's SkipBlock: a replay skips them and runs the rest of the
body), at the iteration's end when it has none, and written when the iteration ends; the
iteration the loop is left in (break, return, an exception) is always checkpointed.

The policy keeps `checkpoint cost <= budget * compute time` at every decision, so cheap
checkpoints happen every iteration and expensive ones spread out; the last iteration is
always checkpointed because replay needs the end state. A run that asks for a period
(`flor.checkpointing(..., every=N)`) gets iterations 0, N, 2N, ... and the last instead,
whatever they cost: each one is an iteration an outer-mode replay restores instead of
re-executing. Cost is what the training thread
paid (copying state to host memory, waiting for a free writer slot) plus the background
write time, so the budget also holds when the writer competes for the GIL or the disk.
A checkpoint is copied to host memory on the training thread (the tensors keep changing),
then written by one background thread to a temp file and atomically renamed.
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import copy
import functools
import io
import os
import pickle
import queue
import random
import re
import sys
import threading
import time
import types
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from florwb_engine import settings
from florwb_engine.atomic import sync_folder, temp_path
from florwb_engine.journal_events import Checkpoint
from florwb_engine.record import loop_state
from florwb_engine.record.values import Device, attr_of

DEFAULT_BUDGET = settings.read(settings.CKPT_BUDGET)
_ASSUMED_BYTES_PER_S = 1e9  # first-checkpoint estimate, before anything was measured


@dataclass
class Policy:
    budget: float = DEFAULT_BUDGET
    every: int | None = None  # a fixed period asked for; None: as the budget allows
    compute_s: float = 0.0
    cost_s: float = 0.0
    count: int = 0
    recent: list[float] = field(default_factory=list)
    min_interval_s: float = 0.0  # flor.set_ckpt_interval: at least this long between two
    _last_s: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def should_checkpoint(self, iteration_s: float, estimate_s: float, reserve: bool) -> bool:
        """Checkpoint now if that keeps cost within budget; with `reserve`, also leave room
        for the final checkpoint, which is always taken. Expected cost is the largest of the
        last few measured, so one slow write does not break the budget."""
        with self._lock:
            self.compute_s += iteration_s
            expected = max(self.recent) if self.recent else estimate_s
            needed = self.cost_s + expected * (2 if reserve else 1)
            return needed <= self.budget * self.compute_s and self._past_interval()

    def _past_interval(self) -> bool:
        """The interval floor allows a checkpoint now (noted as taken when it does)."""
        if self.min_interval_s <= 0:
            return True
        now = time.monotonic()
        if self._last_s is not None and now - self._last_s < self.min_interval_s:
            return False
        self._last_s = now
        return True

    def computed(self, compute_s: float) -> None:
        """Compute time of an iteration after its checkpoint was decided."""
        with self._lock:
            self.compute_s += compute_s

    def paid(self, cost_s: float, *, checkpoints: int = 1) -> None:
        with self._lock:
            self.cost_s += cost_s
            self.count += checkpoints
            if checkpoints:
                self.recent = [*self.recent[-2:], cost_s]


def copy_to_host(obj: Any, devices: dict | None = None) -> Any:
    """Deep copy with every tensor on the CPU: later training steps must not change it.

    With `devices`, a tensor on a GPU is copied without waiting: into pinned host memory,
    queued on its device's current stream, so the training thread goes on queueing work
    (later in-place updates run after the copy on that stream) while the copy proceeds.
    `devices` maps each such device to an event recorded before its first copy; the
    copies may be read only once `copies_done`'s events for them have completed."""
    if attr_of(obj, "detach") is not None and attr_of(obj, "to") is not None:
        if devices is not None and Device.is_device(obj):
            if obj.device not in devices:
                devices[obj.device] = Device.event_on(obj.device, timing=True)
            return obj.detach().to("cpu", non_blocking=True, copy=True)
        return obj.detach().to("cpu", copy=True)
    if isinstance(obj, dict):
        return type(obj)((k, copy_to_host(v, devices)) for k, v in obj.items())
    if isinstance(obj, list):
        return [copy_to_host(v, devices) for v in obj]
    if isinstance(obj, tuple):
        return tuple(copy_to_host(v, devices) for v in obj)
    return copy.deepcopy(obj)


def copies_done(devices: dict) -> list[tuple[Any, Any]]:
    """(before, after) events around the copies `copy_to_host(..., devices)` queued, one
    pair per device on its current stream. The writer waits on the second (not the
    training thread) and counts the time between them as the checkpoint's: the copies
    hold up the training's own work on that stream for as long."""
    return [(before, Device.event_on(device, timing=True)) for device, before in devices.items()]


def capture_rng() -> dict:
    """RNG states in a form `torch.load(weights_only=True)` accepts (no numpy objects)."""
    import torch

    version, words, gauss = random.getstate()
    state: dict[str, Any] = {
        # 625 words as one tensor: as a list they are most of a small checkpoint's load time
        "python": {"version": version, "words": torch.tensor(words), "gauss": gauss},
        "torch": torch.get_rng_state(),
    }
    np = sys.modules.get("numpy")
    if np is not None:
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype("int64")),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    import torch

    py = state["python"]
    if isinstance(py, dict):
        random.setstate((py["version"], tuple(py["words"].tolist()), py["gauss"]))
    else:  # checkpoints written before the words became a tensor
        random.setstate((py[0], tuple(py[1]), py[2]))
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        s = state["numpy"]
        keys = s["keys"].numpy().astype(np.uint32)
        np.random.set_state((s["kind"], keys, s["pos"], s["has_gauss"], s["cached"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def state_of(objects: dict[str, Any], devices: dict | None = None) -> dict:
    """The registered objects' states, RNG states and gradients, copied to host memory (GPU
    tensors without waiting when `devices` collects them: see copy_to_host)."""
    states = {}
    for name, obj in objects.items():
        getter = attr_of(obj, "state_dict")
        states[name] = copy_to_host(getter() if callable(getter) else obj, devices)
    return {"objects": states, "rng": capture_rng(), GRADS: grads_of(objects, devices)}


# The key of the moment a checkpoint's state was copied: after how many of its iteration's
# inner flor.loops (those nested directly in the main loop's body). 0: at the iteration's
# end (it had no inner loop, or was left before one ended). Checkpoints written before the
# key existed were all taken at the iteration's end.
AFTER_INNER = "after_inner"


# The key of the registered modules' parameter gradients in a checkpoint. `.grad` is no part
# of any state_dict, yet a statement added later may read it (`clip_grad_norm_` at the start
# of an epoch reads the last step's gradients): without it an outer-mode replay would read
# zeros. Checkpoints written before it existed lack the key; replay planning asks
# (`holds_grads`) and re-executes from the start instead.
GRADS = "grads"


def grads_of(objects: dict[str, Any], devices: dict | None = None) -> dict:
    """{object: {parameter name: gradient}} for registered modules; parameters without a
    gradient are left out (restored as None)."""
    grads: dict[str, dict] = {}
    for name, obj in objects.items():
        named = attr_of(obj, "named_parameters")
        if not callable(named):
            continue
        grads[name] = {
            pname: copy_to_host(p.grad, devices) for pname, p in named() if p.grad is not None
        }
    return grads


def restore_grads(objects: dict[str, Any], saved: dict) -> None:
    """Give the registered modules' parameters the gradients saved with a checkpoint."""
    for name, grads in saved.get(GRADS, {}).items():
        named = attr_of(objects.get(name), "named_parameters")
        if not callable(named):
            continue
        for pname, p in named():
            grad = grads.get(pname)
            p.grad = None if grad is None else grad.to(device=p.device, dtype=p.dtype)


def _mapped(path: Path) -> Any:
    """A checkpoint file's contents, memory-mapped (cheap for big ones). Planning asks
    several questions of a run's first and last checkpoint (gradients held, the moment it
    was taken, loop state kept, memoized names): the file is read once for all of them."""
    stat = path.stat()
    return _mapped_at(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _mapped_at(path: str, _mtime_ns: int, _size: int) -> Any:
    found = _read_without_torch(path)
    if found is not None:
        return found
    import torch

    return torch.load(path, weights_only=True, map_location="cpu", mmap=True)


class _Opaque:
    """A tensor, storage, dtype or size of a checkpoint read without torch: planning asks
    which keys a checkpoint holds and the names and notes kept beside the tensors, never
    a tensor's value."""

    def __new__(cls, *_args: Any, **_kwargs: Any) -> _Opaque:
        return object.__new__(cls)

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    def __setstate__(self, _state: Any) -> None:
        pass


class _WithoutTorch(pickle.Unpickler):
    """torch.save's pickle with torch's classes as _Opaque (and its storages, the
    persistent ids): the rest (dicts, strings, numbers) comes out as it is."""

    _PLAIN = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("_codecs", "encode"): codecs.encode,  # bytes, in pickle protocol 2
        ("builtins", "set"): set,
        ("builtins", "frozenset"): frozenset,
        ("builtins", "complex"): complex,
        ("builtins", "slice"): slice,
        ("builtins", "bytearray"): bytearray,
    }

    def find_class(self, module: str, name: str) -> Any:
        return self._PLAIN.get((module, name), _Opaque)

    def persistent_load(self, pid: Any) -> Any:
        return _Opaque()


def _read_without_torch(path: str) -> Any | None:
    """A checkpoint's pickle without importing torch (seconds, in a replay's planning),
    its tensors left opaque; None where it is not a torch.save zip file as expected
    (then torch reads it)."""
    try:
        with zipfile.ZipFile(path) as archive:
            pickled = [n for n in archive.namelist() if n.rsplit("/", 1)[-1] == "data.pkl"]
            if len(pickled) != 1:
                return None
            with archive.open(pickled[0]) as data:
                return _WithoutTorch(data).load()
    except Exception:  # noqa: BLE001 - torch reads it instead, and says what is wrong
        return None


def holds_grads(path: Path) -> bool:
    """Whether a checkpoint file carries the gradients (memory-mapped: cheap for big ones)."""
    saved = _mapped(path)
    return isinstance(saved, dict) and GRADS in saved


def taken_after_inner(path: Path) -> bool:
    """Whether a checkpoint file notes the moment it was taken (AFTER_INNER): written by a
    florwb that copies the state at the end of the inner loops (memory-mapped: cheap)."""
    saved = _mapped(path)
    return isinstance(saved, dict) and AFTER_INNER in saved


def loop_state_kept(path: Path) -> dict[str, str] | None:
    """What a checkpoint could not keep of the loop-carried names ({name: why}; empty when
    it kept them all), or None for a checkpoint written before florwb kept them."""
    saved = _mapped(path)
    if not isinstance(saved, dict) or loop_state.CARRIED not in saved:
        return None
    return dict(saved.get(loop_state.UNCARRIED) or {})


def left_kept(path: Path) -> tuple[int, set[str], dict[str, str]] | None:
    """(after how many inner loops it was taken, the names its inner loops' memoized
    values hold, {name: why not memoized}) of a checkpoint file, or None for one written
    before florwb memoized them."""
    saved = _mapped(path)
    if not isinstance(saved, dict) or loop_state.LEFT not in saved:
        return None
    names = {name for values in saved[loop_state.LEFT].values() for name in values}
    return int(saved.get(AFTER_INNER, 0)), names, dict(saved.get(loop_state.UNMEMOIZED) or {})


def load(path: Path) -> dict:
    import torch

    return torch.load(path, weights_only=True, map_location="cpu")


def restore(objects: dict[str, Any], saved: dict, *, rng: bool = True) -> None:
    """Put a checkpoint back into live objects (model, optimizer, ...) and the RNGs."""
    for name, obj in objects.items():
        if name not in saved["objects"]:
            continue
        state = saved["objects"][name]
        loader = attr_of(obj, "load_state_dict")
        if callable(loader):
            loader(state)
        elif attr_of(obj, "copy_") is not None:
            obj.copy_(state)
    restore_grads(objects, saved)
    if rng:
        restore_rng(saved["rng"])


def safe_loop_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:60] or "loop"


def checkpoint_path(folder: Path, loop: str, iteration: int) -> Path:
    return folder / f"{safe_loop_name(loop)}-{iteration:06d}.pt"


class Checkpointer:
    """Owns the registered objects, the policy and the background writer of one run."""

    def __init__(self, folder: Path, on_written: Callable[[dict], None], budget: float) -> None:
        self.folder = folder
        self.objects: dict[str, Any] = {}
        self.policy = Policy(budget=budget)
        self.loop_depth: int | None = None
        self._on_written = on_written
        self._queue: queue.Queue = queue.Queue(maxsize=2)
        self._thread: threading.Thread | None = None
        self._state_bytes = 0
        self.last_iteration: int | None = None
        self.failed = 0  # checkpoints that could not be written
        # Ranks > 0 of a DDP launch: rank 0 writes the (identical) state; this rank keeps
        # only its RNG states, here, at the end of every outer iteration (a few KiB).
        self.rng_only: Path | None = None
        # The main-loop iteration in progress and its checkpoint: decided (None: not yet),
        # the compute seconds it was decided on, the state copied for it and what copying
        # cost, how many inner loops ended so far (iteration_started, inner_loop_ended).
        self._iteration: int | None = None
        self._last = False
        self._total_known = False
        self._started = 0.0
        self._inner_ended = 0
        self._decided: bool | None = None
        self._decided_s = 0.0
        self._pending: tuple[dict, float, list] | None = None  # state, copy s, copies_done

    def estimate_s(self) -> float:
        if not self._state_bytes:
            total = 0
            for obj in self.objects.values():
                getter = attr_of(obj, "state_dict")
                for t in tensors_in(getter() if callable(getter) else obj):
                    total += t.numel() * t.element_size()
            self._state_bytes = total
        return 0.001 + self._state_bytes / _ASSUMED_BYTES_PER_S

    def iteration_started(self, iteration: int, total: int | None, now: float) -> None:
        """A main-loop iteration begins: its checkpoint, if any, is not decided yet."""
        self._iteration = iteration
        self._total_known = total is not None
        self._last = total is not None and iteration == total - 1
        self._started = now
        self._inner_ended = 0
        self._decided = None
        self._decided_s = 0.0

    def inner_loop_ended(self, frame: types.FrameType | None = None) -> None:
        """A flor.loop nested directly in the main loop's body ended: the SkipBlock moment.

        An outer-mode replay skips these loops and restores their end state, then runs the
        rest of the body (a scheduler step, an evaluation) itself; a checkpoint taken at the
        iteration's end would hold that rest's effect and the replay would apply it twice.
        So the state is copied here, each such loop's end replacing the last one's copy,
        and written when the iteration ends. Whether this iteration is checkpointed at all
        is decided at its first such moment, on the compute time so far. `frame` runs
        the loop that ended: the names it leaves for the code after it are read there."""
        if self._iteration is None or not self.objects:
            return
        self._inner_ended += 1
        if self._decided is None:
            self._decided_s = time.perf_counter() - self._started
            self._decided = self._decide(self._decided_s)
        if self._decided:
            self._snapshot(self._inner_ended, frame)

    def end_of_iteration(
        self, loop: str, iteration: int, ctx_id: int, iteration_s: float, total: int | None
    ) -> None:
        if not self.objects:
            return
        if self._iteration != iteration:  # no iteration_started (a caller of its own)
            self.iteration_started(iteration, total, time.perf_counter() - iteration_s)
        if self._decided is None:  # no inner flor.loop ended: the iteration's end it is
            self._decided = self._decide(iteration_s)
            if self._decided:
                self._snapshot(0)
        else:  # decided at the inner loops' end: the rest of the iteration is compute too
            self.policy.computed(max(iteration_s - self._decided_s, 0.0))
        self._write_pending(loop, iteration, ctx_id)

    def loop_left(self, loop: str, iteration: int, ctx_id: int) -> None:
        """The main loop was left inside `iteration` (break, return, an exception): like
        the last iteration it is always checkpointed, from its inner loops' end when that
        copy was taken, else from the state as it is now."""
        if not self.objects:
            return
        if self._iteration != iteration or self._pending is None:
            self._snapshot(0)
        self._write_pending(loop, iteration, ctx_id)

    def save(self, loop: str, iteration: int, ctx_id: int) -> None:
        """Checkpoint the state as it is now, at the end of `iteration`."""
        self._snapshot(0)
        self._write_pending(loop, iteration, ctx_id)

    def _decide(self, compute_s: float) -> bool:
        if self.rng_only is not None:  # whichever iteration rank 0 keeps, this rank has it
            return True
        every = self.policy.every
        if every is not None:  # a period asked for overrides the budget
            self.policy.computed(compute_s)
            return self._last or (self._iteration or 0) % every == 0
        reserve = not self._last and self._total_known
        return self.policy.should_checkpoint(compute_s, self.estimate_s(), reserve) or self._last

    def _snapshot(self, after_inner: int, frame: types.FrameType | None = None) -> None:
        loop_state.wait_for_analysis()  # once per run, not a cost of this checkpoint
        start = time.perf_counter()
        # what the iteration's inner loops ended so far left, each kept where it ended
        before = self._pending[0] if self._pending is not None else {}
        left = dict(before.get(loop_state.LEFT, {}))
        unmemoized = dict(before.get(loop_state.UNMEMOIZED, {}))
        devices: dict = {}
        loop_state.QUEUED.clear()
        if self.rng_only is not None:
            state: dict = {"objects": {}, "rng": capture_rng()}
            state.update(loop_state.capture())  # this rank's own loop-carried names
        else:
            try:
                state = state_of(self.objects, devices)
            except Exception as exc:  # noqa: BLE001 - a registered object that cannot be copied
                self._pending = None  # no checkpoint of this iteration rather than a part
                self.failed += 1
                if self.failed == 1:  # said once; the run's checkpoints show what exists
                    print(f"florwb: a checkpoint's state not copied: {exc!r}", file=sys.stderr)
                return
            state.update(loop_state.capture(self._on_written))  # the loop-carried names
        if after_inner:  # a DDP rank > 0 keeps its own: its batch, its loss
            kept, why = loop_state.capture_left(frame)
            left[str(after_inner)] = kept
            unmemoized.update(why)
        state[loop_state.LEFT] = left
        state[loop_state.UNMEMOIZED] = unmemoized
        state[AFTER_INNER] = after_inner
        for device, before in loop_state.QUEUED.items():  # the loop-carried names' copies
            devices.setdefault(device, before)
        loop_state.QUEUED.clear()
        earlier = self._pending[2] if self._pending is not None else []
        spent = self._pending[1] if self._pending is not None else 0.0
        done = [*earlier, *copies_done(devices)]  # kept names of earlier inner loops too
        self._pending = (state, spent + time.perf_counter() - start, done)

    def _write_pending(self, loop: str, iteration: int, ctx_id: int) -> None:
        pending, self._pending = self._pending, None
        self._iteration = None
        if pending is None:
            return
        state, snapshot_s, copied = pending
        folder = self.rng_only if self.rng_only is not None else self.folder
        path = checkpoint_path(folder, loop, iteration)
        start = time.perf_counter()
        self.start()
        self._queue.put((state, path, loop, iteration, ctx_id, snapshot_s, copied))
        # Waiting for a free writer slot is paid by training too; the writer adds the
        # snapshot and its own write time once the file is on disk.
        self.policy.paid(time.perf_counter() - start, checkpoints=0)
        self.last_iteration = iteration

    def start(self) -> None:
        """Start the writer early (when state is registered): its imports and torch's
        first-save set-up are not checkpoint cost the policy should count."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._write_loop, name="florwb-ckpt", daemon=True
            )
            self._thread.start()

    def _write_loop(self) -> None:
        import torch

        torch.save({"warm": torch.zeros(1)}, io.BytesIO())
        while True:
            item = self._queue.get()
            if item is None:
                self._queue.task_done()
                return
            state, path, loop, iteration, ctx_id, snapshot_s, copied = item
            tmp = temp_path(path)
            try:
                for before, after in copied:  # the GPU copies queued at the snapshot
                    after.synchronize()
                    snapshot_s += before.elapsed_time(after) / 1000  # ms: the GPU's copy time
                t0 = time.perf_counter()
                buffer = io.BytesIO()  # one write of the whole file is faster than torch's many
                torch.save(state, buffer)
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(tmp, "wb") as f:
                    f.write(buffer.getbuffer())
                    f.flush()
                    write_s = time.perf_counter() - t0
                    # Durable before the name points at it, and the rename survives a power
                    # cut. The policy does not count this wait: the thread holds no GIL and
                    # no training work while the device syncs (bench_record_overhead shows
                    # what it costs a run end to end).
                    os.fsync(f.fileno())
                os.replace(tmp, path)
                sync_folder(path.parent)
                self.policy.paid(snapshot_s + write_s)
                if self.rng_only is not None:  # not a checkpoint of the run's state
                    continue
                self._on_written(
                    Checkpoint(
                        loop=loop,
                        iteration=iteration,
                        ctx_id=ctx_id,
                        path=path.name,
                        after_inner=state.get(AFTER_INNER, 0),
                        bytes=path.stat().st_size,
                        snapshot_s=snapshot_s,
                        write_s=write_s,
                        time=time.time(),
                    ).to_dict()
                )
            except Exception as exc:  # a full disk must not kill the training run
                with contextlib.suppress(OSError):  # a read-only folder: there is no tmp
                    tmp.unlink(missing_ok=True)
                self.failed += 1
                if self.failed == 1:  # said once; the run's checkpoints show what exists
                    print(f"florwb: checkpoint {path.name} not written: {exc}", file=sys.stderr)
            finally:
                self._queue.task_done()

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None


def tensors_in(obj: Any):
    if attr_of(obj, "numel") is not None and attr_of(obj, "element_size") is not None:
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from tensors_in(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from tensors_in(v)
