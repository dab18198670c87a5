"""The GPU path of recording, run on a machine without one: a stand-in device tensor.

`flor.log` of a one-element GPU tensor must not make the training thread wait for the
device (`.item()` would, once per value), and a checkpoint's GPU tensors are copied without
waiting and written once their copies are done. Here the stand-in is a torch.Tensor subclass
that florwb is told lives on a device (values.Device.is_device) and that counts, per thread,
every call that would synchronise a real GPU (`.item()`, `.cpu()`, `.tolist()`, a blocking
`.to()`, `float()`...); its "copy done" events count where they are waited on. A real
training process records with it; the test asserts no synchronising call on the training
thread, every wait on the flusher or checkpoint writer, and the stored values exactly what
`.item()` gives, also for values changed in place after the call and for a run that dies
right after logging. benchmarks/gpu_check.py runs the same paths on a real GPU.
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import git, run_py, write

from florwb_engine.record import values
from florwb_engine.record.checkpoint import load
from florwb_engine.record.values import REPLACED, Device, Staged, encode, read_staged
from florwb_engine.store import Store
from florwb_engine.store.values import decode_value

STANDIN = '''
import json
import sys
import threading

import torch

import florwb as flor
from florwb_engine.record import values

TRAINING = threading.get_ident()
SYNCS = []  # calls that would wait for a real device, made on the training thread
WAITS = []  # (event kind, thread name) of every wait on a copy's end
SYNCING = {
    "item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__",
    "__repr__", "__format__", "__str__", "__array__", "synchronize",
}


class OnDevice(torch.Tensor):
    """Data in host memory, treated by florwb as a GPU tensor; counts what would sync."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        blocking_to = name == "to" and not kwargs.get("non_blocking")
        if threading.get_ident() == TRAINING and (name in SYNCING or blocking_to):
            SYNCS.append(name)
        if name == "to" and "cpu" in (*args[1:], kwargs.get("device")):
            with torch._C.DisableTorchFunctionSubclass():  # a host copy: a plain tensor
                return func(*args, **kwargs)
        return super().__torch_function__(func, types, args, kwargs)


class CopyDone:
    """Stands in for a CUDA event: never done when asked, so the reader must wait; a
    device that takes 250 ms between two of them."""

    def __init__(self, kind):
        self.kind = kind

    def query(self):
        return False

    def synchronize(self):
        if threading.get_ident() == TRAINING:
            SYNCS.append("event.synchronize")
        WAITS.append([self.kind, threading.current_thread().name])

    def elapsed_time(self, other):
        if threading.get_ident() == TRAINING:
            SYNCS.append("event.elapsed_time")
        return 250.0


values.Device.is_device = lambda value: isinstance(value, OnDevice)
values.Device.event_on = lambda device, timing=False: CopyDone("copy")


def dev(tensor):
    return tensor.as_subclass(OnDevice)


SCALARS = {
    "bf16": torch.tensor(0.1, dtype=torch.bfloat16),
    "fp16": torch.tensor([1 / 3], dtype=torch.float16),
    "f32": torch.tensor(0.1),
    "f64_2d": torch.tensor([[0.1]], dtype=torch.float64),
    "i64": torch.tensor(2**40 + 1),
    "i32": torch.tensor([-7], dtype=torch.int32),
    "u8": torch.tensor(255, dtype=torch.uint8),
    "bool": torch.tensor(True),
}
expected = {name: t.item() for name, t in SCALARS.items()}  # plain tensors: no counting


class Model:
    """A registered object whose state lives on the stand-in device."""

    def __init__(self):
        self.w = dev(torch.zeros(4))

    def state_dict(self):
        return {"w": self.w}

    def load_state_dict(self, state):
        self.w.copy_(state["w"])


model = Model()
x = dev(torch.tensor([1.5])).requires_grad_()
acc = dev(torch.zeros(()))
for name, t in SCALARS.items():
    flor.log(name, dev(t))
with flor.checkpointing(model=model, every=1):
    for step in flor.loop("step", range(3)):
        loss = (x * x * (step + 1)).sum()  # a non-leaf that requires grad
        flor.log("loss", loss)
        flor.log("x", x)  # a leaf that requires grad
        acc.add_(1)
        flor.log("acc", acc)
        acc.add_(100)  # in place after the call: the logged value is the one before
        model.w.add_(1)
