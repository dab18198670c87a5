"""Tables of the catalog, and the views users query.

Bulk rows (`log_rows`, `iteration_rows`) hold only numbers and integer keys: strings per
row are what makes DuckDB inserts slow, and ingestion must keep up with millions of rows
a second. The views `logs` and `iterations` put the names back and derive loop
coordinates from the loop entry each row's ctx_id points at, so plain SQL reads
naturally: `SELECT epoch, step, value FROM logs WHERE name = 'loss'`.

Each flor.loop name becomes a BIGINT coordinate column (its 0-based iteration). Loop names
are user data: always quoted as identifiers; one that would shadow a fixed column of the
views gets a `loop_` prefix.
"""

from __future__ import annotations

import duckdb

from florwb_engine.journal import ENTRY_SHIFT, ITERATION_MASK, VTYPES
from florwb_engine.store import console, run_context, verdicts

SCHEMA_VERSION = 12
# A log row's rank is in its seq's high bits (each rank journal numbers its rows from
# rank << RANK_SHIFT): the rank costs no column on the hot rows (store/run_ranks.py).
RANK_SHIFT = 40
LOCAL_SEQ = (1 << RANK_SHIFT) - 1  # a row's place in its own rank's sequence: seq & LOCAL_SEQ
RECORDED = "record"

