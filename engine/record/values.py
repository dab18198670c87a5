"""Turning logged values into journal-safe primitives.

Primitives pass through untouched (that is the hot path). Anything else is converted at the
call, not later: a tensor or array logged now may be modified in place by the next optimizer
step, and the journal must hold the value as it was when logged. Non-scalar values become
JSON text, marked by wrapping them in a 2-tuple so a plain string that happens to look like
JSON stays a string.

A one-element tensor on a GPU is the exception to "converted at the call": `.item()` would
make the training thread wait for every kernel queued before it, once per logged value. Its
value is copied at the call instead, by one device-side copy into a slot of a ring of device
memory (`Ring`, one per dtype and stream), queued on the current stream (so later in-place
ops, queued after the copy, cannot change it). The flusher brings the slots of a batch to
pinned host memory in one copy and waits on one event per ring (`read_staged`) before it
packs the values: the same numbers `.item()` would give, and no host sync, host allocation
or event per value on the training thread.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import threading
from collections.abc import Callable
from typing import Any

PRIMITIVES = frozenset({int, float, str, bool, type(None)})
MAX_ELEMENTS = 10_000


class Replacements:
    """Values and names that could not be kept as they were, counted by reason.

    Only the slow paths (a value that is not a primitive, a name that is not a string) count
    here, so the lock costs the hot path nothing. The flusher turns new counts into an
    `issues` event of the run and says the first one once on stderr.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[tuple[str, str], int] = {}  # (kind, detail) -> n
        self.reported: dict[tuple[str, str], int] = {}

    def add(self, kind: str, detail: str, n: int = 1) -> None:
        with self._lock:
            self.counts[(kind, detail)] = self.counts.get((kind, detail), 0) + n

    def take_new(self) -> list[list]:
        """[kind, detail, n] of what was counted since the last call."""
        with self._lock:
            new = [
                [kind, detail, n - self.reported.get((kind, detail), 0)]
                for (kind, detail), n in self.counts.items()
                if n != self.reported.get((kind, detail), 0)
            ]
            self.reported = dict(self.counts)
        return new

    def clear(self) -> None:
        with self._lock:
            self.counts.clear()
            self.reported.clear()


REPLACED = Replacements()


def _is_cuda(value: Any) -> bool:
    return attr_of(value, "is_cuda") is True


def _event_on(device: Any, timing: bool = False) -> Any:
    """An event recorded on `device`'s current stream: done once what was queued is
    (`timing`: one whose `elapsed_time` to a later one says how long the GPU took)."""
    import torch

    event = torch.cuda.Event(enable_timing=timing)
    event.record(torch.cuda.current_stream(device))
    return event


def _stream_key(value: Any) -> Any:
    """Which queue a copy from `value` joins: its GPU and that GPU's current stream (a cheap
    C call, made per value), or its device alone where it has no streams."""
    if value.is_cuda:
        index = value.get_device()
        torch = sys.modules["torch"]
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # torch >= 1.13
        return index, raw(index) if raw else torch.cuda.current_stream(index).cuda_stream
    return str(value.device), None


def _current_stream(value: Any) -> Any:
    if value.is_cuda:
        import torch

        return torch.cuda.current_stream(value.device)
    return None


def _on_stream(stream: Any) -> Any:
    """Work queued inside goes to `stream` (a no-op for a device without streams)."""
    if stream is None:
        return contextlib.nullcontext()
    import torch

    return torch.cuda.stream(stream)


class Device:
    """How a tensor is recognised as living on a GPU (whose reads would synchronise the
    host), how the end of the copies queued from one is marked, and on which stream they
    are queued. Replaceable so the same paths run with a stand-in device on a machine
    without one (tests/test_device_path.py)."""

    is_device: Callable[[Any], bool] = staticmethod(_is_cuda)
    event_on: Callable[..., Any] = staticmethod(_event_on)
    stream_key: Callable[[Any], Any] = staticmethod(_stream_key)
    current_stream: Callable[[Any], Any] = staticmethod(_current_stream)
    on_stream: Callable[[Any], Any] = staticmethod(_on_stream)
    seen = False  # a value was staged in this process: the flusher looks for them from now


