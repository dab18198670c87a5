"""Read snapshots: user SQL reads a private copy of the catalog, never the catalog itself.

DuckDB locks its file for one writer or many readers, and every florwb reader ingests
journals first (a write). A result that is streamed to a slow pipe or paged through in the
workbench would keep that lock for as long as its reader takes, and every other reader,
ingestion included, would wait on it. So a user query first ingests in a short write
session, then, still inside it (so nothing can write in between), checkpoints the catalog
and takes a snapshot of its bytes: `florwb.duckdb.read-<identity>`, named after the
catalog's inode, size and modification time, copied once and shared by every reader of the
same catalog state. Each reader gets a hard link of its own
(`florwb.duckdb.read-<identity>.<pid>-<n>`) and opens that, read-only, for as long as it
likes; the catalog is held only for the checkpoint and the copy (milliseconds for a small
catalog, about 1 s per GB), never while a result streams.

When a reader is done its link goes; the last one out removes the shared name too (the link
count says who is last; a reader that links while another removes either gets the file or
copies it again). Links of killed readers are removed by the next snapshot taken.

Readers that ask at once share one ingestion: every session numbers its ingestion in
`florwb.duckdb.ingests` before it ingests (under the catalog's lock, so the numbers are
never lost or reordered), and a snapshot says there which ingestion it holds. A reader
notes the number when it asks; while it waits for the catalog, a snapshot whose ingestion
began after that holds everything it asked for, so it links that one and never takes the
catalog itself. However many readers wait, each waits at most for the ingestion under way
and the next one. A reader does not wait at all when the latest snapshot is under FRESH_S
old, still read by someone, nothing but another snapshot's ingestion opened the catalog
since, and only running recordings of other processes appended to their journals
(`_current`); a reader that waits takes the snapshot of the ingestion under way when it
passes that test once published.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from florwb_engine import journal, processes
from florwb_engine import project as projects
from florwb_engine.store import pull_answers, repair
from florwb_engine.store.db import (
    DB_FILENAME,
    Served,
    StoreError,
    exclusive_here,
    no_progress_bar,
    served_by,
)
from florwb_engine.store.schema import RECORDED

if TYPE_CHECKING:
    from florwb_engine.store.catalog import Store

PREFIX = DB_FILENAME + ".read-"
# JSON: sessions begun ("began"), the one the latest snapshot holds ("held"), that
# snapshot's name, when its ingestion began, the journal sizes it holds, their live writers
INGESTS = DB_FILENAME + ".ingests"
# How old (from when its ingestion began) the latest snapshot may be and still serve a
# reader without an ingestion of its own, when only running recordings appended since:
# their values show at most this much later.
FRESH_S = 2.0
# A reader's link, its copy under way, DuckDB's spill folder beside it.
_PRIVATE = re.compile(re.escape(PREFIX) + r"[0-9-]+\.(\d+)-\d+(?:\.copying|\.tmp)?$")
_serial = itertools.count()
_before = threading.local()  # the record as a session of this thread found it
_serial_lock = threading.Lock()


def _private_name(shared: Path) -> Path:
    with _serial_lock:
        n = next(_serial)
    return shared.with_name(f"{shared.name}.{os.getpid()}-{n}")


def _identity(catalog: Path) -> str:
    st = catalog.stat()
    return f"{st.st_ino}-{st.st_size}-{st.st_mtime_ns}"


def take(store: Store) -> Path:
    """A private, read-only-to-be copy of the catalog as of now, every journal ingested;
    `release` it when done. The catalog is held for the ingestion, a checkpoint and (when
    the catalog changed since the last snapshot) one copy of the file; not at all when the
    latest snapshot is still current (`_current`) or another reader's snapshot, from an
    ingestion that began after this call, comes first. Inside `store.pinned()` it is the
    pinned snapshot, linked again."""
    pinned = store.pinned_snapshot()
    if pinned is not None and _same_catalog(pinned, store.dir / DB_FILENAME):
        return _linked_again(pinned)
    latest = _record(store.dir)
    current = _current(store, latest)
    if current is not None:
        return current
    asked = int(latest.get("began", 0))

    def ready() -> Path | None:  # between tries for the catalog
        return _served(store.dir, asked) or _current(store, _record(store.dir))

    try:
        with served_by(ready):
            return _ingested_and_taken(store)
    except Served as served:
        assert isinstance(served.value, Path)
        return served.value


def _ingested_and_taken(store: Store) -> Path:
    _before.taking = True
    try:
        with exclusive_here(store.dir), store.session() as con, repair.guarded(store.dir):
            return _taken(store, con)
    finally:
        _before.taking = False


def _taken(store: Store, con: duckdb.DuckDBPyConnection) -> Path:
    """Inside the session: checkpoint, copy (or link), and say what the snapshot holds."""
    catalog = store.dir / DB_FILENAME
    con.execute("CHECKPOINT")  # every committed row in the file, the WAL empty
    shared = catalog.with_name(PREFIX + _identity(catalog))
    private = _private_name(shared)
    _remove_stale(store.dir, shared)
    try:
        if shared.stat().st_size != catalog.stat().st_size:  # a copy cut short
            shared.unlink()
        os.link(shared, private)
    except FileNotFoundError:
        _copy(catalog, shared, private)
    except OSError:  # a file system without hard links: a copy of its own
        _copy(catalog, None, private)
        return private
    if _taken_unchanged(store.dir, shared.name[len(PREFIX) :]):
        return private
    began = int(_record(store.dir).get("began", 0))  # this session's: it holds the catalog
    latest = {
        "began": began,
        "held": began,
        "snapshot": shared.name,
        "at": _before.at,
        "sizes": _before.sizes,
        "live": _live_writers(con),
    }
    with contextlib.suppress(OSError):  # a full disk: it serves its own reader only
        _write_record(store.dir, latest)
    return private


def begin_ingestion(store_dir: Path) -> None:
    """Number the session about to ingest (and maybe write); only while the catalog is held
    for writing, so no number is lost and none comes out of order. What the record held
    before is kept for `_taken_unchanged`."""
    try:
        previous: bytes | None = (store_dir / INGESTS).read_bytes()
    except FileNotFoundError:
        previous = None
    try:
        catalog = _identity(store_dir / DB_FILENAME)
    except FileNotFoundError:  # made by this session
        catalog = None
    _before.record = (store_dir, previous, catalog)
    # what the ingestion about to run holds at least, and when
    _before.at, _before.sizes = time.time(), _journal_sizes(store_dir)
    record = _record(store_dir)
    record["began"] = int(record.get("began", 0)) + 1
    if getattr(_before, "taking", False):  # a snapshot's session: it only ingests
        record["taking"] = record["began"]
    try:
        _write_record(store_dir, record)
    except OSError:  # a full disk: then no snapshot serves anyone but its own reader
        (store_dir / INGESTS).unlink(missing_ok=True)


def _taken_unchanged(store_dir: Path, identity: str) -> bool:
    """A snapshot session that changed nothing (the catalog is the file it was when the
    session began) leaves the record as it found it: a read with nothing to ingest writes
    nothing anywhere. Readers that noted its number meanwhile are not served by it (they
    wait on, or read again themselves): never one too early. False when it changed
    something."""
    where, before, catalog = getattr(_before, "record", (None, None, None))
    if where != store_dir or catalog != identity:
        return False
    with contextlib.suppress(OSError):
        if before is None:
            (store_dir / INGESTS).unlink(missing_ok=True)
        else:
            temp = store_dir / f".{INGESTS}.{os.getpid()}-{threading.get_ident()}.tmp"
            try:
                temp.write_bytes(before)
                os.replace(temp, store_dir / INGESTS)
            finally:
                temp.unlink(missing_ok=True)
    return True


def _record(store_dir: Path) -> dict[str, Any]:
    try:
        record = json.loads((store_dir / INGESTS).read_text())
    except (FileNotFoundError, ValueError):  # none yet, or not ours: numbering starts again
        return {}
    return record if isinstance(record, dict) else {}


def _write_record(store_dir: Path, record: dict[str, Any]) -> None:
    temp = store_dir / f".{INGESTS}.{os.getpid()}-{threading.get_ident()}.tmp"
    try:
        temp.write_text(json.dumps(record))
        os.replace(temp, store_dir / INGESTS)
    finally:
        temp.unlink(missing_ok=True)


def _journal_sizes(store_dir: Path) -> dict[str, int]:
    """Each journal's size, and when each pulled journal's answer about its writer was
    written (its mtime, ns): a pull can turn a rank killed without a journal growing."""
    sizes = {}
    answer = journal.SUFFIX + pull_answers.PULLED
    with contextlib.suppress(FileNotFoundError):
        with os.scandir(projects.journal_dir(store_dir.parent)) as entries:
            for entry in entries:
                try:
                    if entry.name.endswith(journal.SUFFIX):
                        sizes[entry.name] = entry.stat().st_size
                    elif entry.name.endswith(answer):
                        sizes[entry.name] = entry.stat().st_mtime_ns
                except FileNotFoundError:  # removed since listed
                    continue
    return sizes


def _live_writers(con: duckdb.DuckDBPyConnection) -> dict[str, list]:
    """The journals of recordings still running, each with its writer (host, pid, its
    start ticks): while that process lives, what it appends is a live run's next values."""
    rows = con.execute(
        "SELECT j.file, coalesce(k.host, r.host), coalesce(k.pid, r.pid), "
        "coalesce(k.pid_ticks, r.pid_ticks) FROM journals j JOIN runs r USING (run_id) "
        "LEFT JOIN run_ranks k ON k.run_id = j.run_id AND k.rank = j.rank "
        "WHERE NOT coalesce(j.done, false) AND j.source = ? "
        "AND coalesce(k.status, r.status) = 'running'",
        [RECORDED],
    ).fetchall()
    return {file: [host, pid, ticks] for file, host, pid, ticks in rows if pid is not None}