TABLES = {
    "runs": """
        run_id VARCHAR PRIMARY KEY, run_key INTEGER UNIQUE, version VARCHAR, script VARCHAR,
        argv VARCHAR, cwd VARCHAR, host VARCHAR, pid INTEGER, pid_ticks BIGINT,
        python VARCHAR, start_time TIMESTAMP, end_time TIMESTAMP, status VARCHAR,
        exception VARCHAR, message VARCHAR, git_head VARCHAR, git_branch VARCHAR,
        git_dirty BOOLEAN, world_size INTEGER, launcher VARCHAR""",
    "versions": """
        version VARCHAR PRIMARY KEY, first_seen TIMESTAMP, n_files INTEGER, n_bytes BIGINT,
        skipped VARCHAR""",
    "args": """
        run_id VARCHAR, name VARCHAR, value DOUBLE, text VARCHAR, vtype VARCHAR,
        PRIMARY KEY (run_id, name)""",
    "sources": "source_key INTEGER PRIMARY KEY, source VARCHAR UNIQUE",
    "name_keys": "name_key INTEGER PRIMARY KEY, name VARCHAR UNIQUE",
    "log_rows": """
        run_key INTEGER, source_key INTEGER, seq BIGINT, name_key INTEGER, value DOUBLE,
        text VARCHAR, vtype UTINYINT, ctx_id BIGINT""",
    "iteration_rows": """
        run_key INTEGER, source_key INTEGER, ctx_id BIGINT, wait_s DOUBLE, iter_s DOUBLE""",
    "loop_entries": """
        run_key INTEGER, source_key INTEGER, entry_id BIGINT, loop VARCHAR, path VARCHAR,
        depth INTEGER, total BIGINT, own_column VARCHAR, rank INTEGER""",
    "name_stats": """
        run_key INTEGER, source_key INTEGER, name_key INTEGER, path VARCHAR, n BIGINT,
        n_numeric BIGINT, n_int BIGINT, n_repeat BIGINT, last_ctx BIGINT,
        PRIMARY KEY (run_key, source_key, name_key, path)""",
    "checkpoints": """
        run_id VARCHAR, loop VARCHAR, iteration BIGINT, ctx_id BIGINT, path VARCHAR,
        bytes BIGINT, snapshot_s DOUBLE, write_s DOUBLE, time TIMESTAMP""",
    "replays": """
        replay_id VARCHAR PRIMARY KEY, started TIMESTAMP, ended TIMESTAMP, status VARCHAR,
        names VARCHAR, detail VARCHAR""",
    "journals": """
        file VARCHAR PRIMARY KEY, run_id VARCHAR, source VARCHAR, "offset" BIGINT,
        next_seq BIGINT, done BOOLEAN, next_chunk BIGINT, error VARCHAR, rank INTEGER,
        head BIGINT""",
    # What ingestion or the recording could not keep exactly, per run: values stored as
    # text, calls dropped, values lost to a full disk, damaged journal bytes, unreadable
    # chunks. `n` counts values (bytes for damage); `detail` says why.
    "run_issues": """
        run_id VARCHAR, source VARCHAR, kind VARCHAR, detail VARCHAR, n BIGINT,
        PRIMARY KEY (run_id, source, kind, detail)""",
    # One row per rank of a multi-process launch (torchrun, mp.spawn): its process and how
    # it ended; the run's status is theirs combined (store/run_ranks.py).
    "run_ranks": """
        run_id VARCHAR, rank INTEGER, world_size INTEGER, local_rank INTEGER, host VARCHAR,
        pid INTEGER, pid_ticks BIGINT, start_time TIMESTAMP, end_time TIMESTAMP,
        status VARCHAR, exception VARCHAR, message VARCHAR, PRIMARY KEY (run_id, rank)""",
    # The files a run's snapshot left out, as the run saw them (versions/inputs.py).
    "run_inputs": """
        run_id VARCHAR, path VARCHAR, size BIGINT, mtime_ns BIGINT, blob VARCHAR,
        PRIMARY KEY (run_id, path)""",
    # Each replayed run's verdict (store/verdicts.py): verified, unchecked or diverged,
    # with how many recorded values it re-logged and the first that differed.
    "replay_runs": """
        replay_id VARCHAR, run_id VARCHAR, verdict VARCHAR, compared BIGINT, rows BIGINT,
        divergence VARCHAR, missing VARCHAR, strict BOOLEAN, time TIMESTAMP,
        PRIMARY KEY (replay_id, run_id)""",
    # A diverged replay's rows, moved out of `log_rows` / `name_stats` so that no reader
    # of those tables serves them; `logs_all` and the opt-ins read them back, marked.
    "withheld_rows": """
        run_key INTEGER, source_key INTEGER, seq BIGINT, name_key INTEGER, value DOUBLE,
        text VARCHAR, vtype UTINYINT, ctx_id BIGINT""",
    "withheld_name_stats": """
        run_key INTEGER, source_key INTEGER, name_key INTEGER, path VARCHAR, n BIGINT,
        n_numeric BIGINT, n_int BIGINT, n_repeat BIGINT, last_ctx BIGINT,
        PRIMARY KEY (run_key, source_key, name_key, path)""",
    # The project files a run touched, by their first access (record/file_access.py):
    # 'read' (with size and mtime then) or 'written' (created or emptied: the run's own).
    "run_files": """
        run_id VARCHAR, path VARCHAR, access VARCHAR, size BIGINT, mtime_ns BIGINT,
        PRIMARY KEY (run_id, path)""",
    # flor.load_checkpoint calls of a recording run (record/lineage.py): the run started
    # from `checkpoint` of run `parent`; `call` numbers the loads of one `name`.
    "run_lineage": """
        run_id VARCHAR, name VARCHAR, call INTEGER, parent VARCHAR, checkpoint VARCHAR,
        kind VARCHAR, loop VARCHAR, iteration BIGINT, path VARCHAR,
        PRIMARY KEY (run_id, name, call)""",
    # CPU, memory and GPU of a recording process over time, per rank (record/system.py;
    # store/system_metrics.py): one row per sampled figure.
    "system_rows": """
        run_id VARCHAR, rank INTEGER, time TIMESTAMP, name VARCHAR, value DOUBLE""",
    "meta": "key VARCHAR PRIMARY KEY, value VARCHAR",
    "run_context": run_context.TABLE,
    "console_rows": console.TABLE,
}

VIEW_COLUMNS = {
    "logs": ["run_id", "source", "seq", "name", "value", "text", "vtype", "ctx_id", "rank"],
    "iterations": [
        "run_id",
        "source",
        "ctx_id",
        "loop",
        "path",
        "depth",
        "iteration",
        "wait_s",
        "iter_s",
        "rank",
    ],
    "loops": ["run_id", "source", "entry_id", "loop", "path", "depth", "total", "rank"],
    "logs_all": ["verdict"],  # besides the columns of `logs`
}
FIXED_COLUMNS = frozenset(c for cols in VIEW_COLUMNS.values() for c in cols) | frozenset(
    part.split()[0] for part in TABLES["loop_entries"].split(",")
)
_VTYPE_SQL = "[" + ", ".join(f"'{v}'" for v in VTYPES) + "]"


def quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


def literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def loop_column(loop_name: str) -> str:
    name = loop_name.lower()
    if not name or name in FIXED_COLUMNS or name.startswith("loop_"):
        return f"loop_{name}"  # "" is no identifier: `flor.loop("", ...)` becomes loop_
    return name


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    exists = con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'meta' AND schema_name = 'main'"
    ).fetchall()[0][0]
    if exists:
        _migrate(con)
        return
    con.execute("BEGIN")
    for table, body in TABLES.items():
        con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({body})")
    con.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
    con.execute("INSERT OR IGNORE INTO sources VALUES (0, ?)", [RECORDED])
    create_views(con)
    con.execute("COMMIT")


def _migrate(con: duckdb.DuckDBPyConnection) -> None:
    """Bring a store written by an older florwb up to SCHEMA_VERSION, keeping its data."""
    row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
    version = int(row[0][0]) if row else SCHEMA_VERSION
    if version >= SCHEMA_VERSION:
        return
    con.execute("BEGIN")
    if version < 3:  # values repeated within an iteration: NULL (unknown) for rows there
        con.execute("ALTER TABLE name_stats ADD COLUMN IF NOT EXISTS n_repeat BIGINT")
        con.execute("ALTER TABLE name_stats ADD COLUMN IF NOT EXISTS last_ctx BIGINT")
    if version < 4:  # chunk sequence numbers, unreadable journals, per-run issues
        con.execute("ALTER TABLE journals ADD COLUMN IF NOT EXISTS next_chunk BIGINT")
        con.execute("ALTER TABLE journals ADD COLUMN IF NOT EXISTS error VARCHAR")
        con.execute(f"CREATE TABLE IF NOT EXISTS run_issues ({TABLES['run_issues']})")
    if version < 5:  # where each run ran and what it needed (store/run_context.py)
        run_context.create(con)
    if version < 6:  # run_inputs (left-out files), console_rows (printed lines), ranks
        con.execute(f"CREATE TABLE IF NOT EXISTS run_inputs ({TABLES['run_inputs']})")
        con.execute(f"CREATE TABLE IF NOT EXISTS console_rows ({TABLES['console_rows']})")
        con.execute("ALTER TABLE runs ADD COLUMN IF NOT EXISTS world_size INTEGER")
        con.execute("ALTER TABLE runs ADD COLUMN IF NOT EXISTS launcher VARCHAR")
        con.execute("ALTER TABLE loop_entries ADD COLUMN IF NOT EXISTS rank INTEGER")
        con.execute("ALTER TABLE journals ADD COLUMN IF NOT EXISTS rank INTEGER")
        con.execute(f"CREATE TABLE IF NOT EXISTS run_ranks ({TABLES['run_ranks']})")
        create_views(con)
    if version < 7:  # verdicts (a diverged replay's rows withheld), threads, files touched
        run_context.create(con)
        for table in ("replay_runs", "withheld_rows", "withheld_name_stats", "run_files"):
            con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({TABLES[table]})")
        verdicts.withhold_recorded_divergences(con)
        create_views(con)
    if version < 8:  # console lines say their rank (each rank numbers its lines apart)
        create_views(con)
    if version < 9:  # lineage: the checkpoint of another run a run started from
        con.execute(f"CREATE TABLE IF NOT EXISTS run_lineage ({TABLES['run_lineage']})")
    if version < 10:  # system metrics over time, and why a run has no energy figure
        con.execute(f"CREATE TABLE IF NOT EXISTS system_rows ({TABLES['system_rows']})")
        run_context.create(con)
    if version < 11:  # each rank's own run context (store/run_context.py)
        run_context.create(con)
    if version < 12:  # the checksum of each journal's first chunk: a journal written anew
        con.execute("ALTER TABLE journals ADD COLUMN IF NOT EXISTS head BIGINT")
    con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION)])
    con.execute("COMMIT")


