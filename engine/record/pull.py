"""Pull a past model: a recorded run's checkpoints, read back in a notebook or script.

Replay answers "what would this statement have logged"; often a user only wants the model as
it was at epoch 3 to measure something new on it. The checkpoints recorded runs already
write (`.florwb/checkpoints/<run>/<loop>-<iteration>.pt`, see checkpoint.py) hold every
registered object's state_dict plus the RNG states, so this module only finds the right
file and loads it with `torch.load(weights_only=True)`: nothing in a checkpoint can run code.

The script's own `torch.save` files, mirrored per main-loop iteration (save_mirror.py:
`<loop>-<n>.saveK.pt` listed by the manifest `<loop>-<n>.saves.json`), are checkpoints too:
a saved dict of objects (`{"model": ..., "optimizer": ..., "epoch": 3}`) gives its keys as
the names, and a single state_dict saved alone (`torch.save(net.state_dict(), "model.pt")`)
is named after its file (`model`). Where an iteration has both kinds, the objects of
`flor.checkpointing` win a name both hold.

The files are read straight from the folder, not from the catalog: pulling a model needs no
DuckDB and works while the run is still recording.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from florwb_engine import project as projects
from florwb_engine.contract.checkpoint_files import MANIFEST_SUFFIX
from florwb_engine.errors import FlorwbError
from florwb_engine.record.checkpoint import safe_loop_name

_FILE = re.compile(r"^(?P<loop>.+)-(?P<iteration>\d+)\.pt$")
_MANIFEST = re.compile(r"^(?P<loop>.+)-(?P<iteration>\d+)" + re.escape(MANIFEST_SUFFIX) + "$")


class CheckpointError(FlorwbError, LookupError):
    """A run, loop or iteration with no checkpoint; the message is one line."""


@dataclass(frozen=True)
class CheckpointFile:
    run_id: str
    loop: str  # the loop name as written in the file name (see checkpoint._safe)
    iteration: int  # 0-based iteration of the run's outer loop
    path: Path  # flor.checkpointing's file, else the mirrored saves' manifest
    bytes: int
    saves: tuple[Path, ...] = ()  # the script's own torch.save files of this iteration

    @property
    def kind(self) -> str:
        """`checkpointing`, `torch.save` (mirrored saves only), or both."""
        own = self.path.name.endswith(MANIFEST_SUFFIX)
        if own:
            return "torch.save"
        return "checkpointing+torch.save" if self.saves else "checkpointing"


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
    """Every finished checkpoint of a run, by loop then iteration: flor.checkpointing's
    files and the mirrored torch.save files, one entry per iteration (temp files of writes
    in progress or killed runs are not checkpoints)."""
    folder = find_run_folder(project, run_id)
    own: dict[tuple[str, int], Path] = {}
    mirrored: dict[tuple[str, int], tuple[Path, tuple[Path, ...]]] = {}
    for path in folder.iterdir():
        if path.name.startswith("."):
            continue
        m = _FILE.match(path.name)
        if m is not None:
            own[(m["loop"], int(m["iteration"]))] = path
            continue
        m = _MANIFEST.match(path.name)
        if m is not None:
            saves = _manifest_saves(path)
            if saves:
                mirrored[(m["loop"], int(m["iteration"]))] = (path, saves)
    out = []
    for key in sorted(set(own) | set(mirrored), key=lambda k: (k[0], k[1])):
        saves = mirrored[key][1] if key in mirrored else ()
        found = own.get(key) or mirrored[key][0]
        out.append(
            CheckpointFile(
                run_id=folder.name,
                loop=key[0],
                iteration=key[1],
                path=found,
                bytes=sum(_size(p) for p in (own.get(key), *saves) if p is not None),
                saves=saves,
            )
        )
    return out


def _manifest_saves(manifest: Path) -> tuple[Path, ...]:
    """The mirrored files a manifest lists that exist (a manifest is written after them)."""
    try:
        listed = json.loads(manifest.read_text()).get("saves", ())
    except (OSError, ValueError):
        return ()
    files = (manifest.parent / str(s.get("file")) for s in listed if isinstance(s, dict))
    return tuple(p for p in files if p.is_file())


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


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


def load_saved(chosen: CheckpointFile, map_location: Any = None) -> dict:
    """A checkpoint's objects and RNG states, `{"objects": ..., "rng": ...}`, from
    flor.checkpointing's file and the iteration's mirrored torch.save files together."""
    import torch

    if chosen.kind == "torch.save":
        saved: dict = {"objects": {}, "rng": None}
    else:
        saved = load_checkpoint(chosen.path, map_location)
        saved = {**saved, "objects": dict(saved["objects"])}
    for save in chosen.saves:
        state = torch.load(save, weights_only=True, map_location=map_location)
        for name, part in _named_parts(state, _target_stem(chosen, save)).items():
            saved["objects"].setdefault(name, part)
    if saved.get("rng") is None and chosen.saves:
        saved["rng"] = _manifest_rng(chosen, map_location)
    return saved


def _named_parts(state: Any, stem: str) -> dict[str, Any]:
    """The objects one saved file holds by name: a dict of objects by its keys, a single
    state_dict (or tensor) under the name of the file it was saved to."""
    if isinstance(state, dict) and state and not _one_state_dict(state):
        if all(isinstance(k, str) for k in state):
            return dict(state)
    return {stem: state}


def _one_state_dict(state: dict) -> bool:
    """A module's state_dict (names -> tensors) or an optimizer's (`state`, `param_groups`)."""
    import torch

    if {"state", "param_groups"} <= set(state):
        return True
    return all(isinstance(v, torch.Tensor) for v in state.values())


def _target_stem(chosen: CheckpointFile, save: Path) -> str:
    """The stem of the user's file a mirrored save copied (`model.pt` -> `model`)."""
    try:
        listed = json.loads(_manifest_of(chosen).read_text()).get("saves", ())
    except (OSError, ValueError):
        listed = ()
    for entry in listed:
        if isinstance(entry, dict) and entry.get("file") == save.name and entry.get("target"):
            name = Path(str(entry["target"])).name
            return name.split(".", 1)[0] or name
    return save.name


