"""Loop-carried names kept with each checkpoint and put back at a replay segment's start.

The names come from the static analysis (florwb_engine.analysis.loop_state) of the file
that runs the main loop, done once per run in a process of its own started when the main
loop starts (importing libcst and parsing take most of a second of CPU: on a thread they
would compete with training for the GIL and inflate the checkpoint costs the policy
measures) and waited for at the first checkpoint; the answer is kept in the user's cache
folder (`~/.cache/florwb/loop-state/`, by the file's bytes, the loop and the analysis's own
code), so later runs of the same script do not analyse it again. Values are read from the
frame that runs the main loop — remembered when it starts, so a checkpoint taken from an
inner loop in a helper function still reads the main loop's names — and stored in a form
`torch.load(weights_only=True)` accepts: tensors by value, plain values (numbers, strings,
lists, tuples, dicts of them) copied, numpy arrays as tensors with their dtype. What cannot
be kept that way (too big, a generator, an open file, any other object) is listed under
`uncarried` with the reason, and said once in the run's journal: replay planning then
re-executes that run from its start instead of restoring part of its state.

The same analysis names what each inner flor.loop assigns: where such a loop ends in an
iteration being checkpointed, those values are kept too (`left`, read from the frame that
ran the loop, a helper function's included; `unmemoized` says what could not be kept), and
a replay that skips the loop puts them back into the frame skipping it (FLOR's SkipBlock
side-effect memoization): an epoch summary reading `running_loss` after the step loop
needs no step re-run. All assigned names are kept, not only those the recorded code reads
after the loop: a statement added later may read any of them.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

from florwb_engine import settings
from florwb_engine.journal_events import Issues
from florwb_engine.record.values import Device, attr_of

CARRIED = "carried"  # checkpoint key: {name: encoded value}
UNCARRIED = "uncarried"  # checkpoint key: {name: why it is not in `carried`}
GENERATORS = "generators"  # checkpoint key: {"loader.generator": a torch.Generator's state}
# checkpoint key: {"k": {name: encoded value}}, the names the k-th inner loop of the
# iteration (1-based, the order they ended) leaves for the code after it, read where it ended
LEFT = "left"
UNMEMOIZED = "unmemoized"  # checkpoint key: {name: why it is not in `left`}


def _max_bytes() -> int:
    """The bound on one checkpoint's carried values (`FLORWB_CARRIED_MAX_BYTES`); a value
    that is not a number is said once and the default used: training goes on."""
    return settings.read(settings.CARRIED_MAX_BYTES)


MAX_BYTES = _max_bytes()
_MARK = "__florwb__"  # the key of an encoded value (a tensor's device, a numpy array)
_PRIMITIVES = (int, float, bool, str, bytes, type(None))
ANALYSIS = "*"  # the `uncarried` entry when the loop's code could not be analysed
ANALYSIS_TIMEOUT_S = 120
# The analysis runs at the lowest CPU priority: on a busy machine training keeps its cores,
# and the checkpoint costs the policy measures are not inflated by the analysis.
_ANALYSE = (
    "import os, sys; os.nice(19); "
    "from florwb_engine.analysis.loop_state import main; sys.exit(main(sys.argv[1:]))"
)


class Unsaveable(Exception):
    """A value that cannot be kept in a weights-only checkpoint; the message says why."""


class _Keeper:
    """The main loop's frame and the analysis of its code, for one process."""

    def __init__(self) -> None:
        self.frame: types.FrameType | None = None
        self.names: tuple[str, ...] = ()
        # (first line, last line of an inner loop's `for` header, the names it leaves)
        self.leaves: tuple[tuple[int, int, tuple[str, ...]], ...] = ()
        self.path = ""  # the file the analysis read
        self.failed: str | None = None  # why the analysis gave no answer
        self.started = False
        self._process: subprocess.Popen | None = None
        self._where = ""
        self._cache: Path | None = None
        self.reported: set[str] = set()

    def start(self, frame: types.FrameType, loop_name: str, analyse: bool) -> None:
        self.frame = frame
        if not analyse or self.started:
            return
        self.started = True
        path = self.path = frame.f_code.co_filename
        self._where = f"{Path(path).name}:{frame.f_lineno} (loop {loop_name!r})"
        self._cache = _cache_file(path, loop_name, frame.f_lineno)
        if self._cache is not None and self._cache.is_file():
            return  # this code was analysed before: wait() reads the answer
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-c", _ANALYSE, path, loop_name, str(frame.f_lineno)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        except OSError as exc:
            self.failed = f"the loop's code could not be analysed ({exc})"

    def wait(self) -> None:
        process, self._process = self._process, None
        cache, self._cache = self._cache, None
        if process is None:
            if cache is None:
                return
            try:
                out, err, returncode = cache.read_text(), "", 0
            except OSError as exc:  # gone since start(): no answer, said like any failure
                out, err, returncode = "", f"the cached analysis is unreadable: {exc}", 1
        else:
            try:
                out, err = process.communicate(timeout=ANALYSIS_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
                self.failed = f"the analysis of the loop's code took over {ANALYSIS_TIMEOUT_S} s"
                return
            returncode = process.returncode
            if returncode == 0 and cache is not None:
                _keep_analysis(cache, out)
        try:
            found = json.loads(out) if returncode == 0 else None
        except ValueError:
            found = None
        if found is None:
            last = (err.strip().splitlines() or ["no output"])[-1]
            self.failed = f"the loop's code could not be analysed ({last[:200]})"
        elif not found["found"]:
            self.failed = f"no `for` loop at {self._where}"
        else:
            self.names = tuple(found["carried"])
            self.leaves = tuple(
                (int(first), int(last), tuple(names))
                for first, last, names in found.get("leaves", ())
            )


def _cache_file(path: str, loop_name: str, line: int) -> Path | None:
    """Where the analysis of this code (the file's bytes, the loop, the analysis's own
    code) is kept: every later run of the same script reuses it instead of paying the
    analysis's second of CPU again. None where the file cannot be read."""
    try:
        source = Path(path).read_bytes()
    except OSError:
        return None
    digest = hashlib.sha256(source)
    digest.update(f"\0{loop_name}\0{line}\0".encode())
    digest.update(_analysis_code_digest())
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "florwb" / "loop-state" / f"{digest.hexdigest()}.json"


@functools.cache
def _analysis_code_digest() -> bytes:
    """The analysis's own code: a florwb that analyses differently never reads an answer
    an older one kept."""
    engine = Path(__file__).resolve().parent.parent  # found, not imported: libcst is heavy
    digest = hashlib.sha256()
    for file in sorted((engine / "analysis").glob("*.py")):
        digest.update(file.read_bytes())
    digest.update((engine / "flor_calls.py").read_bytes())
    return digest.digest()


def _keep_analysis(cache: Path, answer: str) -> None:
    """Keep an analysis for later runs. Only time is lost when this fails (a read-only or
    full home): the next run analyses again."""
    tmp = cache.with_name(f"{cache.name}.{os.getpid()}.tmp")
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(answer)
        os.replace(tmp, cache)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


_KEEPER = _Keeper()


def _forget_in_child() -> None:
    global _KEEPER
    _KEEPER = _Keeper()


os.register_at_fork(after_in_child=_forget_in_child)


def main_loop_started(frame: types.FrameType, loop_name: str, *, analyse: bool) -> None:
    """Remember the frame that runs the main loop; while recording, analyse its code."""
    _KEEPER.start(frame, loop_name, analyse)


def main_loop_ended() -> None:
    _KEEPER.frame = None  # the frame's locals may be large: do not keep them alive


def wait_for_analysis() -> None:
    """Wait for the analysis of the loop's code (started with the main loop)."""
    _KEEPER.wait()


def capture(on_event: Any = None) -> dict:
    """{"carried": {name: value}, "uncarried": {name: why}} for a checkpoint being taken.
    `on_event` receives the journal event that names what could not be kept (once per name)."""
    keeper = _KEEPER
    keeper.wait()
    frame = keeper.frame
    carried: dict[str, Any] = {}
    uncarried: dict[str, str] = {}
    if keeper.failed is not None:
        uncarried[ANALYSIS] = keeper.failed
    elif not keeper.started:
        uncarried[ANALYSIS] = "the main loop's code was not analysed"
    elif frame is None:
        if keeper.names:
            uncarried[ANALYSIS] = "taken after the main loop's frame was gone"
    elif keeper.names:
        _keep(frame, keeper.names, carried, uncarried, MAX_BYTES)
    new = sorted(set(uncarried) - keeper.reported)
    if new and on_event is not None:
        keeper.reported.update(new)
        on_event(
            Issues([["loop state not saved", f"{n} ({uncarried[n]})", 1] for n in new]).to_dict()
        )
    found = {CARRIED: carried, UNCARRIED: uncarried}
    if frame is not None:
        found[GENERATORS] = {path: g.get_state() for path, g in _generators(frame).items()}
    return found


def _keep(
    frame: types.FrameType,
    names: tuple[str, ...],
    kept: dict[str, Any],
    why: dict[str, str],
    budget: int,
) -> int:
    """Encode `names` as `frame` has them into `kept` ({name: why} in `why` for those that
    cannot be kept within `budget` bytes); the budget left. An unbound name is left out."""
    local = frame.f_locals
    own = _local_names(frame)
    for name in names:
        scope = local if name in own else frame.f_globals
        if name not in scope:
            continue  # unbound here: unbound at the segment's start too
        size = _tensor_bytes(scope[name])
        if size > budget:  # said before copying: a step's logits may be gigabytes
            why[name] = f"too big to keep ({size >> 20} MiB; the bound is {MAX_BYTES >> 20} MiB)"
            continue
        try:
            value, size = _encode(scope[name])
        except Unsaveable as exc:
            why[name] = str(exc)
            continue
        except Exception as exc:  # noqa: BLE001 - a value's own failure never stops training
            why[name] = f"copying it failed ({type(exc).__name__}: {exc})"
            continue
        if size > budget:
            why[name] = f"too big to keep ({size >> 20} MiB; the bound is {MAX_BYTES >> 20} MiB)"
            continue
        budget -= size
        kept[name] = value
    return budget


def _tensor_bytes(value: Any) -> int:
    """The bytes of a tensor or numpy array (0 for anything else), without copying it."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.ndarray):
        return int(value.nbytes)
    return 0


def capture_left(frame: types.FrameType | None) -> tuple[dict[str, Any], dict[str, str]]:
    """({name: encoded value}, {name: why not kept}) of the names the inner loop that just
    ended in `frame` leaves for the code after it (FLOR's SkipBlock side effects): a
    replay that skips the loop puts them back into that frame. A loop in a file the
    analysis did not read (a helper module) is not known here: nothing is kept for it."""
    keeper = _KEEPER
    if frame is None or not keeper.leaves or frame.f_code.co_filename != keeper.path:
        return {}, {}
    line = frame.f_lineno
    for first, last, names in keeper.leaves:
        if first <= line <= last:
            kept: dict[str, Any] = {}
            why: dict[str, str] = {}
            _keep(frame, names, kept, why, MAX_BYTES)
            return kept, why
    return {}, {ANALYSIS: f"no inner loop of the analysis has its header at line {line}"}


def restore_left(frame: types.FrameType, values: dict[str, Any] | None) -> None:
    """Put the memoized names an inner loop left (capture_left) into the frame that skips
    it, as the loop had left them."""
    if values:
        _put(frame, {name: _decode(value) for name, value in values.items()})


def _generators(frame: types.FrameType) -> dict[str, Any]:
    """The torch.Generator objects the main loop's frame reaches by name: one bound to a
    name, or held by a DataLoader or sampler as `.generator`. Iterating a shuffling
    DataLoader draws from its generator every epoch (the order, the workers' seeds): a
    segment starting from a checkpoint needs its state as the run had it, like the
    global RNGs (checkpoint.capture_rng)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return {}
    kind = torch.Generator
    found: dict[str, Any] = {}
    seen: set[int] = set()
    names = dict(frame.f_globals)
    if frame.f_locals is not frame.f_globals:
        names.update(frame.f_locals)
    for name, value in names.items():
        for path, obj in ((name, value), (f"{name}.generator", _held_generator(value))):
            if type(obj) is kind and id(obj) not in seen:
                seen.add(id(obj))
                found[path] = obj
    return found


def _held_generator(value: Any) -> Any:
    """`value.generator` where that is a plain attribute (a DataLoader's, a sampler's);
    never a property or `__getattr__` of arbitrary user objects, which may do anything."""
    try:
        return vars(value).get("generator")
    except TypeError:  # no __dict__: ints, tensors, modules' slots
        return None


def restore(saved: dict) -> None:
    """Put the carried names of a checkpoint back into the main loop's frame, and the
    states of the torch.Generators it reaches."""
    frame = _KEEPER.frame
    if frame is not None and saved.get(GENERATORS):
        reached = _generators(frame)
        for path, state in saved[GENERATORS].items():
            if path in reached:
                reached[path].set_state(state)
    values = saved.get(CARRIED)
    if frame is None or not values:
        return
    _put(frame, {name: _decode(value) for name, value in values.items()})


def _put(frame: types.FrameType, decoded: dict[str, Any]) -> None:
    """Bind names in `frame`: its own locals (written through to the running function's
    fast locals), the rest as globals."""
    own = _local_names(frame)
    local = {n: v for n, v in decoded.items() if n in own}
    frame.f_globals.update({n: v for n, v in decoded.items() if n not in own})
    if not local:
        return
    if sys.version_info >= (3, 13):  # f_locals writes through (PEP 667)
        for name, value in local.items():
            frame.f_locals[name] = value
        return
    frame.f_locals.update(local)
    ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))


def _local_names(frame: types.FrameType) -> frozenset[str]:
    """The names that are the frame's own locals (Python decides at compile time); every
    other name the loop assigns is a global (`global best`, or the loop at module level)."""
    if frame.f_locals is frame.f_globals:
        return frozenset()
    code = frame.f_code
    names = _LOCALS.get(code)
    if names is None:
        names = _LOCALS[code] = frozenset(code.co_varnames) | frozenset(code.co_cellvars)
    return names


_LOCALS: dict[types.CodeType, frozenset[str]] = {}


# -- values -----------------------------------------------------------------------------------


# The GPUs whose tensors _encode copied without waiting since the checkpoint being taken
# began, each with an event recorded before its first copy: the checkpoint marks the end
# of those copies (checkpoint.copies_done) and is written once they are done.
QUEUED: dict = {}


def _encode(value: Any, depth: int = 0) -> tuple[Any, int]:
    """(a weights-only-loadable copy of `value`, its size in bytes) or Unsaveable."""
    if depth > 20:
        raise Unsaveable("nested too deeply")
    tp = type(value)
    if tp in _PRIMITIVES:
        return value, len(value) if tp in (str, bytes) else 8
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        on_cpu = value.device.type == "cpu"
        if on_cpu:
            copy = value.detach().clone()
        elif Device.is_device(value):  # queued, not waited for: the writer waits (QUEUED)
            if value.device not in QUEUED:
                QUEUED[value.device] = Device.event_on(value.device, timing=True)
            copy = value.detach().to("cpu", non_blocking=True, copy=True)
        else:
            copy = value.detach().to("cpu", copy=True)
        size = copy.numel() * copy.element_size()
        if on_cpu and not value.requires_grad and tp is torch.Tensor:
            return copy, size
        return {
            _MARK: "tensor",
            "value": copy,
            "device": str(value.device),
            "requires_grad": bool(value.requires_grad),
        }, size
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, (np.ndarray, np.generic)) and torch is not None:
        array = np.asarray(value)
        try:
            tensor = torch.from_numpy(array.copy())
        except (TypeError, RuntimeError) as exc:
            raise Unsaveable(f"a numpy {array.dtype} array ({exc})") from None
        return {
            _MARK: "numpy",
            "value": tensor,
            "dtype": str(array.dtype),
            "scalar": isinstance(value, np.generic),
        }, array.nbytes
    if tp is list or tp is tuple:
        items = [_encode(v, depth + 1) for v in value]
        encoded = [v for v, _ in items]
        return (encoded if tp is list else tuple(encoded)), sum(s for _, s in items) + 8
    if tp is dict:
        out: dict = {}
        total = 8
        for key, item in value.items():
            if type(key) not in _PRIMITIVES or key == _MARK:
                raise Unsaveable(f"a dict with a {type(key).__name__} key")
            out[key], size = _encode(item, depth + 1)
            total += size
        return out, total
    raise Unsaveable(_why(value))


