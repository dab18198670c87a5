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
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from florwb_engine import settings
from florwb_engine.atomic import write_atomic
from florwb_engine.errors import FlorwbError
from florwb_engine.journal import SUFFIX
from florwb_engine.project import STORE_DIRNAME, checkpoint_dir, journal_dir

# a recorded rank's journal: `<run>.rank<r>.journal` (replay journals start `replay-`)
_RANK_JOURNAL = re.compile(r"^(?!replay-)(?P<run>.+)\.rank(?P<rank>\d+)" + re.escape(SUFFIX) + "$")
_REMOTE = re.compile(r"^(?P<host>[^/:]+):(?P<path>.*)$")
_BLOCK = 1 << 20


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
            _fetch(match["host"], match["path"], copy)
            return _merge(project, copy, source)
    return _merge(project, Path(source), source)


def _fetch(host: str, path: str, dest: Path) -> None:
    """The remote copy's rank journals, then the checkpoint folders of their runs, as tar
    streams over ssh (`FLORWB_SSH`, default `ssh`: a command line, e.g. `ssh -i KEY`), with
    their modification times."""
    store = shlex.quote(f"{path.rstrip('/') or '/'}/{STORE_DIRNAME}")
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


def _untar(host: str, command: str, dest: Path) -> None:
    ssh = shlex.split(settings.read(settings.SSH))
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile() as stream:
        proc = subprocess.run([*ssh, host, command], stdout=stream, stderr=subprocess.PIPE)
        if proc.returncode != 0:
            why = proc.stderr.decode(errors="replace").strip()[-500:]
            raise PullError(f"reading {host} failed ({proc.returncode}): {why}")
        stream.seek(0)
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            tar.extractall(dest, filter="data")  # no path outside dest, no devices


def _merge(project: Path, other: Path, source: str) -> PullReport:
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
