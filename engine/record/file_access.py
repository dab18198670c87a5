"""Which project files a recording run read, and which it only wrote.

A replay must see the files of the run's start, not its end: a script that resumes from
`snapshot.pt` when it exists, and writes it every epoch, resumed in its replay from the
run's own last epoch, because the recorded run had left the file behind. And a file the
run only wrote (`model.pt`, overwritten every run) is no input of the run: reporting it
"changed since the run" is a false alarm. So while a run records, a Python audit hook
(`sys.addaudithook`) notes each project file's first access: a read or a write (opened
to be emptied or created: the run's own output), with the file's size and modification
time just before (None: it did not exist, so the run created it). A replay hides what the
run created and checks what it read (replay/run_inputs.py). `torch.save` to a path writes
from C++ and raises no audit event; the mirrored `torch.save` (save_mirror.py) notes its
path here.

Audit hooks are global and cannot be removed, and they fire for every `open` in the
process, so the hook is kept trivial: one string comparison for every other event, one
dict lookup for a path seen before; only a path's first access costs a `getcwd` and, for
a read, a `stat`. At most MAX_PATHS paths are kept; the new ones leave with the journal's
next flush as one `files` event, off the training thread.

What is not seen (README, "Files as the run saw them"): reads and writes made from C or
C++ without Python's `open` (torch.save without the mirror, `np.memmap`'s buffer once
opened, HDF5, OpenCV, a DataLoader's C++ readers), accesses in child processes (DataLoader
workers), and anything before the run's first florwb call. A file the replay must hide is
one the run wrote first; a file nobody saw written is left as it is.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

from florwb_engine.journal_events import Files

MAX_PATHS = 10_000
READ, WRITTEN = "read", "written"
OWN_THREADS = "florwb-"  # the recorder's threads (snapshot, flusher, checkpoint writer)

# os.open flags that create or empty a file: what was there before is not read
_FRESH = os.O_TRUNC | getattr(os, "O_EXCL", 0)
_WRITES = os.O_WRONLY | os.O_RDWR | os.O_APPEND


class _State:
    def __init__(self, project: Path, skip: list[Path]) -> None:
        self.prefix = str(project) + os.sep
        self.skip = tuple(str(p) + os.sep for p in skip)
        self.seen: dict[str, str] = {}  # raw path as opened -> its first access
        self.kept: set[str] = set()  # project-relative paths recorded
        self.new: list[list] = []  # [path, access, size, mtime_ns] not yet in an event
        self.lock = threading.Lock()
        self.dropped = 0


_STATE: _State | None = None
_HOOKED = False


def install(project: Path, skip: list[Path]) -> None:
    """Start noting first accesses of files under `project` (not under `skip`: the store,
    `.git`). The hook is added once per process; a later run reuses it."""
    global _STATE, _HOOKED
    root = project.resolve()
    # a virtual environment inside the project is the interpreter's, not the run's files
    interpreter = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix)]
    _STATE = _State(root, [p.resolve() for p in (*skip, *interpreter)])
    if not _HOOKED:
        sys.addaudithook(_hook)
        _HOOKED = True


def uninstall() -> None:
    """Stop noting (the hook stays: audit hooks cannot be removed; it returns at once)."""
    global _STATE
    _STATE = None


def disable_in_child() -> None:
    """A forked child (a DataLoader worker) keeps nothing: its parent's run is not its own."""
    uninstall()


def note_write(path: Any) -> None:
    """A write the audit hook cannot see (torch.save writes from C++)."""
    state = _STATE
    if state is not None and isinstance(path, (str, os.PathLike)):
        _first_access(state, os.fspath(path), WRITTEN)


def _hook(event: str, args: tuple) -> None:
    if event != "open":
        return
    state = _STATE
    if state is None:
        return
    path = args[0]
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    elif not isinstance(path, str):
        return  # a file descriptor: its path was seen when it was opened
    if path in state.seen:
        return
    mode, flags = args[1], args[2] if len(args) > 2 else 0
    _first_access(state, path, *_access(mode, flags))


def _access(mode: Any, flags: Any) -> tuple[str, bool]:
    """READ when what the file held before can matter to the script, WRITTEN when the open
    empties it; and whether the open creates a missing file (`a`, O_CREAT)."""
    flags = flags if isinstance(flags, int) else 0
    if isinstance(mode, str):
        fresh = "w" in mode or "x" in mode
        return (WRITTEN if fresh else READ), fresh or "a" in mode or bool(flags & os.O_CREAT)
    if flags & _FRESH:
        return WRITTEN, True
    return READ, bool(flags & os.O_CREAT and flags & _WRITES)


def _first_access(state: _State, raw: str, access: str, creates: bool = True) -> None:
    if threading.current_thread().name.startswith(OWN_THREADS):
        return  # florwb's own reading (the snapshot fingerprints left-out files): not the run's
    try:
        full = os.path.normpath(os.path.join(os.getcwd(), raw))
    except OSError:  # the working folder was removed
        return
    if len(state.seen) > 4 * MAX_PATHS:  # many one-off names (temp files): start over
        state.seen.clear()
    if (
        not full.startswith(state.prefix)
        or full.startswith(state.skip)
        or "__pycache__" in full
        or "site-packages" in full
    ):
        state.seen[raw] = "outside"
        return
    size = mtime = None  # what the file was before this access; None: it did not exist
    try:
        st = os.stat(full)
    except OSError:
        if access == READ and not creates:
            return  # opening it fails: nothing read; a later access decides
        access = WRITTEN  # the open creates it: the run's own file
    else:
        size, mtime = st.st_size, st.st_mtime_ns
    state.seen[raw] = access
    relative = full[len(state.prefix) :]
    with state.lock:
        if relative in state.kept:
            return
        if len(state.kept) >= MAX_PATHS:
            state.dropped += 1
            return
        state.kept.add(relative)
        state.new.append([relative, access, size, mtime])


def drain(events: list) -> None:
    """Move the first accesses noted since the last call into one `files` event."""
    state = _STATE
    if state is None or not (state.new or state.dropped):
        return
    with state.lock:
        new, state.new = state.new, []
        dropped, state.dropped = state.dropped, 0
    events.append(Files(new, dropped).to_dict())