expected.update(
    {"loss": [2.25, 4.5, 6.75], "x": [1.5] * 3, "acc": [1.0, 102.0, 203.0]}
)
if sys.argv[1:] == ["die"]:
    flor.log("last", dev(torch.tensor(42.5)))
    print(json.dumps({"syncs": SYNCS, "expected": expected}), flush=True)
    raise RuntimeError("the run dies right after logging")
in_loop = list(SYNCS)  # commit may wait for the copies the flusher has not read yet
flor.commit()
print(json.dumps({"syncs": in_loop, "waits": WAITS, "expected": expected}), flush=True)
'''


def _logged(project) -> dict:
    rows = Store(project).query("SELECT name, value, text, vtype FROM logs ORDER BY seq")
    out: dict = {}
    for name, value, text, vtype in rows.itertuples(index=False):
        out.setdefault(name, []).append(decode_value(value, text, vtype))
    return {k: v[0] if len(v) == 1 else v for k, v in out.items()}


def _project(tmp_path):
    project = tmp_path / "p"
    write(project / "train.py", STANDIN)
    git(project, "init", "-q")
    git(project, "add", "-A")
    git(project, "commit", "-qm", "init")
    return project


def test_logging_a_device_scalar_never_waits_on_the_training_thread(tmp_path):
    project = _project(tmp_path)
    proc = run_py(project, "train.py", env={"FLORWB_ECHO": "0.000001"})
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["syncs"] == []  # the echo too leaves a copy under way alone
    expected = report["expected"]
    # the echo shows only values the flusher has read, and shows them right
    for line in proc.stderr.splitlines():
        if line.startswith("florwb: step"):
            for pair in line.split(" · ")[1:]:
                name, shown = pair.split(" ")
                want = expected[name] if isinstance(expected[name], list) else [expected[name]]
                assert shown in [f"{v:.4g}" if type(v) is float else str(v) for v in want]
    logged = _logged(project)
    assert logged == expected
    assert type(logged["bool"]) is bool and type(logged["i64"]) is int
    assert logged["bf16"] != 0.1 and logged["fp16"] != 1 / 3  # the dtype's own value
    waits = report["waits"]
    # the values' copies were waited for by the flusher, or at commit by a run that ended
    # before the flusher's next pass, one wait per batch and kind of value, not per value
    read = [w for w in waits if w[0] == "copy" and w[1] in ("florwb-flush", "MainThread")]
    assert 1 <= len(read) < len(expected) - 3 + 9
    assert len(read) == len([w for w in waits if w[0] == "copy"]) - 3  # + the checkpoints
    # each of the 3 checkpoints' copies was waited for by the writer, before it wrote
    assert [w for w in waits if w[1] == "florwb-ckpt"] == [["copy", "florwb-ckpt"]] * 3
    # and holds the state as it was when copied, not as training changed it after
    saved = sorted((project / ".florwb" / "checkpoints").glob("*/*.pt"))
    weights = [load(path)["objects"]["model"]["w"].tolist() for path in saved]
    assert weights == [[1.0] * 4, [2.0] * 4, [3.0] * 4]
    # the device's copy time is the checkpoint's cost too: it holds up the training stream
    costs = Store(project).query("SELECT snapshot_s FROM checkpoints").snapshot_s.tolist()
    assert len(costs) == 3 and all(0.25 <= cost < 1.25 for cost in costs)


def test_device_scalars_logged_before_a_crash_are_read_and_kept(tmp_path):
    project = _project(tmp_path)
    proc = run_py(project, "train.py", "die", check=False)
    assert proc.returncode != 0 and "the run dies right after logging" in proc.stderr
    report = json.loads(proc.stdout.splitlines()[-1])
    assert report["syncs"] == []
    logged = _logged(project)
    assert logged["last"] == 42.5
    assert {k: logged[k] for k in report["expected"]} == report["expected"]
    assert Store(project).runs()[0]["status"] == "failed"


class _Copy:
    """A copy's end on a stand-in device: done when asked, or failed (a device-side
    assert, a lost GPU)."""

    def __init__(self, failed: bool) -> None:
        self.failed = failed
        self.waited = 0

    def query(self) -> bool:
        return False

    def synchronize(self) -> None:
        self.waited += 1
        if self.failed:
            raise RuntimeError("CUDA error: device-side assert triggered\nmore lines")


class _StandIn(torch.Tensor):
    pass


@pytest.fixture
def stand_in(monkeypatch):
    """values.Device told that _StandIn tensors live on a device; its events are _Copy's
    (failing ones while `failing` holds True)."""
    events: list[_Copy] = []
    failing = [False]

    def event_on(device, timing=False):
        events.append(_Copy(failing[0]))
        return events[-1]

    monkeypatch.setattr(Device, "is_device", lambda v: isinstance(v, _StandIn))
    monkeypatch.setattr(Device, "event_on", event_on)
    monkeypatch.setattr(Device, "seen", True)
    monkeypatch.setattr(values, "_RINGS", {})
    REPLACED.clear()
    return events, failing


def _dev(tensor):
    return tensor.as_subclass(_StandIn)


def test_a_batch_of_device_scalars_is_read_with_one_copy_per_kind(stand_in):
    events, _ = stand_in
    logged = [
        torch.tensor(0.1, dtype=torch.bfloat16), torch.tensor([[2.5]], dtype=torch.float64),
        torch.tensor(0.1), torch.tensor([-7], dtype=torch.int32), torch.tensor(True),
        torch.tensor(0.2, requires_grad=True) * 2, torch.tensor(2**40 + 1),
    ]  # fmt: skip
    buffer: list = []
    for i, t in enumerate(logged):
        buffer += [f"v{i}", encode(_dev(t), defer=True), 0]
    kept = _dev(torch.tensor(1.0))
    buffer += ["inplace", encode(kept, defer=True), 0]
    kept.add_(5)  # after the call: the logged value is the one before
    assert all(type(v) is Staged for v in buffer[1::3])
    assert read_staged(buffer, 1, len(buffer), 3) == len(logged) + 1
    assert buffer[1::3] == [t.item() for t in logged] + [1.0]
    assert [type(v) for v in buffer[1::3]] == [float] * 3 + [int, bool, float, int, float]
    assert len(events) == 6  # one copy and one wait per dtype, not per value
    assert all(e.waited == 1 for e in events)


def test_a_full_ring_grows_and_a_reused_slot_is_named_not_misread(stand_in, monkeypatch):
    monkeypatch.setattr(values, "RING_SLOTS", 4)
    staged = [encode(_dev(torch.tensor(float(i))), defer=True) for i in range(10)]
    assert [s.ring.size for s in staged] == [4] * 4 + [8] * 6  # nothing read: it grew
    buffer = [x for s in staged for x in ("v", s, 0)]
    assert read_staged(buffer, 1, len(buffer), 3) == 10
    assert buffer[1::3] == [float(i) for i in range(10)]
    ring = staged[-1].ring
    late = staged[-1]
    for _ in range(ring.size):  # read as they come: the slot of `late` is written again
        read_staged(["v", encode(_dev(torch.tensor(-1.0)), defer=True), 0], 1, 3, 3)
    assert late.read() == ("object", "Tensor(torch.float32) from a device: not read (slot reused)")
    assert REPLACED.take_new() == [
        ["lost", "Tensor(torch.float32) from a device: its slot was reused before it was read", 1]
    ]


def test_values_whose_device_failed_are_kept_as_text_and_the_others_are_read(stand_in):
    events, failing = stand_in
    ok = encode(_dev(torch.tensor(1.5)), defer=True)
    bad = encode(_dev(torch.tensor(2, dtype=torch.int64)), defer=True)
    buffer = ["a", ok, 0, "b", bad, 0, "c", 7, 0]
    read_staged(buffer, 1, 4, 3)  # the float ring: read fine
    failing[0] = True
    assert read_staged(buffer, 1, len(buffer), 3) == 1
    assert buffer[1] == 1.5 and buffer[7] == 7
    kind, text = buffer[4]
    assert kind == "object" and "not read (RuntimeError: CUDA error: device-side assert" in text
    assert REPLACED.take_new() == [
        ["replaced", "Tensor(torch.int64) from a device kept as text (RuntimeError)", 1]
    ]


def test_a_cpu_tensor_is_still_read_at_the_call():
    assert encode(torch.tensor([0.25]), defer=True) == 0.25  # a number at once
    assert encode(torch.tensor(True), defer=True) is True


def test_a_value_that_cannot_be_staged_is_read_at_the_call_instead(stand_in, monkeypatch):
    def no_ring(value):
        raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(Device, "stream_key", no_ring)
    assert encode(_dev(torch.tensor([2.5], dtype=torch.float64)), defer=True) == 2.5
    assert REPLACED.take_new() == []  # the value itself is kept exactly
