"""`florwb pull HOST:PATH | PATH`: the rank journals another copy of the project holds,
merged into this one's runs.

A torchrun launch over several nodes without a shared filesystem leaves each node's ranks'
journals (`<run>.rank<r>.journal`, record/ranks.py) and their RNG states
(`checkpoints/<run>/rank<r>/`) in that node's copy of the project; rank 0's node holds the
code version and the checkpoints. Every rank of the launch agreed on one run id, so copying
the other nodes' journals beside this one's is all a merge needs: ingestion reads each
journal into the run its start event names, like any journal written here.

The copy is idempotent and never loses bytes: a journal this copy lacks is added, one whose
bytes this copy holds a prefix of (the remote rank wrote more since) replaces it, one whose
bytes are already here (or more of them) is left alone, and one that differs otherwise is
named as a conflict and not touched. Files are written whole (temp file, rename) and keep
their modification time: a killed rank's end is its journal's last write (store/run_ranks.py).
A `HOST:PATH` source is first copied over ssh (tar streams) into a private folder.

A rank on another host that dies without an end event leaves nothing here to tell: its
process is not on this machine and its writer's lock (journal.JournalWriter) is on the
other's. So a `HOST:PATH` pull first asks that host, before it reads a byte, which of its
rank journals still have a writer (a stdlib-only Python probe of the writer's lock, as
journal.writer_alive does here), and keeps the answer beside each journal it merged
(`<journal>.pulled`: the host that answered, live or gone, the journal's size then); the
journal's bytes are never changed. A journal whose writer was gone when asked held all it
ever will, so ingestion reads its rank as killed, ended at its last write
(`pull_answers.writer_gone`); one still written reads as running until a later pull says otherwise.
The answer counts only for a rank recorded on the host that gave it and only while the
journal here is the size it was then. A path source is not asked: its ranks recorded on
this host are checked here (their processes), those of another host read as running.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from florwb_engine import settings
from florwb_engine.atomic import write_atomic
from florwb_engine.errors import FlorwbError
from florwb_engine.journal import SUFFIX
from florwb_engine.project import STORE_DIRNAME, checkpoint_dir, journal_dir
from florwb_engine.store.pull_answers import answer_path

# a recorded rank's journal: `<run>.rank<r>.journal` (replay journals start `replay-`)
_RANK_JOURNAL = re.compile(r"^(?!replay-)(?P<run>.+)\.rank(?P<rank>\d+)" + re.escape(SUFFIX) + "$")
_REMOTE = re.compile(r"^(?P<host>[^/:]+):(?P<path>.*)$")
_BLOCK = 1 << 20
# Beside a pulled journal: what its host answered about its writer (module doc).
# Run on the other host in its store folder, with the Python found there (no florwb needed):
# {"host": name, "journals": {file: ["live" | "gone", size]}}. An empty journal gets no
# answer (its writer may be between creating it and locking it), nor one on a filesystem
# without locks.
_WRITERS = r"""
import fcntl, glob, json, os, socket
found = {}
for p in glob.glob("journal/*.rank*.journal"):
    try:
        fd = os.open(p, os.O_RDONLY)
    except OSError:
        continue
    try:
        size = os.fstat(fd).st_size
        if size:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            found[os.path.basename(p)] = ["gone", size]
    except BlockingIOError:
        found[os.path.basename(p)] = ["live", size]
    except OSError:
        pass
    finally:
        os.close(fd)
