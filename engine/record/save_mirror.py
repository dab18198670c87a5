"""The script's own `torch.save` calls, mirrored as the run's checkpoints.

Many training scripts already save a checkpoint every epoch (`torch.save(state, "ckpt.pth")`)
and never call `flor.checkpointing`. While a run records, `torch.save` is wrapped: the user's
file is written first, exactly as without florwb; then, when the call happens in the body of
the run's main `flor.loop` (depth 0), the file is copied into the run's checkpoint folder
(`copy_file_range`, which the kernel turns into a reflink on filesystems that share blocks)
and the RNG states are captured at that moment, so overwriting `ckpt.pth` next epoch does not
lose the earlier one. The copy is a copy, not a hard link: a hard link would be changed by
anything that rewrites the user's file in place (the next run, another tool).

A state that `torch.load(weights_only=True)` could not read back (a whole `nn.Module`, an
optimizer object, an argparse Namespace in the dict) is written again in a safe form instead
(modules and optimizers as their state_dicts, other objects dropped): replay never unpickles
code. Per main-loop iteration a manifest `<loop>-<iteration>.saves.json` lists the mirrored
files with their call sites (script, line), and one `checkpoint` event names it, so the
checkpoints table holds mirrored checkpoints beside `flor.checkpointing`'s `.pt` files.
Which objects of the script a saved state belongs to is decided when a replay is planned,
from the call's `state` expression in the run's code (engine/replay/saved_state.py).

Mirroring shares the checkpoint budget of `flor.checkpointing` (a save whose copy would
exceed it is not mirrored; the replay plan says which iterations have no checkpoint). Any
failure to mirror is counted as a run issue and said once on stderr; the user's save is
never affected.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from florwb_engine import settings
from florwb_engine.atomic import sync_folder, write_atomic
from florwb_engine.contract.checkpoint_files import MANIFEST_SUFFIX
from florwb_engine.journal import ITERATION_MASK
from florwb_engine.journal_events import Checkpoint
from florwb_engine.record import file_access
from florwb_engine.record.checkpoint import capture_rng, safe_loop_name
from florwb_engine.record.values import REPLACED, attr_of

ISSUE = "mirror"

_BYTES_PER_S = 500e6  # first estimate of a copy's speed, before one was measured
_SAFE_LEAVES = (int, float, str, bool, type(None), bytes, complex)


def manifest_name(loop: str, iteration: int) -> str:
    return f"{safe_loop_name(loop)}-{iteration:06d}{MANIFEST_SUFFIX}"


class Mirror:
    """The mirroring state of one recording run."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.folder: Path = run.checkpointer.folder
        self.policy = run.checkpointer.policy
        self.started = time.perf_counter()
        self.current: tuple[str, int] | None = None  # (loop, iteration) of the open manifest
        self.manifest: dict | None = None
        self.count = 0
        self._said = False
        self._said_nested = False
        self._copy_bytes_per_s = _BYTES_PER_S

    # --- after the user's save ------------------------------------------------------

    def after(self, obj: Any, f: Any, caller: Any) -> None:
        from florwb_engine.record import api

        position = api.loop_position()
        if position is None:
            return  # before or after the loops: not a checkpoint of an iteration
        ctx, names, prefix = position
        if not names:
            return
        if prefix:
            if not self._said_nested:
                self._said_nested = True
                REPLACED.add(ISSUE, f"torch.save inside loop {names[-1]!r} not mirrored")
                print(
                    f"florwb: torch.save inside loop {names[-1]!r} is not mirrored as a "
                    f"checkpoint; saves in the body of {names[0]!r} are",
                    file=sys.stderr,
                )
            return
        self._mirror(obj, os.fspath(f), names[0], ctx & ITERATION_MASK, ctx, caller)

    def _mirror(self, obj: Any, target: str, loop: str, iteration: int, ctx: int, caller) -> None:
        t0 = time.perf_counter()
        self.folder.mkdir(parents=True, exist_ok=True)
        first = self.current != (loop, iteration) or self.manifest is None
        if first:  # kept as the iteration's manifest only once something was mirrored
            manifest: dict = {"loop": loop, "iteration": iteration, "rng": None, "saves": []}
        else:
            manifest = dict(self.manifest or {}, saves=list((self.manifest or {})["saves"]))
        k = len(manifest["saves"])
        stem = f"{safe_loop_name(loop)}-{iteration:06d}"
        dest = self.folder / f"{stem}.save{k}.pt"
        how = "copy" if _weights_only_safe(obj) else "state_dict"
        size = _size(target) if how == "copy" else _state_bytes(obj)
        if not self._affordable(size, iteration):
            return  # like flor.checkpointing's policy: this iteration is not checkpointed
        t1 = time.perf_counter()
        written: list[Path] = []  # removed again if this mirror fails: no orphan on a full disk
        try:
            if how == "copy":
                _copy(target, dest)
            else:
                write_atomic(dest, lambda out: _ORIGINAL_SAVE(_safe_form(obj), out), durable=True)
            written.append(dest)
            if size:
                self._copy_bytes_per_s = size / max(time.perf_counter() - t1, 1e-6)
            if first:
                rng_name = f"{stem}.rng.pt"
                write_atomic(
                    self.folder / rng_name,
                    lambda out: _ORIGINAL_SAVE(capture_rng(), out),
                    durable=True,
                )
                written.append(self.folder / rng_name)
                manifest["rng"] = rng_name
            manifest["saves"].append(
                {
                    "file": dest.name,
                    "script": _script_of(caller, self.run.project),
                    "line": caller.f_lineno if caller is not None else None,
                    "target": target,
                    "how": how,
                }
            )
            name = manifest_name(loop, iteration)
            text = json.dumps(manifest).encode()
            write_atomic(self.folder / name, lambda out: out.write(text), durable=True)
            sync_folder(self.folder)
        except BaseException:
            for path in written:
                path.unlink(missing_ok=True)
            raise
        self.current, self.manifest = (loop, iteration), manifest
        cost = time.perf_counter() - t0
        self.policy.paid(cost)
        self.count += 1
        if first:
            from florwb_engine.record import runtime

            runtime.EVENTS.append(
                Checkpoint(
                    loop=loop,
                    iteration=iteration,
                    ctx_id=ctx,
                    path=name,
                    bytes=_size(str(dest)),
                    snapshot_s=cost,
                    write_s=0.0,
                    time=time.time(),
                ).to_dict()
            )

    def _affordable(self, size: int, iteration: int) -> bool:
        if self.policy.every is not None:  # flor.checkpointing(..., every=N)'s iterations
            return iteration % self.policy.every == 0
        expected = size / self._copy_bytes_per_s
        compute = max(time.perf_counter() - self.started, self.policy.compute_s)
        return self.policy.cost_s + expected <= self.policy.budget * compute

    def failed(self, exc: BaseException) -> None:
        REPLACED.add(ISSUE, f"torch.save not mirrored ({type(exc).__name__})")
        if not self._said:
            self._said = True
            print(
                f"florwb: could not mirror a torch.save as a checkpoint ({exc}); your file is "
                "written, `florwb runs` counts what was not mirrored",
                file=sys.stderr,
            )


