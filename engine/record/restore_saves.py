"""Replay workers: put the state of the script's own torch.save checkpoints back.

A mirrored checkpoint (record/save_mirror.py) is the user's own file; the plan says which
object of the script each part of it belongs to (`saved_map`, from replay/saved_state.py:
`[keys, expression, required]`, e.g. `[["model"], "net", True]`). The expressions are names
and attribute chains of the frame that runs the main `flor.loop` (the script's module or the
function holding the loop); they are looked up there, never evaluated as code, and the state
is loaded with `torch.load(weights_only=True)`. Objects registered with flor.checkpointing
are restored from its own checkpoint and left alone here (flor.checkpointing wins).

A required object that is not found, or that cannot take the state, ends the replay with a
one-line reason: replaying on with part of the state missing would store wrong values.
"""

from __future__ import annotations

import ast
import builtins
import json
import sys
from pathlib import Path
from typing import Any

_ENGINE = str(Path(__file__).resolve().parents[1])


class RestoreError(RuntimeError):
    """A mirrored checkpoint that cannot be put back into the script's objects."""


def restore_own_saves(
    manifest_path: Path, saved_map: dict[str, list[list]], registered: dict[str, Any], *, rng: bool
) -> None:
    """Load every mapped save listed in the manifest into the script's objects (and the RNG
    states captured with them when `rng`)."""
    import torch

    from florwb_engine.record.checkpoint import restore_rng

    manifest = json.loads(manifest_path.read_text())
    folder = manifest_path.parent
    frame = _script_frame()
    taken = {id(obj) for obj in registered.values()}
    for save in manifest.get("saves", ()):
        targets = saved_map.get(f"{save.get('script')}:{save.get('line')}")  # site_key
        if not targets:
            continue
        state = torch.load(folder / save["file"], weights_only=True, map_location="cpu")
        for keys, expression, required in targets:
            part = state
            try:
                for key in keys:
                    part = part[key]
            except (KeyError, IndexError, TypeError):
                if required:
                    raise RestoreError(
                        f"{save['file']} holds no {'/'.join(map(str, keys))} for {expression}"
                    ) from None
                continue
            obj = _lookup(expression, frame)
            if obj is _MISSING:
                if required:
                    raise RestoreError(f"{expression} is not defined where the main loop runs")
                continue
            if id(obj) in taken:
                continue  # restored from flor.checkpointing's checkpoint
            if not _put(obj, part) and required:
                raise RestoreError(f"{expression} cannot take the state saved for it")
    if rng and manifest.get("rng"):
        restore_rng(torch.load(folder / manifest["rng"], weights_only=True))


def _put(obj: Any, state: Any) -> bool:
    loader = getattr(obj, "load_state_dict", None)
    if callable(loader) and isinstance(state, dict):
        loader(state)
        return True
    if hasattr(obj, "copy_") and hasattr(state, "shape"):
        import torch

        with torch.no_grad():
            obj.copy_(state)
        return True
    return False


_MISSING = object()


def _script_frame() -> Any:
    """The innermost frame outside florwb's engine: the one iterating the main loop."""
    frame: Any = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_ENGINE):
        frame = frame.f_back
    return frame


def _lookup(expression: str, frame: Any) -> Any:
    """The object a name / attribute chain / constant subscript names in `frame`."""
    try:
        node = ast.parse(expression, mode="eval").body
    except SyntaxError:
        return _MISSING
    return _value(node, frame)


def _value(node: ast.expr, frame: Any) -> Any:
    if isinstance(node, ast.Name):
        for scope in (frame.f_locals, frame.f_globals, vars(builtins)):
            if node.id in scope:
                return scope[node.id]
        return _MISSING
    if isinstance(node, ast.Attribute):
        base = _value(node.value, frame)
        return _MISSING if base is _MISSING else getattr(base, node.attr, _MISSING)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        base = _value(node.value, frame)
        try:
            return _MISSING if base is _MISSING else base[node.slice.value]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return _MISSING