def _current(store: Store, latest: dict[str, Any]) -> Path | None:
    """A link of its own to the latest snapshot when it still holds everything a reader
    asking now must see: nothing but another snapshot's ingestion began since it was taken
    and the catalog file is the one it copied, it is at most FRESH_S old, and since then
    only running recordings of other processes appended to their journals (their next
    values, which a reader sees a moment later anyway)."""
    name, began, held = latest.get("snapshot"), latest.get("began"), latest.get("held")
    if not isinstance(name, str) or not isinstance(held, int):
        return None
    # no session since, or only another snapshot's ingestion under way (what it ingests is
    # checked below like any journal): any other session may write what a reader must see
    if began != held and not (began == held + 1 and latest.get("taking") == began):
        return None
    if abs(time.time() - float(latest.get("at", 0))) > FRESH_S:
        return None
    try:  # the catalog is still the file it copied (nothing wrote it, nothing replaced it)
        if name != PREFIX + _identity(store.dir / DB_FILENAME):
            return None
    except FileNotFoundError:
        return None
    sizes, live = latest.get("sizes", {}), latest.get("live", {})
    now = _journal_sizes(store.dir)
    if now.keys() != sizes.keys():
        return None
    host = socket.gethostname()
    for file, size in now.items():
        if size == sizes[file]:
            continue
        writer = live.get(file)
        if writer is None or writer[0] != host or writer[1] == os.getpid():
            return None
        if processes.is_gone(int(writer[1]), writer[2]):
            return None
    return _linked(store.dir, name)