print(json.dumps({"host": socket.gethostname(), "journals": found}))
"""


class PullError(FlorwbError):
    """The source cannot be read: not a florwb project, or ssh failed."""


@dataclass
class PullReport:
    """What a pull did, journal by journal (file names)."""

    added: list[str] = field(default_factory=list)
    grown: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)  # differ from ours: not touched
    files: int = 0  # checkpoint and RNG files added (never replaced)
    runs: dict[str, list[int]] = field(default_factory=dict)  # run id -> ranks pulled
    notes: list[str] = field(default_factory=list)
    writing: list[str] = field(default_factory=list)  # still written on their host when asked

    @property
    def changed(self) -> bool:
        return bool(self.added or self.grown or self.files)


def pull(project: Path, source: str) -> PullReport:
    """Merge the rank journals (and their checkpoint files) of the project copy at
    `source` (a path, or `HOST:PATH` reached over ssh) into `project`."""
    match = _REMOTE.match(source)
    if match and not Path(source).exists():
        with tempfile.TemporaryDirectory(prefix="florwb-pull-") as tmp:
            copy = Path(tmp)
            notes: list[str] = []
            writers = _fetch(match["host"], match["path"], copy, notes)
            report = _merge(project, copy, source, writers)
            report.notes += notes
            return report
    return _merge(project, Path(source), source, None)


@dataclass
class Writers:
    """What the other host answered before its journals were read: its name, and for each
    rank journal whether a process there still writes it ("live" or "gone") and its size."""

    host: str
    journals: dict[str, tuple[str, int]]


def _fetch(host: str, path: str, dest: Path, notes: list[str]) -> Writers | None:
    """Which of the remote copy's rank journals are still written (asked first: a writer
    gone then wrote its last byte before the copy), then those journals and the checkpoint
    folders of their runs, as tar streams over ssh (`FLORWB_SSH`, default `ssh`: a command
    line, e.g. `ssh -F CONFIG`), with their modification times."""
    store = shlex.quote(f"{path.rstrip('/') or '/'}/{STORE_DIRNAME}")
    writers = _ask_writers(host, store, notes)
    journals = "journal/*.rank*" + SUFFIX
    _untar(host, f"cd {store} && tar --format=pax -cf - {journals}", dest / STORE_DIRNAME)
    runs = sorted(
        {m["run"] for f in journal_dir(dest).glob("*") if (m := _RANK_JOURNAL.match(f.name))}
    )
    if runs:
        folders = " ".join(shlex.quote(f"checkpoints/{run}") for run in runs)
        _untar(
            host,
            f'cd {store} && for d in {folders}; do [ -d "$d" ] && echo "$d"; done '
            "| tar --format=pax -cf - -T -",
            dest / STORE_DIRNAME,
        )
    return writers


def _ask_writers(host: str, store: str, notes: list[str]) -> Writers | None:
    """The other host's answer (`_WRITERS`); None, with a note, when it gives none (no
    python3 there): its ranks without an end then read as running."""
    command = f"cd {store} && python3 -c {shlex.quote(_WRITERS)}"
    proc = _ssh(host, command, subprocess.PIPE)
    try:
        answer = json.loads(proc.stdout)
        writers = Writers(
            str(answer["host"]),
            {str(k): (str(v[0]), int(v[1])) for k, v in answer["journals"].items()},
        )
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        why = _last_line(proc.stderr) or "no answer"
        notes.append(
            f"{host} could not say which of its journals are still written ({why}): "
            "its ranks without an end read as running until a pull that can"
        )
        return None
    return writers


def _untar(host: str, command: str, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile() as stream:
        proc = _ssh(host, command, stream)
        if proc.returncode != 0:
            raise PullError(f"reading {host} failed ({proc.returncode}): {_last_line(proc.stderr)}")
        stream.seek(0)
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            tar.extractall(dest, filter="data")  # no path outside dest, no devices


_SSH_FAILED = 255  # ssh's own exit status: it could not connect or log in


def _ssh(host: str, command: str, stdout) -> subprocess.CompletedProcess:
    """`command` run on `host` through FLORWB_SSH; ssh itself failing (no connection, no
    login) is a PullError naming its reason in one line."""
    ssh = shlex.split(settings.read(settings.SSH))
    try:
        proc = subprocess.run(
            [*ssh, host, command], stdin=subprocess.DEVNULL, stdout=stdout, stderr=subprocess.PIPE
        )
    except OSError as exc:  # FLORWB_SSH names no program that runs
        raise PullError(f"cannot run {ssh[0] if ssh else 'ssh'}: {exc.strerror}") from None
    if proc.returncode == _SSH_FAILED:
        raise PullError(f"ssh to {host} failed: {_last_line(proc.stderr) or 'no reason given'}")
    return proc


def _last_line(stderr: bytes) -> str:
    """The last line a command wrote to stderr (ssh ends its lines with CR LF), cut short."""
    lines = stderr.decode(errors="replace").replace("\r", "").strip().splitlines()
    return lines[-1].strip()[-300:] if lines else ""


def _merge(project: Path, other: Path, source: str, writers: Writers | None) -> PullReport:
    theirs = journal_dir(other)
    if not theirs.is_dir():
        raise PullError(f"{source}: no florwb journals there ({STORE_DIRNAME}/journal)")
    if other.resolve() == project.resolve():
        raise PullError(f"{source} is this project")
    ours = journal_dir(project)
    ours.mkdir(parents=True, exist_ok=True)
    report = PullReport()
    for path in sorted(theirs.iterdir()):
        match = _RANK_JOURNAL.match(path.name)
        if match is None or not path.is_file():
            continue
        run_id, rank = match["run"], int(match["rank"])
        outcome = _merge_one(path, ours / path.name)
        getattr(report, outcome).append(path.name)
        report.runs.setdefault(run_id, []).append(rank)
        answer = writers.journals.get(path.name) if writers is not None else None
        if writers is not None and answer is not None and outcome != "conflicts":
            state = _keep_answer(ours / path.name, writers.host, *answer, path.stat().st_size)
            if state == "live":
                report.writing.append(path.name)
                report.notes.append(
                    f"{path.name} is still written on {writers.host}: its rank reads as "
                    "running; pull again for what it writes next"
                )
    for run_id, pulled in report.runs.items():
        report.files += _add_missing(
            checkpoint_dir(other) / run_id, checkpoint_dir(project) / run_id
        )
        if 0 in pulled and f"{run_id}.rank0{SUFFIX}" in report.added:
            report.notes.append(
                f"run {run_id}: rank 0 came from {source}, whose copy holds the run's code "
                "version; replay it there (pull the other nodes into rank 0's copy)"
            )
    return report


def _keep_answer(journal: Path, host: str, state: str, size: int, copied: int) -> str:
    """The host's answer kept beside `journal` (`<journal>.pulled`), what it says. A writer
    said gone whose journal was copied longer than it was then was not gone: kept as live.
    The same answer again leaves the file as it was (when it was first given)."""
    if state != "gone" or copied != size:
        state = "live"
    answer = {"host": host, "writer": state, "size": size}
    kept = answer_path(journal)
    try:
        before = json.loads(kept.read_text())
    except (OSError, ValueError):
        before = None
    if isinstance(before, dict) and all(before.get(k) == v for k, v in answer.items()):
        return state
    answer["asked"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    data = json.dumps(answer).encode()
    write_atomic(kept, lambda f: f.write(data), durable=False)
    return state


def _merge_one(theirs: Path, ours: Path) -> str:
    """added, grown, unchanged or conflicts: what this journal's merge did."""
    if not ours.exists():
        _copy_whole(theirs, ours)
        return "added"
    their_size, our_size = theirs.stat().st_size, ours.stat().st_size
    shorter, longer = (theirs, ours) if their_size <= our_size else (ours, theirs)
    if not _is_prefix(shorter, longer):
        return "conflicts"
    if their_size > our_size:
        _copy_whole(theirs, ours)
        return "grown"
    return "unchanged"


def _is_prefix(shorter: Path, longer: Path) -> bool:
    with open(shorter, "rb") as a, open(longer, "rb") as b:
        while block := a.read(_BLOCK):
            if b.read(len(block)) != block:
                return False
    return True


def _copy_whole(src: Path, dest: Path) -> None:
    """`src` at `dest`, appearing whole (atomic.write_atomic), with `src`'s times."""
    with open(src, "rb") as theirs:
        write_atomic(dest, lambda out: shutil.copyfileobj(theirs, out), durable=False)
    shutil.copystat(src, dest)


def _add_missing(src: Path, dest: Path) -> int:
    """Files under `src` that `dest` lacks, copied; files already there are never replaced."""
    if not src.is_dir():
        return 0
    added = 0
    for path in sorted(src.rglob("*")):
        target = dest / path.relative_to(src)
        if path.is_file() and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            _copy_whole(path, target)
            added += 1
    return added
