"""`florwb doctor`: check a project's store and repair what can be repaired from the journals.

Checks, in order: the catalog opens and every table reads back whole (DuckDB verifies block
checksums as it reads), journals ingest without errors, leftovers of killed runs and replays,
and every recorded code version is present in the private version store. Damage the journals
can undo (a damaged catalog, leftovers) is repaired and reported; what they cannot (a version
missing from the version store, a journal that cannot be read) is a problem.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from florwb_engine import project as projects
from florwb_engine.journal import SUFFIX
from florwb_engine.store import ingest, repair
from florwb_engine.store.catalog import Store
from florwb_engine.store.db import DB_FILENAME, StoreError
from florwb_engine.versions._git import VersionError, git, private_env

VERSIONS_DIRNAME = "versions.git"


@dataclass
class DoctorReport:
    """What was looked at, what was repaired, what is still wrong (one line each)."""

    found: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.problems


def check_project(project: Path) -> DoctorReport:
    report = DoctorReport()
    store_dir = projects.store_dir(project)
    if not store_dir.is_dir():
        report.problems.append(f"no florwb project in {project} (no .florwb/ folder)")
        return report
    damaged_before = set(store_dir.glob(f"{DB_FILENAME}.damaged-*"))
    store = Store(project)
    runs_versions = _check_catalog(store, report)
    rebuilt = set(store_dir.glob(f"{DB_FILENAME}.damaged-*")) - damaged_before
    for moved in sorted(rebuilt):
        report.repaired.append(
            f"damaged catalog moved aside to {moved.name}, rebuilt from journals"
        )
    if store.leftovers:
        report.repaired.append(
            f"removed {len(store.leftovers)} leftover(s) of killed runs or replays: "
            + ", ".join(store.leftovers[:5])
            + (" ..." if len(store.leftovers) > 5 else "")
        )
    _check_journals(project, store, report)
    if runs_versions is not None:
        _check_versions(store_dir, runs_versions, report)
    return report


def _check_catalog(store: Store, report: DoctorReport) -> list[str] | None:
    """Read every table whole; a damaged one moves the file aside and rebuilds it."""
    for attempt in (0, 1):
        try:
            with store.session() as con:
                tables = [
                    r[0]
                    for r in con.execute(
                        "SELECT table_name FROM duckdb_tables() WHERE database_name = "
                        "current_database() AND NOT temporary ORDER BY 1"
                    ).fetchall()
                ]
                rows = 0
                for table in tables:
                    quoted = '"' + table.replace('"', '""') + '"'
                    n, _ = con.execute(f"SELECT count(*), max(hash(t)) FROM {quoted} t").fetchall()[
                        0
                    ]
                    rows += int(n)
                versions = [
                    r[0]
                    for r in con.execute(
                        "SELECT DISTINCT version FROM runs WHERE version IS NOT NULL"
                    ).fetchall()
                ]
                n_runs = con.execute("SELECT count(*) FROM runs").fetchall()[0][0]
            report.found.append(
                f"catalog: {len(tables)} tables, {rows:,} rows read back, {n_runs} runs"
            )
            return versions
        except repair.CatalogRebuilt:
            if attempt:
                break
        except (StoreError, duckdb.Error) as exc:
            report.problems.append(f"catalog: {repair.first_line(exc)}")
            return None
    report.problems.append("catalog: still damaged after a rebuild from the journals")
    return None


def _check_journals(project: Path, store: Store, report: DoctorReport) -> None:
    folder = projects.journal_dir(project)
    files = sorted(folder.glob("*")) if folder.is_dir() else []
    unreadable = []
    for path in files:
        try:
            with open(path, "rb") as f:
                while f.read(1 << 20):  # every byte must come back from the disk
                    continue
        except OSError as exc:
            unreadable.append(f"{path.name} ({exc.strerror})")
            continue
        if open_to := ingest.writable_by_others(path):
            report.problems.append(open_to)
    journals = sum(path.name.endswith(SUFFIX) for path in files)  # not the pull answers beside
    report.found.append(f"journals: {journals} files")
    if unreadable:
        report.problems.append("journals unreadable: " + ", ".join(unreadable))
    for error in store.last_ingest.errors:
        report.problems.append(f"journal: {error}")
    try:
        with store.session() as con:
            damaged = con.execute(
                "SELECT file, 'unreadable from byte ' || \"offset\" || ': ' || error FROM journals "
                "WHERE error IS NOT NULL UNION ALL "
                "SELECT split_part(detail, ': ', 1), 'lost its start: run ' || run_id || "
                "' is shown from what is left; ' || split_part(detail, ': ', 2) "
                "FROM run_issues WHERE kind = ? ORDER BY 1",
                [ingest.START_LOST],
            ).fetchall()
    except (StoreError, duckdb.Error) as exc:  # the catalog's own problem is said above
        report.problems.append(f"journals: not checked ({repair.first_line(exc)})")
        return
    for file, what in damaged:  # said by the read that found it, and by every doctor
        report.problems.append(f"journal {file}: {what}")


def _check_versions(store_dir: Path, versions: list[str], report: DoctorReport) -> None:
    git_dir = store_dir / VERSIONS_DIRNAME
    if not versions:
        report.found.append("version store: no versions recorded")
        return
    if not (git_dir / "HEAD").is_file():
        report.problems.append(f"version store missing: {len(versions)} versions cannot be read")
        return
    try:
        proc = git(
            ["cat-file", "--batch-check"],
            cwd=git_dir,
            env=private_env(git_dir),
            input="".join(f"{v}^{{tree}}\n" for v in versions).encode(),
            check=False,
        )
    except VersionError as exc:
        report.problems.append(f"version store: {exc}")
        return
    missing = [
        v for v, line in zip(versions, proc.stdout.decode().splitlines()) if "missing" in line
    ]
    if proc.returncode != 0 or missing:
        report.problems.append(
            f"version store: {len(missing)} of {len(versions)} versions missing "
            f"(runs of them cannot be replayed): {', '.join(m[:8] for m in missing[:5])}"
        )
    else:
        report.found.append(f"version store: {len(versions)} versions present")
