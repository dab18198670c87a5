"""Pull a past model: a recorded run's checkpoints, read back in a notebook or script.

Replay answers "what would this statement have logged"; often a user only wants the model as
it was at epoch 3 to measure something new on it. The checkpoints recorded runs already
write (`.florwb/checkpoints/<run>/<loop>-<iteration>.pt`, see checkpoint.py) hold every
registered object's state_dict plus the RNG states, so this module only finds the right
file and loads it with `torch.load(weights_only=True)`: nothing in a checkpoint can run code.

The files are read straight from the folder, not from the catalog: pulling a model needs no
DuckDB and works while the run is still recording.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from florwb_engine import project as projects
from florwb_engine.record.checkpoint import safe_loop_name

_FILE = re.compile(r"^(?P<loop>.+)-(?P<iteration>\d+)\.pt$")


class CheckpointError(LookupError):
    """A run, loop or iteration with no checkpoint; the message is one line."""


@dataclass(frozen=True)
class CheckpointFile:
    run_id: str
    loop: str  # the loop name as written in the file name (see checkpoint._safe)
    iteration: int  # 0-based iteration of the run's outer loop
    path: Path
    bytes: int


def find_run_folder(project: Path, run_id: str) -> Path:
    """The checkpoint folder of `run_id`, which may be a unique prefix of the id."""
    root = projects.checkpoint_dir(project)
    if not root.parent.is_dir():  # said like every reader says it (store/db.py)
        raise CheckpointError(
            f"no florwb project in {project} (no {root.parent.name}/ folder; record a run "
            "with `import florwb as flor` first)"
        )
    exact = root / run_id
    if run_id and exact.is_dir() and exact.parent == root:
        return exact
    folders = sorted(p for p in root.glob("*") if p.is_dir()) if root.is_dir() else []
    matches = [p for p in folders if run_id and p.name.startswith(run_id)]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        names = ", ".join(p.name for p in matches[:5])
        raise CheckpointError(f"run {run_id!r} is ambiguous: {names}")
    raise CheckpointError(f"run {run_id!r} has no checkpoints in {root}")


def list_checkpoints(project: Path, run_id: str) -> list[CheckpointFile]:
    """Every finished checkpoint file of a run, by loop then iteration (temp files of
    writes in progress or killed runs are not checkpoints)."""
    folder = find_run_folder(project, run_id)
    out = []
    for path in folder.iterdir():
        m = _FILE.match(path.name)
        if m is None or path.name.startswith("."):
            continue
        out.append(
            CheckpointFile(
                run_id=folder.name,
                loop=m["loop"],
                iteration=int(m["iteration"]),
                path=path,
                bytes=path.stat().st_size,
            )
        )
    return sorted(out, key=lambda c: (c.loop, c.iteration))


def pick(
    checkpoints: list[CheckpointFile], iteration: int | None, loop: str | None = None
) -> CheckpointFile:
    """The checkpoint at `iteration` of `loop` (latest when None); one-line errors name
    what exists instead."""
    if not checkpoints:
        raise CheckpointError("the run has no finished checkpoint")
    loops = sorted({c.loop for c in checkpoints})
    if loop is None:
        if len(loops) > 1:
            raise CheckpointError(f"checkpoints of several loops ({', '.join(loops)}): pass loop=")
        loop = loops[0]
    loop = safe_loop_name(loop)
    mine = [c for c in checkpoints if c.loop == loop]
    if not mine:
        raise CheckpointError(f"no checkpoints of loop {loop!r}; checkpointed loops: {loops}")
    if iteration is None:
        return mine[-1]
    for c in mine:
        if c.iteration == iteration:
            return c
    have = ", ".join(str(c.iteration) for c in mine)
    raise CheckpointError(
        f"run {mine[0].run_id} has no checkpoint at {loop} {iteration}; checkpointed: {have}"
    )


def load_checkpoint(path: Path, map_location: Any = None) -> dict:
    """A checkpoint file as saved: `{"objects": {name: state_dict}, "rng": {...}}`."""
    import torch

    return torch.load(path, weights_only=True, map_location=map_location)


def load(
    project: Path,
    run_id: str,
    iteration: int | None = None,
    *,
    loop: str | None = None,
    map_location: Any = None,
) -> dict[str, Any]:
    """The registered objects' state_dicts (name -> state_dict) of `run_id` at `iteration`
    of its outer loop, the latest checkpointed one by default."""
    chosen = pick(list_checkpoints(project, run_id), iteration, loop)
    return load_checkpoint(chosen.path, map_location)["objects"]


def load_into(
    project: Path,
    run_id: str,
    objects: dict[str, Any],
    iteration: int | None = None,
    *,
    loop: str | None = None,
    map_location: Any = None,
    rng: bool = False,
) -> CheckpointFile:
    """Restore live objects (model=..., optimizer=...) in place from a past run's checkpoint,
    matched by the names they were registered under in `flor.checkpointing`. With `rng`,
    the RNG states saved at that moment are restored too, so continuing training draws
    what the run drew. Returns the checkpoint used."""
    from florwb_engine.record.checkpoint import restore

    objects, iteration, loop = _loop_keyword(objects, iteration, loop)
    if not objects:
        raise CheckpointError("name the objects to restore, e.g. model=net, optimizer=opt")
    chosen = pick(list_checkpoints(project, run_id), iteration, loop)
    saved = load_checkpoint(chosen.path, map_location)
    missing = sorted(set(objects) - set(saved["objects"]))
    if missing:
        have = ", ".join(sorted(saved["objects"])) or "none"
        raise CheckpointError(
            f"checkpoint {chosen.path.name} holds no {', '.join(missing)}; it holds: {have}"
        )
    restore(objects, saved, rng=rng)
    return chosen


def _loop_keyword(
    objects: dict[str, Any], iteration: int | None, loop: str | None
) -> tuple[dict[str, Any], int | None, str | None]:
    """`load_into(run, model=net, epoch=3)`: an int keyword names the outer loop (as in
    `flor.loop("epoch", ...)`) and its iteration; everything else is an object to restore."""
    named = {k: v for k, v in objects.items() if type(v) is int}
    if len(named) > 1:
        raise CheckpointError(f"one loop iteration expected, got {', '.join(sorted(named))}")
    if named:
        ((name, value),) = named.items()
        if iteration is not None and iteration != value:
            raise CheckpointError(f"both iteration={iteration} and {name}={value} given")
        iteration, loop = value, loop or name
    return {k: v for k, v in objects.items() if k not in named}, iteration, loop
