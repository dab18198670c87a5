"""User SQL cannot write: not the catalog, not a file, not DuckDB's home, whatever the statement.

Every statement goes through the three read-only surfaces (`florwb query`, `flor.query`, the
Query tab's `ResultStream`: started, a page fetched, counted, as the tab does) against a real
recorded project; after each, the store file's bytes, its row counts and the listing of every
folder involved must be unchanged.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import duckdb
import pytest
from conftest import florwb, git, run_py, write

SCRIPT = """
import florwb as flor
lr = flor.arg("lr", 0.1)
for epoch in flor.loop("epoch", range(3)):
    for step in flor.loop("step", range(4)):
        flor.log("loss", lr / (1 + epoch * 4 + step))
    flor.log("note", "epoch done")
"""

OUT = "written"  # a name every file-writing statement aims at, relative and absolute

STATEMENTS = [
    # EXPLAIN / EXPLAIN ANALYZE of every kind of write
    "EXPLAIN ANALYZE DELETE FROM log_rows",
    "EXPLAIN DELETE FROM log_rows",
    "EXPLAIN ANALYZE UPDATE runs SET status = 'x'",
    "EXPLAIN ANALYZE INSERT INTO runs SELECT * FROM runs",
    "EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1 AS a",
    "EXPLAIN ANALYZE DROP TABLE runs",
    "EXPLAIN ANALYZE DROP TABLE log_rows",
    "EXPLAIN ANALYZE ALTER TABLE runs RENAME TO runs_old",
    "EXPLAIN ANALYZE CREATE VIEW v AS SELECT 1",
    "EXPLAIN ANALYZE TRUNCATE log_rows",
    "EXPLAIN (ANALYZE) DELETE FROM log_rows",
    "EXPLAIN ANALYZE COPY (SELECT * FROM runs) TO '{out}.csv'",
    "EXPLAIN ANALYZE COPY log_rows TO '{out}.parquet' (FORMAT parquet)",
    "EXPLAIN ANALYZE EXPORT DATABASE '{out}_export'",
    "EXPLAIN ANALYZE ATTACH '{out}.duckdb' AS other",
    # the writes themselves
    "DELETE FROM log_rows",
    "UPDATE runs SET status = 'x'",
    "INSERT INTO runs SELECT * FROM runs",
    "DROP TABLE runs",
    "CREATE TABLE t AS SELECT 1 AS a",
    "COPY (SELECT * FROM runs) TO '{out}.csv'",
    "COPY runs TO '{out}.json'",
    "EXPORT DATABASE '{out}_export'",
    "ATTACH '{out}.duckdb' AS other",
    "ATTACH '{out}.duckdb' AS other; CREATE TABLE other.t AS SELECT 1",
    "DETACH florwb",
    "CREATE PERSISTENT SECRET s (TYPE http, BEARER_TOKEN 'x')",
    # extensions, settings, pragmas, calls, checkpoints
    "INSTALL httpfs",
    "FORCE INSTALL json",
    "LOAD httpfs",
    "SET memory_limit = '1GB'",
    "SET GLOBAL threads = 1",
    "RESET memory_limit",
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "SET temp_directory = '{out}_tmp'",
    "PRAGMA enable_profiling = 'json'",
    "SET profiling_output = '{out}_profile.json'",
    "PRAGMA profiling_output = '{out}_profile.json'",
    "PRAGMA memory_limit = '1GB'",
    "CALL checkpoint()",
    "CHECKPOINT",
    "FORCE CHECKPOINT",
    "VACUUM",
    # several statements, CTEs, comments hiding keywords
    "SELECT 1; DELETE FROM log_rows",
    "SELECT count(*) FROM runs; DROP TABLE runs; SELECT 1",
    "BEGIN; DELETE FROM log_rows; COMMIT",
    "WITH x AS (SELECT 1) DELETE FROM log_rows",
    "WITH x AS (SELECT run_key FROM runs) DELETE FROM log_rows WHERE run_key IN (SELECT * FROM x)",
    "/* SELECT */ DELETE FROM log_rows",
    "SELECT 1 -- harmless\n; DROP TABLE runs",
    "EXPLAIN /* SELECT */ ANALYZE DROP TABLE runs",
    "EXPLAIN ANALYZE /* x */ DELETE FROM log_rows",
    "explain analyze\n\tdelete from log_rows",
]


def _listing(*folders: Path) -> dict[str, int]:
    out = {}
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            out[str(path)] = path.stat().st_size if path.is_file() else -1
    return out


def _counts(db: Path) -> tuple:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return tuple(
            con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
            for t in ("runs", "log_rows", "args")
        )
    finally:
        con.close()


def _state(project: Path, home: Path) -> tuple:
    db = project / ".florwb" / "florwb.duckdb"
    return (hashlib.sha256(db.read_bytes()).hexdigest(), _listing(project, home), _counts(db))


@pytest.fixture(scope="module")
def recorded_once(tmp_path_factory) -> Path:
    """The recorded, ingested project, made once for the module (two interpreter starts
    instead of two per test); each test gets its own copy."""
    root = tmp_path_factory.mktemp("readonly") / "project"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(root / "README.md", "# project\n")
    git(root, "add", "README.md")
    git(root, "commit", "-q", "-m", "init")
    write(root / "train.py", SCRIPT)
    run_py(root, "train.py")
    home = root.parent / "home"
    home.mkdir()
    florwb(root, "runs", env={"HOME": str(home)})  # ingested: later reads change nothing
    return root


@pytest.fixture
def recorded(recorded_once: Path, tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    repo = tmp_path / "project"
    shutil.copytree(recorded_once, repo, symlinks=True)
    home = tmp_path / "home"
    home.mkdir()
    # DuckDB installs extensions and persistent secrets under $HOME/.duckdb
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(repo)
    return repo, home  # already ingested: a read that changed the copy would fail the test


def _surfaces(project: Path, sql: str) -> list[str]:
    """Run `sql` through the in-process surfaces; the outcome of each, for the message."""
    import florwb as flor
    from florwb.cli import main
    from florwb_engine.store import Store, StoreError

    outcomes = []
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["query", sql, "--format", "csv"])
    assert code in (0, 1), (sql, code, err.getvalue())
    assert "Traceback" not in err.getvalue()
    outcomes.append(f"cli={code}")
    for call in (
        lambda: flor.query(sql),
        lambda: _query_tab(Store(project), sql),
        lambda: _query_tab(Store(project), sql, count_first=True),
    ):
        try:
            call()
            outcomes.append("ran")
        except Exception as exc:  # StoreError expected; anything else fails below
            assert isinstance(exc, StoreError), (sql, repr(exc))  # or its UserSqlError
            outcomes.append("refused")
    return outcomes


def _query_tab(store, sql: str, count_first: bool = False) -> tuple[list[tuple], int | None]:
    """What the Query tab does with `sql` (florwb/panes/query.py): a `ResultStream` started,
    its first page fetched, then counted on the open result and the next page fetched; or,
    `count_first`, counted before it starts (a connection of its own), then paged."""
    from florwb_engine.store.queries import PAGE_ROWS
    from florwb_engine.store.result_stream import ResultStream

    stream = ResultStream(store, sql)
    try:
        total = stream.count() if count_first else None
        stream.start()
        rows = stream.fetch(PAGE_ROWS) if stream.returns_rows else []
        if not count_first:
            total = stream.count()
        if stream.returns_rows:
            rows += stream.fetch(PAGE_ROWS)
        return rows, total
    finally:
        stream.close()


def test_user_sql_cannot_write_anything(recorded):
    project, home = recorded
    before = _state(project, home)
    assert before[2][1] > 0  # there are log rows to lose
    for template in STATEMENTS:
        for out in (OUT, str(project.parent / OUT)):
            sql = template.replace("{out}", out)
            outcomes = _surfaces(project, sql)
            assert _state(project, home) == before, (sql, outcomes)
    assert len(STATEMENTS) >= 40
    runs = florwb(project, "runs", "--json")
    assert '"status": "finished"' in runs.stdout


def test_the_connection_itself_cannot_write(recorded):
    """Without the friendly textual check: every statement straight on the connection that
    runs user SQL. This is the guarantee; the check only words the refusal earlier."""
    from florwb_engine.store import Store
    from florwb_engine.store.user_sql import read_only_connection

    project, home = recorded
    before = _state(project, home)
    refused = 0
    for template in STATEMENTS:
        for out in (OUT, str(project.parent / OUT)):
            sql = template.replace("{out}", out)
            try:
                statements = [s.query for s in duckdb.extract_statements(sql)]
            except duckdb.ParserException:
                statements = [sql]  # DuckDB refuses it whole
            with read_only_connection(Store(project)) as con:
                for statement in statements:
                    try:
                        con.execute(statement).fetchall()
                    except duckdb.Error:
                        refused += 1
            assert _state(project, home) == before, sql
    assert refused >= 2 * 40


@pytest.mark.parametrize(
    "sql",
    [
        "EXPLAIN ANALYZE DELETE FROM log_rows",
        "EXPLAIN ANALYZE DROP TABLE runs",
        "EXPLAIN ANALYZE COPY (SELECT 1) TO 'written.csv'",
        "SELECT 1; EXPLAIN ANALYZE UPDATE runs SET status = 'x'",
    ],
)
def test_cli_query_subprocess_cannot_write(recorded, sql):
    project, home = recorded
    before = _state(project, home)
    proc = florwb(project, "query", sql, check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("florwb: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert _state(project, home) == before
    assert "finished" in florwb(project, "runs").stdout


def test_reads_still_work_on_the_read_only_connection(recorded):
    project, _home = recorded
    import florwb as flor
    from florwb_engine.store import Store

    frame = flor.query("SELECT count(*) AS n FROM logs WHERE name = 'loss'")
    assert int(frame["n"][0]) == 12
    assert _query_tab(Store(project), "SELECT 1 AS a; SELECT 42 AS b") == ([(42,)], 1)
    rows, total = _query_tab(Store(project), "SELECT * FROM logs")
    assert len(rows) == 15 and total == 15
    assert _query_tab(Store(project), "SELECT * FROM logs", count_first=True)[1] == 15
    text = florwb(project, "query", "PRAGMA version").stdout
    assert "library_version" in text


def _limited(code: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run `code` in a child whose address space is capped at 3 GiB."""
    prelude = (
        "import resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
        "from florwb.cli import main\n"
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ},
    )


