"""The process's RNG states at a run's start, so a replay can start from the same ones.

Scripts that never seed, or that draw their own seed (`seed = random.randint(...)` after
argparse), consume RNG states nothing else records: the end-of-iteration checkpoints hold
the states only from the first checkpoint on. What is captured here is the state at the
run's start, which is the process's first florwb call (`flor.arg`, `flor.log`,
`flor.loop`...), not the interpreter's start: whatever the script drew before that call is
already consumed. The replay worker restores these states at its own first florwb call, the
same point in the same (old) script, so draws before it and after it are the run's.

Held: python's global `random`; numpy's global RandomState if numpy is imported by then;
torch's CPU generator if torch is imported by then; the CUDA generators only if the script
already initialised CUDA (capturing never initialises it). A library imported after the
first florwb call starts from its own seed then (torch: a fixed default, so the same;
numpy: fresh OS entropy, so not reproducible) and is not captured.

The states at `import florwb` are kept too (`at_import`) and a replay worker restores them
before the old script's first line: a script that draws its own seed before its first
florwb call (`seed = random.randint(...)` right after argparse) then draws the run's.

The file is JSON (a few tens of KiB): writing it needs no torch import, reading it runs no
unpickling.
"""

from __future__ import annotations

import base64
import json
import os
import random
import sys
from pathlib import Path
from typing import Any

from florwb_engine import settings
from florwb_engine.atomic import write_atomic

FILE = "start-rng.json"
AT_IMPORT = "at_import"  # the states when florwb was imported, inside the file's states
_at_import: dict[str, Any] | None = None


def note_import() -> None:
    """At `import florwb`: remember the RNG states (recording), or, in a replay worker
    started as a fresh interpreter, put back the run's (see restore_before_script)."""
    global _at_import
    spec = settings.read(settings.REPLAY)
    if spec:
        restore_before_script(spec)
    else:
        _at_import = _states()


def restore_before_script(spec_path: str | None) -> None:
    """Give a replay worker the recorded run's RNG states at `import florwb`, before the
    old script's first line. Runs recorded without them, or unreadable files, leave the
    states as they are: the first florwb call restores what it can and says what not."""
    if not spec_path:
        return
    try:
        path = json.loads(Path(spec_path).read_text()).get("start_rng") or ""
        states = load(Path(path)).get(AT_IMPORT) if path and os.path.exists(path) else None
        if states:
            restore(states)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # the first call reports it
        print(f"florwb: RNG states at import not restored: {exc}", file=sys.stderr)


def capture() -> dict[str, Any]:
    """The RNG states of the libraries the process has imported, as JSON-able data, with
    those at `import florwb` under `at_import`."""
    state = _states()
    if _at_import is not None:
        state[AT_IMPORT] = _at_import
    return state


def _states() -> dict[str, Any]:
    version, words, gauss = random.getstate()
    state: dict[str, Any] = {"python": {"version": version, "words": list(words), "gauss": gauss}}
    np = sys.modules.get("numpy")
    if np is not None and hasattr(np, "random"):
        kind, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = {
            "kind": kind,
            "keys": [int(k) for k in keys],
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        }
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "get_rng_state"):
        state["torch"] = _b64(torch.get_rng_state())
        cuda = getattr(torch, "cuda", None)
        if cuda is not None and cuda.is_initialized():  # never initialise CUDA here
            state["cuda"] = [_b64(s) for s in cuda.get_rng_state_all()]
    return state


def save(state: dict[str, Any], folder: Path) -> Path:
    """Write the states atomically into the run's checkpoint folder; OSError if it cannot."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / FILE
    text = json.dumps(state).encode()
    # not synced: written at the run's first call, where a device sync would delay training
    write_atomic(path, lambda out: out.write(text), durable=False)
    return path


def load(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def restore(state: dict[str, Any]) -> list[str]:
    """Set the process's RNGs to `state`; returns the names of the states not restored
    (a library the replay has not imported at this point, CUDA not initialised)."""
    py = state["python"]
    random.setstate((py["version"], tuple(py["words"]), py["gauss"]))
    missing = []
    if "numpy" in state:
        np = sys.modules.get("numpy")
        if np is not None and hasattr(np, "random"):
            s = state["numpy"]
            keys = np.array(s["keys"], dtype=np.uint32)
            np.random.set_state((s["kind"], keys, s["pos"], s["has_gauss"], s["cached"]))
        else:
            missing.append("numpy")
    torch = sys.modules.get("torch")
    if "torch" in state:
        if torch is not None and hasattr(torch, "set_rng_state"):
            torch.set_rng_state(_tensor(torch, state["torch"]))
        else:
            missing.append("torch")
    if "cuda" in state:
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.set_rng_state_all([_tensor(torch, s) for s in state["cuda"]])
        else:
            missing.append("cuda")
    return missing


def _b64(tensor: Any) -> str:
    return base64.b64encode(bytes(tensor.cpu().tolist())).decode("ascii")  # no numpy needed


def _tensor(torch: Any, text: str) -> Any:
    data = bytearray(base64.b64decode(text))
    return torch.frombuffer(data, dtype=torch.uint8).clone()