def _served(store_dir: Path, asked: int) -> Path | None:
    """A link of its own to a snapshot whose ingestion began after `asked`, if one exists."""
    latest = _record(store_dir)
    name = latest.get("snapshot")
    if int(latest.get("held", 0)) <= asked or not isinstance(name, str):
        return None
    return _linked(store_dir, name)


def _linked(store_dir: Path, name: str) -> Path | None:
    if not name.startswith(PREFIX) or "/" in name:
        return None
    shared = store_dir / name
    private = _private_name(shared)
    try:
        os.link(shared, private)
    except OSError:  # removed by its last reader meanwhile: the catalog is read again
        return None
    return private


def _same_catalog(private: Path, catalog: Path) -> bool:
    """Whether `private` is a snapshot of the file now at `catalog` (not of one moved aside
    as damaged since: a read that met the damage reads again from the rebuilt one)."""
    try:
        inode = str(catalog.stat().st_ino)
    except FileNotFoundError:
        return False
    return private.name[len(PREFIX) :].split("-", 1)[0] == inode


def _linked_again(private: Path) -> Path:
    shared = private.with_name(private.name.rsplit(".", 1)[0])
    again = _private_name(shared)
    try:
        os.link(private, again)
    except OSError:  # a file system without hard links
        _copy(private, None, again)
    return again


def _copy(catalog: Path, shared: Path | None, private: Path) -> None:
    """Copy the catalog to `private`, and make it the `shared` snapshot too."""
    copying = private.with_name(private.name + ".copying")
    try:
        shutil.copyfile(catalog, copying)
        if shared is None:
            os.replace(copying, private)
            return
        os.link(copying, private)
        os.replace(copying, shared)
    except OSError as exc:
        copying.unlink(missing_ok=True)
        private.unlink(missing_ok=True)
        raise StoreError(f"cannot copy the catalog for reading: {exc}") from None


def release(private: Path) -> None:
    """Remove a reader's link; the shared snapshot too when no reader links it any more."""
    shared = private.with_name(private.name.rsplit(".", 1)[0])
    private.unlink(missing_ok=True)
    _drop_if_unused(shared)


def _drop_if_unused(shared: Path) -> None:
    try:
        if shared.stat().st_nlink <= 1:
            shared.unlink()
    except FileNotFoundError:
        pass


def _remove_stale(store_dir: Path, current: Path) -> None:
    """Links of readers that are gone, and shared snapshots of older catalog states that no
    reader links any more."""
    found = sorted(store_dir.glob(PREFIX + "*"))
    for path in found:
        private = _PRIVATE.match(path.name)
        if private is not None and processes.is_gone(int(private.group(1)), None):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    for path in found:  # once the links of the gone are gone
        if path != current and path.name.count(".") == 2:  # florwb.duckdb.read-<id>
            _drop_if_unused(path)


def open_read_only(path: Path, config: dict[str, Any]) -> duckdb.DuckDBPyConnection:
    """A read-only connection to a snapshot (its own file: nobody else locks it)."""
    con = duckdb.connect(str(path), read_only=True, config=config)
    try:
        no_progress_bar(con)
    except BaseException:
        con.close()
        raise
    return con


@contextmanager
def reading(store: Store) -> Iterator[Path]:
    """A snapshot of the catalog for the length of the block."""
    private = take(store)
    try:
        yield private
    finally:
        release(private)
