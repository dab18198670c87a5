"""Every `FLORWB_*` environment variable, in one table: its name, type, default and what it
changes.

Each variable is a typed `Var`; `read(VAR)` parses the environment as it is at the call
(cheap: one dictionary lookup), so a test or a script that sets a variable sees it at once,
and a module that wants a value fixed at import time reads it there. A value that does not
parse is never a crash inside training: it is said once on stderr and the default is used;
the few variables whose wrong value would make a reader do something else than asked
(`strict`) raise `SettingError` instead, a one-line FlorwbError. Variables florwb sets for
its own child processes (`internal`) are listed too, so no name is spelled twice.

The README's table of variables is `markdown_table()` (`python -m florwb_engine.settings`
prints it; tests/test_settings.py checks the README holds it).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from florwb_engine.errors import FlorwbError

T = TypeVar("T")

OFF = frozenset({"0", "false", "no", "off"})
ON = frozenset({"1", "true", "yes", "on"})


class SettingError(FlorwbError):
    """An environment variable whose value florwb cannot use where guessing would be wrong."""

    title = "A FLORWB_ variable has a wrong value"


@dataclass(frozen=True)
class Var(Generic[T]):
    """One environment variable: `parse` turns its text into the value (ValueError when it
    cannot); unset or blank, the value is `default`."""

    name: str
    default: T
    parse: Callable[[str], T]
    kind: str  # how the value is written, for the table and the one-line warning
    doc: str
    fallback: str = ""  # what a wrong value leads to, said with the warning
    strict: bool = False
    internal: bool = False  # set by florwb for its own child processes

    def shown_default(self) -> str:
        if self.default is None:
            return "unset"
        if isinstance(self.default, bool):
            return "1" if self.default else "0"
        if isinstance(self.default, int) and self.default >= 1 << 30:
            return f"{self.default} ({self.default >> 30} GiB)"
        if isinstance(self.default, int) and self.default >= 1 << 20:
            return f"{self.default} ({self.default >> 20} MiB)"
        return str(self.default)


_warned: set[tuple[str, str]] = set()


def read(var: Var[T], environ: Mapping[str, str] | None = None) -> T:
    """`var`'s value in `environ` (default: the process's environment, now)."""
    raw = (os.environ if environ is None else environ).get(var.name)
    if raw is None or not raw.strip():
        return var.default
    try:
        return var.parse(raw)
    except ValueError:
        if var.strict:
            raise SettingError(f"{var.name} must be {var.kind}, not {raw!r}") from None
        if not var.internal and (var.name, raw) not in _warned:
            _warned.add((var.name, raw))
            fallback = var.fallback or f"using {var.shown_default()}"
            print(f"florwb: {var.name}={raw!r} is not {var.kind}; {fallback}", file=sys.stderr)
        return var.default


# --- parsers ------------------------------------------------------------------------------


def _switch(raw: str) -> bool:
    """On unless it says off (0, false, no, off)."""
    return raw.strip().lower() not in OFF


def _seconds(raw: str) -> float:
    value = float(raw)
    if value != value:  # NaN
        raise ValueError(raw)
    return max(value, 0.0)


def _number(raw: str) -> float:
    return float(raw)


def _whole(raw: str) -> int:
    return int(raw.strip())


def _count(raw: str) -> int | None:
    """A positive whole number; anything else is none."""
    text = raw.strip()
    return int(text) if text.isdigit() and int(text) >= 1 else None


def _echo(raw: str) -> float | None:
    text = raw.strip().lower()
    if text in OFF:
        return None
    if text in ON:
        return 1.0
    seconds = float(text)
    return seconds if seconds > 0 else None


def _word(raw: str) -> str:
    return raw.strip().lower()


def _text(raw: str) -> str:
    return raw


def _path(raw: str) -> Path:
    return Path(raw).resolve()


def _json(raw: str) -> str:
    json.loads(raw)
    return raw


# --- the variables ------------------------------------------------------------------------

PROJECT: Var[Path | None] = Var(
    "FLORWB_PROJECT",
    None,
    _path,
    "a folder",
    "the project folder, instead of the one found from the current folder",
)
CKPT_BUDGET = Var(
    "FLORWB_CKPT_BUDGET",
    0.02,
    _number,
    "a number",
    "checkpoint cost allowed, as a share of compute time (`flor.set_checkpoint_budget`)",
)
CARRIED_MAX_BYTES = Var(
    "FLORWB_CARRIED_MAX_BYTES",
    64 << 20,
    _whole,
    "a number",
    "the bound on one checkpoint's loop-carried values, in bytes",
    fallback="using 64 MiB",
)
ECHO: Var[float | None] = Var(
    "FLORWB_ECHO",
    None,
    _echo,
    "a number of seconds",
    "print one summary line per outer iteration, at most one each N seconds (1: each second)",
    fallback="echo is off",
)
CAPTURE = Var(
    "FLORWB_CAPTURE",
    True,
    _switch,
    "0 or 1",
    "keep what the script prints and logs (`console` lines); 0 turns it off",
)
FLOR_CAPTURE = Var(
    "FLOR_CAPTURE", True, _switch, "0 or 1", "flordb's name for FLORWB_CAPTURE, also honoured"
)
CAPTURE_MAX_LINE = Var(
    "FLORWB_CAPTURE_MAX_LINE", 1000, _whole, "a number", "characters kept of one printed line"
)
CAPTURE_MAX_LINES = Var(
    "FLORWB_CAPTURE_MAX_LINES", 100_000, _whole, "a number", "printed lines kept of one run"
)
MIRROR_SAVES = Var(
    "FLORWB_MIRROR_SAVES",
    True,
    _switch,
    "0 or 1",
    "mirror the script's own `torch.save` files as checkpoints; 0 turns it off",
)
SYSTEM_SAMPLE_S = Var(
    "FLORWB_SYSTEM_SAMPLE_S",
    5.0,
    _seconds,
    "a number of seconds",
    "seconds between CPU, memory and GPU samples while recording; 0 turns sampling off",
)
BUFFER_MB = Var(
    "FLORWB_BUFFER_MB",
    256.0,
    _number,
    "a number",
    "MB of logged values held in memory while the journal cannot be written (a full disk)",
)
FINAL_RETRY_S = Var(
    "FLORWB_FINAL_RETRY_S",
    3.0,
    _seconds,
    "a number of seconds",
    "how long the run's last flush retries a full disk at exit",
)
SNAPSHOT_MAX_BYTES = Var(
    "FLORWB_SNAPSHOT_MAX_BYTES",
    2 << 20,
    _whole,
    "a whole number",
    "files larger than this (bytes) are left out of a run's code snapshot",
    strict=True,
)
SNAPSHOT_MAX_FILES = Var(
    "FLORWB_SNAPSHOT_MAX_FILES",
    20_000,
    _whole,
    "a whole number",
    "a code snapshot with more files than this is refused",
    strict=True,
)
LOCK_WAIT_S = Var(
    "FLORWB_LOCK_WAIT_S",
    120.0,
    _number,
    "a number of seconds",
    "how long a reader waits for another process's lock on the catalog before giving up",
)
REPLAY_CONTAIN = Var(
    "FLORWB_REPLAY_CONTAIN",
    "auto",
    _word,
    "auto, copy or namespace",
    "how replay workers' writes are kept off your files: copy forces copies, namespace "
    "refuses to run without the private mount namespace",
)
REPLAY_COPY_MAX = Var(
    "FLORWB_REPLAY_COPY_MAX",
    1 << 30,
    _whole,
    "a number of bytes",
    "the most a replay copies to keep its writes off your files (copy mode)",
    strict=True,
)
FORKSERVER_IDLE_S = Var(
    "FLORWB_FORKSERVER_IDLE_S",
    300.0,
    _seconds,
    "a number of seconds",
    "how long the warm replay worker server waits for the next replay; 0 turns it off",
)
SSH = Var(
    "FLORWB_SSH",
    "ssh",
    _text,
    "a command",
    "the ssh command `florwb pull HOST:PATH` runs, with its options (`ssh -F CONFIG`)",
)
REPLAY: Var[str | None] = Var(
    "FLORWB_REPLAY",
    None,
    _text,
    "a path",
    "the replay spec a worker runs; set by florwb, it makes the script replay",
    internal=True,
)
KWARGS: Var[str | None] = Var(
    "FLORWB_KWARGS",
    None,
    _json,
    "JSON",
    "the `--kwargs` pairs, handed to child processes of the script",
    internal=True,
)
REPLAY_THREADS: Var[int | None] = Var(
    "FLORWB_REPLAY_THREADS",
    None,
    _count,
    "a number",
    "a replay worker's torch threads",
    internal=True,
)
REPLAY_INTEROP_THREADS: Var[int | None] = Var(
    "FLORWB_REPLAY_INTEROP_THREADS",
    None,
    _count,
    "a number",
    "a replay worker's torch inter-op threads, as the run recorded them",
    internal=True,
)

VARIABLES: tuple[Var, ...] = tuple(
    value for value in list(globals().values()) if isinstance(value, Var)
)


def markdown_table() -> str:
    """The README's table: one row per variable, internal ones last."""
    rows = [
        "| variable | value | default | what it changes |",
        "|---|---|---|---|",
    ]
    for var in sorted(VARIABLES, key=lambda v: v.internal):
        doc = var.doc + (" (internal)" if var.internal else "")
        doc += "; a wrong value is refused" if var.strict else ""
        rows.append(f"| `{var.name}` | {var.kind} | {var.shown_default()} | {doc} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown_table())