def _why(value: Any) -> str:
    if isinstance(value, types.GeneratorType) or (
        attr_of(value, "__next__") is not None and attr_of(value, "__iter__") is not None
    ):
        return f"an iterator ({type(value).__name__}): its position cannot be saved"
    if isinstance(value, types.ModuleType):
        return "a module"
    if attr_of(value, "fileno") is not None or attr_of(value, "readable") is not None:
        return f"an open file or stream ({type(value).__name__})"
    return f"a {type(value).__module__}.{type(value).__qualname__} object"


def _decode(value: Any) -> Any:
    tp = type(value)
    if tp is list:
        return [_decode(v) for v in value]
    if tp is tuple:
        return tuple(_decode(v) for v in value)
    if tp is dict:
        mark = value.get(_MARK)
        if mark == "tensor":
            tensor = value["value"].to(value["device"])
            if value["requires_grad"]:
                tensor.requires_grad_(True)
            return tensor
        if mark == "numpy":
            import numpy as np

            array = value["value"].numpy().astype(np.dtype(value["dtype"]), copy=True)
            return array[()] if value["scalar"] else array
        return {k: _decode(v) for k, v in value.items()}
    if hasattr(value, "clone"):
        return value.clone()  # the kept checkpoint must not change with the training
    return value


with contextlib.suppress(AttributeError):  # not CPython: restoring into functions fails loudly
    ctypes.pythonapi.PyFrame_LocalsToFast.argtypes = [ctypes.py_object, ctypes.c_int]