def test_huge_results_stream_in_bounded_memory(recorded):
    project, _home = recorded
    huge = "SELECT range AS i, 'row ' || range AS s FROM range(100000000000)"
    proc = _limited(f"sys.exit(main(['query', {huge!r}]))", project)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[-1] == "(200 rows shown, more not counted; use --format csv or json for all)"
    assert len(lines) == 202  # header, 200 rows, the note
    # CSV streams to a reader that stops: a pipe closed after 3 lines, no traceback
    shell = subprocess.run(
        f"{sys.executable} -m florwb.cli query {huge!r} --format csv | head -3",
        shell=True,
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert shell.stdout.splitlines() == ["i,s", "0,row 0", "1,row 1"]
    assert shell.stderr == ""
    # the Query tab's page and the notebook API under the same memory cap
    page = _limited(
        "from florwb_engine.store import Store\n"
        "from florwb_engine.store.result_stream import ResultStream\n"
        f"s = ResultStream(Store('.'), {huge!r})\n"
        "rows = s.fetch(1000)\n"
        "print(len(rows), s.exhausted, s.fetch(1000)[-1][0])\n"
        "s.close()\n",
        project,
    )
    assert page.returncode == 0, page.stderr
    assert page.stdout.split() == ["1000", "False", "1999"]


def test_small_results_say_their_size(recorded):
    project, _home = recorded
    out = florwb(project, "query", "SELECT * FROM range(5)").stdout.splitlines()
    assert out == ["range", "0", "1", "2", "3", "4"]
    out = florwb(project, "query", "SELECT * FROM range(250)").stdout.splitlines()
    assert out[-1] == "(200 of 250 rows shown; use --format csv or json for all)"
    out = florwb(project, "query", "SELECT 1 AS a WHERE false", "--format", "json").stdout
    assert out == "[]\n"
    out = florwb(project, "query", "SELECT * FROM range(3)", "--format", "json").stdout
    assert out == '[\n {\n  "range": 0\n },\n {\n  "range": 1\n },\n {\n  "range": 2\n }\n]\n'


def test_read_only_and_write_sessions_of_one_process_take_turns(recorded):
    """DuckDB refuses a read-only and a read-write connection to one file in one process;
    each waits for the other instead of failing (the workbench runs both from threads)."""
    import threading

    from florwb_engine.store import Store

    project, _home = recorded
    holding, release = threading.Event(), threading.Event()
    results: list = []

    def writer():
        with Store(project).session():
            holding.set()
            release.wait(timeout=60)

    def reader():
        results.append(_query_tab(Store(project), "SELECT count(*) FROM runs")[0])

    w = threading.Thread(target=writer)
    w.start()
    assert holding.wait(timeout=60)
    r = threading.Thread(target=reader)
    r.start()
    r.join(timeout=0.5)
    assert r.is_alive() and results == []  # it cannot open read-only while the session lives
    release.set()
    w.join(timeout=60)
    r.join(timeout=120)
    assert results == [[(1,)]]