def _stageable(value: Any) -> bool:
    """A one-element strided tensor on a GPU whose `.item()` is a Python number."""
    if not Device.is_device(value):
        return False
    torch = sys.modules.get("torch")
    return (
        torch is not None
        and value.layout is torch.strided
        and not value.is_complex()
        and value.numel() == 1
    )


class Ring:
    """Device memory that one-element tensors of one (device, dtype, stream) are copied
    into at `flor.log`, one slot each, and that the flusher brings to the host in one copy
    with one event per batch.

    The copy into a slot is a device-side copy queued on the stream the value was logged
    on: an in-place change queued after the call cannot reach it, and the training thread
    neither allocates host memory nor creates an event per value. `head` counts the slots
    handed out, `tail` the ones read; a ring whose free slots run out (a flusher that fell
    behind) is replaced by one twice its size, and the old one is still read through the
    values that point into it."""

    __slots__ = (
        "buf", "slots", "size", "head", "tail", "stream", "device", "lock", "reading", "host"
    )  # fmt: skip

    def __init__(self, like: Any, size: int, stream: Any) -> None:
        import torch

        self.buf = torch.empty(size, dtype=like.dtype, device=like.device)
        self.slots = self.buf.unbind(0)  # views made once: the call only copies into one
        self.size = size
        self.head = 0
        self.tail = 0
        self.stream = stream
        self.device = like.device
        self.lock = threading.Lock()
        self.reading = threading.Lock()  # one reader at a time uses `host`
        self.host: Any = None  # pinned, made by the flusher when it first reads

    def take(self, value: Any) -> int:
        """Copy `value` into the next free slot; its sequence number (-1 when full)."""
        with self.lock:
            seq = self.head
            if seq - self.tail >= self.size:
                return -1
            self.head = seq + 1
            self.slots[seq % self.size].copy_(value)
        return seq

    def read(self, seqs: list[int]) -> list[Any]:
        """The values of slots `seqs` (flusher only: waits for the one copy it queues). A
        slot written again before the copy was queued (more than `size` values behind)
        comes back as `_OVERWRITTEN`."""
        with self.reading:
            return self._read(seqs)

    def _read(self, seqs: list[int]) -> list[Any]:
        import torch

        if self.host is None:
            pin = bool(getattr(self.buf, "is_cuda", False))
            self.host = torch.empty(self.size, dtype=self.buf.dtype, pin_memory=pin)
        lo, hi = min(seqs), max(seqs)
        start, stop = lo % self.size, hi % self.size + 1
        if stop <= start or hi - lo >= self.size:  # the range wraps: the whole ring
            start, stop = 0, self.size
        with Device.on_stream(self.stream):
            self.host[start:stop].copy_(self.buf[start:stop], non_blocking=True)
            written = self.head  # every slot write queued before the copy is below this
            ready = Device.event_on(self.device)
        if not ready.query():
            ready.synchronize()
        self.tail = max(self.tail, hi + 1)
        out = self.host[start:stop].tolist()
        return [
            out[seq % self.size - start] if seq + self.size >= written else _OVERWRITTEN
            for seq in seqs
        ]


_OVERWRITTEN = object()
PENDING = object()  # a Staged value not read yet


class Staged:
    """A device scalar on its way to the host: the ring slot it was copied into. The
    flusher reads it (`read_staged`); nothing on the training thread waits for it.
    `value` is what was read, once it was (PENDING before): the echo shows only those."""

    __slots__ = ("ring", "seq", "dtype", "value")

    def __init__(self, ring: Ring, seq: int, dtype: Any) -> None:
        self.ring = ring
        self.seq = seq
        self.dtype = dtype
        self.value: Any = PENDING

    def read(self) -> Any:
        """The value `.item()` gives (waits for the copy: flusher and commit only)."""
        return _read_ring(self.ring, [self])[0]