# --- the patch ---------------------------------------------------------------------------

_ACTIVE: Mirror | None = None
_ORIGINAL_SAVE: Any = None
WAITING = False  # a run records but torch was not imported yet when it started


def _save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
    """torch.save while a run records: the user's save, then the mirror."""
    file_access.note_write(f)  # written from C++: no audit event says so
    result = _ORIGINAL_SAVE(obj, f, *args, **kwargs)
    mirror = _ACTIVE
    if mirror is not None and isinstance(f, (str, os.PathLike)):
        try:
            mirror.after(obj, f, sys._getframe(1))
        except Exception as exc:  # never the user's save: counted and said once
            mirror.failed(exc)
    return result


def attach(run: Any) -> None:
    """Start mirroring for a recording run (replay workers do not mirror)."""
    global _ACTIVE, WAITING
    if run is None or run.replayer is not None or not settings.read(settings.MIRROR_SAVES):
        return
    _ACTIVE = Mirror(run)
    WAITING = True
    arm()


def arm() -> None:
    """Wrap torch.save once torch is imported (called at run start and at loop entry)."""
    global _ORIGINAL_SAVE, WAITING
    torch = sys.modules.get("torch")
    if torch is None or _ACTIVE is None:
        return
    WAITING = False
    current = getattr(torch, "save", None)
    if current is _save or current is None:
        return
    _ORIGINAL_SAVE = current
    setattr(torch, "save", _save)  # noqa: B010 (a module attribute mypy does not know)