def loop_columns(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Loop-coordinate columns, in the order they were added."""
    rows = con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = 'loop_entries' "
        "AND schema_name = 'main' ORDER BY column_index"
    ).fetchall()
    return [r[0] for r in rows if r[0].lower() not in FIXED_COLUMNS]


def coordinates_sql(columns: list[str], rows: str = "l", entries: str = "e") -> str:
    """SELECT expressions for the loop coordinates of `rows.ctx_id` (one per column)."""
    return "".join(
        f", CASE WHEN {entries}.own_column = {literal(c)} THEN {rows}.ctx_id & "
        f"{ITERATION_MASK} ELSE {entries}.{quote(c)} END AS {quote(c)}"
        for c in columns
    )


def entry_join(rows: str = "l", entries: str = "e") -> str:
    return (
        f"LEFT JOIN loop_entries {entries} ON {entries}.run_key = {rows}.run_key AND "
        f"{entries}.source_key = {rows}.source_key AND "
        f"{entries}.entry_id = {rows}.ctx_id >> {ENTRY_SHIFT}"
    )


def create_views(con: duckdb.DuckDBPyConnection) -> None:
    columns = loop_columns(con)
    coords = coordinates_sql(columns)
    keys = "JOIN runs r ON r.run_key = l.run_key JOIN sources s ON s.source_key = l.source_key"
    logs = (
        "SELECT r.run_id, s.source, l.seq, n.name, l.value, "
        f"l.text, list_extract({_VTYPE_SQL}, l.vtype + 1) AS vtype, l.ctx_id, "
        f"(l.seq >> {RANK_SHIFT})::INTEGER AS rank{coords}"
    )
    named = f"{keys} JOIN name_keys n ON n.name_key = l.name_key {entry_join()}"
    con.execute(f"CREATE OR REPLACE VIEW logs AS {logs} FROM log_rows l {named}")
    # Every value with its verdict: 'recorded', a replay's verdict (NULL for replays made
    # before verdicts were kept), 'diverged' for the withheld rows of a diverged replay.
    verdict = (
        "CASE WHEN l.source_key = 0 THEN 'recorded' ELSE (SELECT v.verdict FROM replay_runs v "
        "WHERE v.replay_id = s.source AND v.run_id = r.run_id) END"
    )
    con.execute(
        f"CREATE OR REPLACE VIEW logs_all AS {logs}, {verdict} AS verdict "
        f"FROM log_rows l {named} UNION ALL BY NAME "
        f"{logs}, 'diverged' AS verdict FROM withheld_rows l {named}"
    )
    con.execute(
        f"CREATE OR REPLACE VIEW iterations AS SELECT r.run_id, s.source, l.ctx_id, e.loop, "
        f"e.path, e.depth, l.ctx_id & {ITERATION_MASK} AS iteration, l.wait_s, l.iter_s, "
        f"coalesce(e.rank, 0) AS rank{coords} FROM iteration_rows l {keys} {entry_join()}"
    )
    console.create_view(con, columns)
    outer = "".join(f", l.{quote(c)}" for c in columns)
    con.execute(
        f"CREATE OR REPLACE VIEW loops AS SELECT r.run_id, s.source, l.entry_id, l.loop, "
        f"l.path, l.depth, l.total, coalesce(l.rank, 0) AS rank{outer} FROM loop_entries l {keys}"
    )


def ensure_loop_columns(con: duckdb.DuckDBPyConnection, loop_names: set[str]) -> dict[str, str]:
    """Map each loop name to its column, adding columns (and refreshing views) as needed."""
    existing = {c.lower(): c for c in loop_columns(con)}
    mapping = {}
    added = False
    for loop_name in sorted(loop_names):
        column = loop_column(loop_name)
        if column.lower() not in existing:
            con.execute(f"ALTER TABLE loop_entries ADD COLUMN {quote(column)} BIGINT")
            existing[column.lower()] = column
            added = True
        mapping[loop_name] = existing[column.lower()]
    if added:
        create_views(con)
    return mapping