def _read_ring(ring: Ring, staged: list[Staged]) -> list[Any]:
    """The values of `staged` (all in `ring`) as `.item()` gives them. A copy the device
    never finished (a device-side assert, a lost GPU) is kept as text saying so, and
    counted: the values of the other rings are still stored."""
    kind = f"Tensor({staged[0].dtype}) from a device"
    try:
        values = ring.read([s.seq for s in staged])
    except Exception as exc:  # noqa: BLE001 - a failed device: say it, lose nothing else
        why = (f"{type(exc).__name__}: {exc}".splitlines() or [""])[0][:200]
        REPLACED.add("replaced", f"{kind} kept as text ({type(exc).__name__})", len(staged))
        values = [("object", f"{kind}: not read ({why})")] * len(staged)
        for one in staged:
            one.value = values[0]
        return values
    lost = values.count(_OVERWRITTEN)
    if lost:
        REPLACED.add("lost", f"{kind}: its slot was reused before it was read", lost)
        text = ("object", f"{kind}: not read (slot reused)")
        values = [text if v is _OVERWRITTEN else v for v in values]
    for one, value in zip(staged, values, strict=True):
        one.value = value
    return values


RING_SLOTS = 4096  # a ring's first size; one that fills is replaced by one twice as big
MAX_RING_SLOTS = 1 << 20
_RINGS: dict[Any, Ring] = {}  # (dtype, stream key) -> the ring values are copied into now


def stage(value: Any) -> Staged:
    """Copy a one-element device tensor into a ring slot on its device, without waiting."""
    scalar = value.detach() if value.requires_grad else value  # the copy joins no graph
    if scalar.dim():
        scalar = scalar.reshape(())
    key = (scalar.dtype, Device.stream_key(scalar))
    ring = _RINGS.get(key)
    seq = -1 if ring is None else ring.take(scalar)
    if ring is None or seq < 0:  # the first value of its kind, or the flusher fell behind
        size = RING_SLOTS if ring is None else min(2 * ring.size, MAX_RING_SLOTS)
        ring = _RINGS[key] = Ring(scalar, size, Device.current_stream(scalar))
        seq = ring.take(scalar)  # a fresh ring has room (its only writer is this call)
    Device.seen = True
    return Staged(ring, seq, scalar.dtype)


def read_staged(buffer: list, start: int, stop: int, step: int) -> int:
    """Replace the Staged values among `buffer[start:stop:step]` by what they hold (the
    flusher, before packing): one copy to the host and one wait per ring. How many there
    were. The training thread only appends to `buffer`, so the items before `stop` stay
    where they are meanwhile."""
    if not Device.seen:
        return 0
    values = buffer[start:stop:step]
    if Staged not in map(type, values):  # one C pass where a batch holds none
        return 0
    by_ring: dict[Ring, list[int]] = {}
    for i, value in enumerate(values):
        if type(value) is Staged:
            by_ring.setdefault(value.ring, []).append(i)
    for ring, where in by_ring.items():
        read = _read_ring(ring, [values[i] for i in where])
        for i, item in zip(where, read, strict=True):
            buffer[start + i * step] = item
    return sum(map(len, by_ring.values()))


