"""The events a run journals, as types the writer builds and the reader decodes.

record/ builds them and appends `event.to_dict()` to the run's event buffer; the journal
keeps dicts (marshal'd, see journal.py), so journals written before these types existed
read the same. store/ingest.py turns each dict back into its type with `decode` and applies
it through one table, type -> handler, that must name every type here.

A new event: a dataclass below with `kind` and `@event`, built where it happens, and its
handler in store/ingest.py's `HANDLERS`. Fields with a default may be missing from older
journals; a field that is None is left out of the dict (older readers read a missing field
as None). A field a newer writer added is ignored by an older reader; an event kind it
does not know is counted and skipped (`decode` returns an `Unknown`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

# The issue a recording journals when its journal was deleted under it, with the values it
# had written there: a catalog that read them before takes those off (store/ingest.py).
JOURNAL_DELETED = "journal deleted during the run"


class Event:
    """A journal event: `kind` names it on disk."""

    __slots__ = ()
    kind: ClassVar[str]
    _fields: ClassVar[tuple[str, ...]]

    def to_dict(self) -> dict[str, Any]:
        """The event as the journal holds it: `kind` first, fields that are None left out."""
        out: dict[str, Any] = {"kind": self.kind}
        for name in self._fields:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


E = TypeVar("E", bound=type[Event])
KINDS: dict[str, type[Event]] = {}  # kind -> its type: what `decode` knows


def event(cls: E) -> E:
    """Register an event type under its `kind` (once)."""
    if cls.kind in KINDS:
        raise ValueError(f"event kind {cls.kind!r} defined twice")
    cls._fields = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    KINDS[cls.kind] = cls
    return cls


@dataclass(slots=True)
class Unknown(Event):
    """An event of a kind this florwb does not know (a newer writer's): skipped, counted."""

    kind: ClassVar[str] = "unknown"
    _fields: ClassVar[tuple[str, ...]] = ()
    name: object = None


def decode(raw: dict) -> Event:
    """The typed event of a journal's dict; fields it does not know are ignored, a missing
    field without a default raises TypeError (the chunk has another shape)."""
    kind = raw.get("kind")
    cls = KINDS.get(kind) if type(kind) is str else None
    if cls is None:
        return Unknown(kind)
    known = cls._fields
    return cls(**{k: v for k, v in raw.items() if k in known})


@event
@dataclass(slots=True)
class Start(Event):
    """The run's first event: which run, its script and process. `source` is `record`,
    or the replay id of a replay worker's journal."""

    kind: ClassVar[str] = "start"
    run_id: str
    source: str = "record"
    script: str | None = None
    argv: list = field(default_factory=list)
    cwd: str | None = None
    host: str | None = None
    pid: int | None = None
    pid_ticks: int | None = None
    python: str | None = None
    time: float | None = None
    context: Any = None  # record/context.py's figures at the start (store/run_context.py)
    rank: dict | None = None  # a rank of a launch (record/ranks.py Rank.to_event)


@event
@dataclass(slots=True)
class Version(Event):
    """The code version the run's files were stored as (versions/), and its git state."""

    kind: ClassVar[str] = "version"
    version: str
    n_files: int | None = None
    n_bytes: int | None = None
    skipped: list = field(default_factory=list)  # (path, size, reason) left out
    inputs: list = field(default_factory=list)  # (path, size, mtime_ns, blob) fingerprinted
    git_head: str | None = None
    git_branch: str | None = None
    git_dirty: bool | None = None
    notebook_code: str | None = None  # the executed cells' file in the version (notebooks)


@event
@dataclass(slots=True)
class VersionError(Event):
    kind: ClassVar[str] = "version_error"
    error: str | None = None


@event
@dataclass(slots=True)
class Arg(Event):
    kind: ClassVar[str] = "arg"
    name: str
    value: Any = None  # as record/values.py encodes it


@event
@dataclass(slots=True)
class Issues(Event):
    """What the recording process replaced, dropped or could not write: (kind, detail, n)."""

    kind: ClassVar[str] = "issues"
    counts: list = field(default_factory=list)


@event
@dataclass(slots=True)
class Files(Event):
    """First accesses of project files (record/file_access.py)."""

    kind: ClassVar[str] = "files"
    paths: list = field(default_factory=list)  # (path, access, size, mtime_ns)
    dropped: int = 0  # accesses past the first 10,000 not noted


@event
@dataclass(slots=True)
class Lineage(Event):
    """A flor.load_checkpoint of another run's checkpoint (record/lineage.py)."""

    kind: ClassVar[str] = "lineage"
    name: str | None = None
    call: int = 0
    parent: str | None = None
    checkpoint: str | None = None
    checkpoint_kind: str | None = None
    loop: str | None = None
    iteration: int | None = None
    path: str | None = None


@event
@dataclass(slots=True)
class System(Event):
    """CPU, memory and GPU figures sampled while recording (record/system.py), or why the
    sampler stopped."""

    kind: ClassVar[str] = "system"
    time: float | None = None
    rank: int | None = None
    values: dict | None = None
    error: str | None = None


@event
@dataclass(slots=True)
class Checkpoint(Event):
    """A checkpoint written (flor.checkpointing, or the script's own torch.save mirrored)."""

    kind: ClassVar[str] = "checkpoint"
    loop: str
    iteration: int
    path: str
    ctx_id: int | None = None
    bytes: int | None = None
    snapshot_s: float | None = None
    write_s: float | None = None
    time: float | None = None
    after_inner: int | None = None  # inner loops ended when it was taken (record/checkpoint.py)


@event
@dataclass(slots=True)
class Loop(Event):
    """A flor.loop (or flor.iteration) entered: the entry id of its iterations' ctx_ids and
    the outer loops' coordinates."""

    kind: ClassVar[str] = "loop"
    entry: int
    names: Any  # the loop path's names, outermost first
    outer: Any  # the outer loops' iterations
    total: int | None = None


@event
@dataclass(slots=True)
class Console(Event):
    """Printed and logged lines (record/capture.py): (seq, ctx_id, channel, text, n), and
    repeat counts added to lines sent before."""

    kind: ClassVar[str] = "console"
    lines: list = field(default_factory=list)
    more: list = field(default_factory=list)


@event
@dataclass(slots=True)
class End(Event):
    """The run's (or rank's) last event: how it ended."""

    kind: ClassVar[str] = "end"
    status: str
    exception: str | None = None
    message: str | None = None
    time: float | None = None
    elapsed_s: float | None = None  # on the monotonic clock: a stepped wall clock is harmless
    context: Any = None
    world_size: int | None = None  # a spawned rank learns it after it started
    signal: str | None = None  # a rank stopped by a signal it does not survive (SIGTERM)