def detach() -> None:
    """Stop mirroring and give torch its own save back."""
    global _ACTIVE, WAITING
    _ACTIVE = None
    WAITING = False
    torch = sys.modules.get("torch")
    if torch is not None and getattr(torch, "save", None) is _save:
        setattr(torch, "save", _ORIGINAL_SAVE)  # noqa: B010


def _forget_in_child() -> None:
    global _ACTIVE, WAITING
    _ACTIVE = None
    WAITING = False


os.register_at_fork(after_in_child=_forget_in_child)


# --- helpers -----------------------------------------------------------------------------


def _weights_only_safe(obj: Any, depth: int = 0) -> bool:
    """Whether torch.load(weights_only=True) reads `obj` back (tensors in plain containers)."""
    if depth > 20:
        return False
    if isinstance(obj, _SAFE_LEAVES):
        return True
    if _is_tensor(obj):
        return True
    if isinstance(obj, dict):
        return all(
            _weights_only_safe(k, depth + 1) and _weights_only_safe(v, depth + 1)
            for k, v in obj.items()
        )
    if isinstance(obj, (list, tuple)):
        return all(_weights_only_safe(v, depth + 1) for v in obj)
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, (torch.dtype, torch.device, torch.Size))


def _safe_form(obj: Any, depth: int = 0) -> Any:
    """`obj` with modules, optimizers and schedulers as their state_dicts and any other
    object a weights-only load refuses dropped (None)."""
    if depth > 20:
        return None
    if _is_tensor(obj) or isinstance(obj, _SAFE_LEAVES):
        return obj
    getter = attr_of(obj, "state_dict")
    if callable(getter) and not isinstance(obj, dict):
        return _safe_form(getter(), depth + 1)
    if isinstance(obj, dict):
        return {k: _safe_form(v, depth + 1) for k, v in obj.items() if _weights_only_safe(k)}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_safe_form(v, depth + 1) for v in obj)
    return obj if _weights_only_safe(obj) else None


def _is_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _state_bytes(obj: Any) -> int:
    from florwb_engine.record.checkpoint import tensors_in

    getter = attr_of(obj, "state_dict")
    if callable(getter) and not isinstance(obj, dict):
        obj = getter()
    return sum(t.numel() * t.element_size() for t in tensors_in(obj))


def _size(path: str) -> int:
    with contextlib.suppress(OSError):  # only the estimate and the event's byte count
        return os.stat(path).st_size
    return 0


def _copy(source: str, dest: Path) -> None:
    """Copy in the kernel (a reflink where the filesystem shares blocks), then rename."""
    with open(source, "rb") as src:
        write_atomic(dest, lambda out: _copy_into(src, out), durable=True)


def _copy_into(src: Any, out: Any) -> None:
    left = os.fstat(src.fileno()).st_size
    try:
        while left > 0:
            n = os.copy_file_range(src.fileno(), out.fileno(), left)
            if n == 0:
                break
            left -= n
    except OSError as exc:  # a filesystem without it: an ordinary copy
        if exc.errno == errno.ENOSPC:
            raise
        import shutil

        src.seek(0)
        out.seek(0)
        out.truncate()
        shutil.copyfileobj(src, out, 1 << 20)


def _script_of(frame: Any, project: Path) -> str | None:
    if frame is None:
        return None
    path = Path(frame.f_code.co_filename)
    try:
        return str(path.resolve().relative_to(project))
    except (ValueError, OSError):
        return str(path)