def encode(value: Any, *, defer: bool = False) -> Any:
    """A journal-safe form of `value`; never raises (training must not fail on a log).
    With `defer` (flor.log), a one-element device tensor becomes a Staged copy instead of
    a number: the caller's buffer must be passed through `read_staged` before it is packed."""
    if type(value) in PRIMITIVES:
        return value
    try:
        if defer and _stageable(value):
            try:
                return stage(value)
            except Exception:  # noqa: BLE001 - no ring (out of device memory): .item() below
                pass
        if type(value) is Staged:  # one a caller did not read first
            return value.read()
        scalar = _as_scalar(value)
        if scalar is not _NO:
            return scalar
        if isinstance(value, (str, int, float)):  # subclasses of primitives (enums, np.float64)
            for base in (bool, int, float, str):
                if isinstance(value, base):
                    return base(value)
        return ("json", json.dumps(_jsonable(value), allow_nan=True))
    except (TypeError, ValueError, RecursionError):  # not JSON: its repr, counted
        why = "kept as text"
    except Exception as exc:  # a tensor without data (sparse, meta), a failing __float__...
        why = f"kept as text ({type(exc).__name__})"
    REPLACED.add("replaced", f"{_type_name(value)} {why}")
    text = _short_repr(value)
    kind = type(value).__name__
    return ("object", text if text.startswith(kind.lower()) else f"{kind}: {text}")


def name_text(name: Any) -> str | None:
    """A log or loop name as a string: str() of a non-string, None if even that fails."""
    if type(name) is str:
        return name
    try:
        text = str(name)
    except Exception:  # a __str__ that raises: the caller drops the call and counts it
        REPLACED.add("dropped", f"name of type {_type_name(name)} whose str() fails")
        return None
    REPLACED.add("replaced", f"name of type {_type_name(name)} stored as its str()")
    return text


def attr_of(value: Any, name: str) -> Any:
    """`value.name`, or None when it is missing or asking for it fails in any way.

    `getattr(value, name, None)` only absorbs AttributeError; a lazy proxy, a remote handle
    or a config object may raise anything from `__getattr__` (KeyError, RuntimeError, a
    network error), and a probe of a user's object must never stop training."""
    try:
        return getattr(value, name, None)
    except Exception:  # noqa: BLE001 - whatever the user's __getattr__ raises
        return None


def _type_name(value: Any) -> str:
    kind = type(value)
    name = getattr(kind, "__qualname__", None) or "object"
    if name == "Tensor":  # what made it unstorable: sparse layout, meta device, complex dtype
        probes = (attr_of(value, "layout"), attr_of(value, "device"), attr_of(value, "dtype"))
        extra = [str(x) for x in probes if x is not None]
        return f"Tensor({', '.join(extra)})"
    return str(name)


_NO = object()


def _as_scalar(value: Any) -> Any:
    """One-element tensors and numpy scalars become Python numbers (not complex ones)."""
    numel = attr_of(value, "numel")  # torch.Tensor
    if numel is not None and callable(numel):
        if numel() == 1:
            item = value.item()
            return item if type(item) in PRIMITIVES else _NO
        return _NO
    size = attr_of(value, "size")  # numpy scalar / ndarray
    if (
        isinstance(size, int)
        and size == 1
        and attr_of(value, "item") is not None
        and attr_of(value, "dtype") is not None
    ):
        try:
            item = value.item()
        except (TypeError, ValueError):
            return _NO
        return item if type(item) in PRIMITIVES else _NO
    return _NO


def _jsonable(value: Any) -> Any:
    if type(value) in PRIMITIVES:
        if isinstance(value, float) and not math.isfinite(value):
            return repr(value)
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    scalar = _as_scalar(value)
    if scalar is not _NO:
        return _jsonable(scalar)
    tolist = attr_of(value, "tolist")
    if callable(tolist):
        count = _element_count(value)
        if count is not None and count <= MAX_ELEMENTS:
            return _jsonable(tolist())
        shape = tuple(attr_of(value, "shape") or ())
        return f"<{type(value).__name__} shape={shape} dtype={attr_of(value, 'dtype') or '?'}>"
    raise TypeError(type(value).__name__)


def _element_count(value: Any) -> int | None:
    numel = attr_of(value, "numel")
    if callable(numel):
        return int(numel())
    size = attr_of(value, "size")
    return size if isinstance(size, int) else None


def _short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not break the training script
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 1000 else text[:997] + "..."
