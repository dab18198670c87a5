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

from conftest import git, run_py, write

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
    assert "florwb: step" not in proc.stderr  # ...and out of its line (never done here)
    expected = report["expected"]
    logged = _logged(project)
    assert logged == expected
    assert type(logged["bool"]) is bool and type(logged["i64"]) is int
    assert logged["bf16"] != 0.1 and logged["fp16"] != 1 / 3  # the dtype's own value
    waits = report["waits"]
    # each value was waited for once: by the flusher, or at commit by a run that ended
    # before the flusher's next pass (a fast machine)
    read = [w for w in waits if w[1] in ("florwb-flush", "MainThread")]
    assert len(read) == len(expected) - 3 + 9
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


class _FailedDevice:
    """A copy's event on a device that failed (a device-side assert, a lost GPU)."""

    def query(self) -> bool:
        return False

    def synchronize(self) -> None:
        raise RuntimeError("CUDA error: device-side assert triggered\nmore lines")


def test_a_value_whose_device_failed_is_kept_as_text_and_the_others_are_read():
    import torch

    REPLACED.clear()
    buffer = [
        "a", Staged(torch.tensor(1.5), _Done()), 0,
        "b", Staged(torch.tensor(2.0), _FailedDevice()), 0,
        "c", 7, 0,
    ]  # fmt: skip
    before = Device.seen
    Device.seen = True
    try:
        assert read_staged(buffer, 1, len(buffer), 3) == 2
    finally:
        Device.seen = before
    assert buffer[1] == 1.5 and buffer[7] == 7
    kind, text = buffer[4]
    assert kind == "object" and "not read (RuntimeError: CUDA error: device-side assert" in text
    assert REPLACED.take_new() == [
        ["replaced", "Tensor(torch.strided, cpu, torch.float32) from a device kept as text "
         "(RuntimeError)", 1]
    ]  # fmt: skip


class _Done:
    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        raise AssertionError("a finished copy is not waited for")


def test_a_cpu_tensor_is_still_read_at_the_call():
    import torch

    assert encode(torch.tensor([0.25]), defer=True) == 0.25  # a number at once
    assert encode(torch.tensor(True), defer=True) is True