def saved_targets(chosen: CheckpointFile) -> list[tuple[Path, str]]:
    """The mirrored files of an iteration with the path the script saved each to (as it
    wrote it: `ckpt.pth`), in the order saved; the file's own name where none is known."""
    try:
        listed = json.loads(_manifest_of(chosen).read_text()).get("saves", ())
    except (OSError, ValueError):
        listed = ()
    targets = {
        str(e.get("file")): str(e["target"])
        for e in listed
        if isinstance(e, dict) and e.get("target")
    }
    return [(save, targets.get(save.name, save.name)) for save in chosen.saves]


def _manifest_of(chosen: CheckpointFile) -> Path:
    from florwb_engine.record.save_mirror import manifest_name

    return chosen.path.parent / manifest_name(chosen.loop, chosen.iteration)


def _manifest_rng(chosen: CheckpointFile, map_location: Any) -> Any:
    """The RNG states captured with the iteration's first mirrored save, if written."""
    try:
        name = json.loads(_manifest_of(chosen).read_text()).get("rng")
    except (OSError, ValueError):
        return None
    path = chosen.path.parent / str(name) if name else None
    if path is None or not path.is_file():
        return None
    return load_checkpoint(path, map_location)


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
    return load_saved(chosen, map_location)["objects"]


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
    matched by the names they were registered under in `flor.checkpointing` (or the keys
    and file names of the script's own torch.save). With `rng`, the RNG states saved at
    that moment are restored too, so continuing training draws what the run drew. A
    model's state_dict saved from a DistributedDataParallel wrapper (`module.` names) loads
    into the plain model, and the other way round. Returns the checkpoint used."""
    from florwb_engine.record.checkpoint import restore

    objects, iteration, loop = _loop_keyword(objects, iteration, loop)
    if not objects:
        raise CheckpointError("name the objects to restore, e.g. model=net, optimizer=opt")
    chosen = pick(list_checkpoints(project, run_id), iteration, loop)
    saved = load_saved(chosen, map_location)
    missing = sorted(set(objects) - set(saved["objects"]))
    if missing:
        have = ", ".join(sorted(saved["objects"])) or "none"
        raise CheckpointError(
            f"checkpoint {chosen.path.name} holds no {', '.join(missing)}; it holds: {have}"
        )
    if rng and saved.get("rng") is None:
        raise CheckpointError(f"checkpoint {chosen.path.name} holds no RNG states")
    fitted = {name: fit_module_prefix(obj, saved["objects"][name]) for name, obj in objects.items()}
    restore(objects, {**saved, "objects": fitted}, rng=rng)
    return chosen


def fit_module_prefix(obj: Any, state: Any) -> Any:
    """`state` with its parameter names made to match `obj`'s: the `module.` a
    DistributedDataParallel (or DataParallel) wrapper puts in front of every name is
    added or removed when that is the only difference; anything else is left as saved,
    so load_state_dict says what does not fit."""
    getter = getattr(obj, "state_dict", None)
    if not isinstance(state, dict) or not callable(getter) or not state:
        return state
    try:
        wanted = set(getter().keys())
    except Exception:  # an object whose state_dict needs arguments: loaded as saved
        return state
    names = set(state)
    if names == wanted or not all(isinstance(k, str) for k in names):
        return state
    prefix = "module."
    if {prefix + k for k in names} == wanted:
        return type(state)((prefix + k, v) for k, v in state.items())
    if all(k.startswith(prefix) for k in names) and {k[len(prefix) :] for k in names} == wanted:
        return type(state)((k[len(prefix) :], v) for k, v in state.items())
    return state


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
