"""`florwb` command line: thin wrappers over engine functions, shared with the workbench.

Exit codes: 0 ok, 2 usage error, 1 failure with a one-line reason on stderr. Expected
failures (bad SQL, unknown names, a busy database) are `FlorwbError`s, raised by the
engine or by a command, and end in `main`'s one handler (`fail`): never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from florwb.cli_checkpoints import add_parser as add_checkpoints_parser
from florwb.cli_instrument import add_parser as add_instrument_parser
from florwb.cli_io import add_parser as add_io_parser
from florwb.cli_propagate import add_parsers as add_propagate_parsers
from florwb.cli_replay import add_parsers as add_replay_parsers
from florwb.output import json_safe, write_chunks, write_frame, write_rows, write_table
from florwb_engine.errors import FlorwbError

if TYPE_CHECKING:  # the store loads DuckDB: only commands that read it import it
    from florwb_engine.store import Store

FORMATS = ("table", "csv", "json")


def _project(args: argparse.Namespace) -> Path:
    from florwb_engine.project import find_project

    return find_project(getattr(args, "project", None))


def open_store(args: argparse.Namespace) -> Store:
    from florwb_engine.store import Store

    return Store(_project(args))


def say_ingest(store) -> None:
    """What ingestion found this time (damage, odd values, unreadable chunks): said once,
    by the reader that found it; `florwb runs` keeps showing it per run."""
    report = store.last_ingest
    for line in [*report.warnings, *report.errors]:
        print(f"florwb: {line}", file=sys.stderr)


def cmd_runs(args: argparse.Namespace) -> int:
    from florwb_engine.store.issues import summary, values_lost
    from florwb_engine.store.runs import args_that_differ

    store = open_store(args)
    runs = store.run_rows()
    say_ingest(store)
    if args.json:
        json.dump(json_safe([r.to_json() for r in runs]), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    rows = []
    first = args_that_differ((r.script, r.args) for r in runs)
    for r in runs:
        stall = r.data_wait_share
        lost = values_lost(r.issues)
        rows.append(
            [
                r.run_id,
                r.start_time.isoformat(sep=" ")[:19] if r.start_time else "",
                r.status
                + (f" rank {r.failed_rank} first" if r.failed_rank is not None else "")
                + (f" ({r.exception})" if r.exception else "")
                + (f", {lost} lost" if lost else "")
                + (" !" if r.issues else ""),
                (r.version or "")[:8],
                r.script,
                f"{r.duration_s:.1f}s" if r.duration_s is not None else "",
                f"{r.n_logs}+{r.n_replayed}" if r.n_replayed else r.n_logs,
                r.restorable_text,
                r.verdict or "",
                f"{stall:.0%}" if stall is not None else "",
                _args_text(r.args, first),
            ]
        )
    columns = [
        "run",
        "started",
        "status",
        "version",
        "script",
        "time",
        "logs",
        "restorable",
        "replay",
        "stall",
        "args",
    ]
    if any(r.started_from for r in runs):  # flor.load_checkpoint: the runs each started from
        columns.insert(5, "from")
        for row, r in zip(rows, runs, strict=True):
            row.insert(5, ",".join(r.parents))
    if any(r.world_size > 1 for r in runs):  # multi-process launches: how many ranks
        columns.insert(3, "procs")
        for row, r in zip(rows, runs):
            row.insert(3, r.world_size)
    write_table(columns, rows, sys.stdout, last="fit")
    from florwb_engine.store.hints import data_wait_hint

    for r in runs:
        if hint := data_wait_hint(r.data_wait_share, r.data_wait_s):
            print(f"hint: run {r.run_id} {hint}")
    for r in runs:
        if note := summary(r.issues):
            print(f"! run {r.run_id}: {note}")
    for r in runs:
        if r.verdict == "diverged":
            why = r.verdicts[-1]["divergence"]
            print(f"! run {r.run_id}: its replay diverged, values withheld: {why}")
    return 0


def _short(value) -> str:
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 20 else text[:19] + "…"


def cmd_query(args: argparse.Namespace) -> int:
    """Rows stream from DuckDB to the output: a table fetches only the rows it shows, CSV
    and JSON write chunk by chunk, so no result is held whole in memory."""
    store = open_store(args)
    with store.pinned():  # the notes below read the state the result came from
        return _query(store, args)


def _query(store: Store, args: argparse.Namespace) -> int:
    from florwb_engine.store import user_sql

    with user_sql.user_result(store, args.sql) as result:
        say_ingest(store)
        if result is None:
            write_table([], [], sys.stdout)
            return 0
        if user_sql.rows_fetchable(result):  # NULL and NaN told apart (output.write_rows)
            columns = [str(d[0]) for d in result.description or []]
            write_rows(columns, user_sql.fetch_rows(result), args.format, sys.stdout)
        else:
            write_chunks(user_sql.fetch_chunks(result), args.format)
    if withheld := user_sql.withheld_from(store, args.sql):
        print(f"florwb: {withheld.note('logs_all')} (with their verdict)", file=sys.stderr)
    if rounded := user_sql.rounded_ints_note(store, args.sql):
        print(f"florwb: {rounded}", file=sys.stderr)
    return 0


def cmd_dataframe(args: argparse.Namespace) -> int:
    names = [n for arg in args.names for n in arg.split(",") if n]
    store = open_store(args)
    frame = store.dataframe(*names, diverged=args.diverged)
    say_ingest(store)
    if withheld := frame.attrs.get("withheld"):
        print(f"florwb: {withheld.note('--diverged')}", file=sys.stderr)
    write_frame(frame, args.format)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from florwb.demo.build import build_demo

    folder = build_demo(Path(args.dir), progress=lambda line: print(line, file=sys.stderr))
    print(f"demo project ready in {folder}", file=sys.stderr)
    from florwb.cli_app import has_terminal, open_workbench

    if not args.no_ui and has_terminal():
        return open_workbench(folder)
    if not args.no_ui:
        print("florwb: no terminal to open the workbench in: its runs are", file=sys.stderr)
    from florwb_engine.store import Store

    runs = Store(folder).run_rows()
    write_table(
        ["run", "status", "version", "args"],
        [[r.run_id, r.status, (r.version or "")[:8], _args_text(r.args)] for r in runs],
        sys.stdout,
    )
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check the project's store; repair what the journals allow; exit 1 if still wrong."""
    from florwb_engine.store.doctor import check_project

    report = check_project(_project(args))
    for line in report.found:
        print(f"ok: {line}")
    for line in report.repaired:
        print(f"repaired: {line}")
    for line in report.problems[1:]:
        print(f"problem: {line}")
    if report.problems:
        raise FlorwbError(report.problems[0])
    print("healthy" if not report.repaired else "healthy after repairs")
    return 0


def _args_text(values: dict, first: list[str] | None = None) -> str:
    """`name=value` pairs: the names in `first` (in that order) before the others."""
    order = [n for n in first or [] if n in values]
    order += [n for n in values if n not in order]
    return " ".join(f"{k}={_short(values[k])}" for k in order)


def cmd_pull(args: argparse.Namespace) -> int:
    """Merge another copy's rank journals (a multi-node launch's other nodes) into this
    project's runs; again changes nothing. Exit 1 when a journal conflicts."""
    from florwb_engine.store.journal_pull import pull

    store = open_store(args)
    report = pull(store.project, args.source)  # PullError: said in one line by `main`
    runs = {r.run_id: r for r in store.run_rows()}  # ingests what was pulled
    say_ingest(store)
    for run_id, ranks in sorted(report.runs.items()):
        run = runs.get(run_id)
        world = f" of {run.world_size}" if run else ""
        status = f": {run.status}" if run else ""
        print(f"run {run_id}: ranks {', '.join(map(str, sorted(ranks)))}{world}{status}")
    print(
        f"pulled {len(report.added)} new and {len(report.grown)} grown journals, "
        f"{report.files} checkpoint files; {len(report.unchanged)} unchanged"
    )
    for note in report.notes:
        print(f"florwb: {note}", file=sys.stderr)
    for name in report.conflicts:
        print(f"florwb: {name} differs from this copy's; not pulled", file=sys.stderr)
    return 1 if report.conflicts else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="florwb",
        usage="florwb [PATH] | florwb COMMAND ...",
        description="Hindsight logging workbench for model training. "
        "`florwb [PATH]` opens the workbench on the project containing PATH.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("runs", help="list recorded runs")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("query", help="run read-only SQL over the catalog")
    p.add_argument("sql")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.set_defaults(func=cmd_query)

    p = sub.add_parser("dataframe", help="logs pivoted by run and loop coordinates")
    p.add_argument("names", nargs="+", metavar="NAME")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument(
        "--diverged",
        action="store_true",
        help="include values of diverged replays, named in a `diverged` column",
    )
    p.set_defaults(func=cmd_dataframe)

    p = sub.add_parser(
        "pull", help="merge the rank journals of another copy of the project (HOST:PATH or PATH)"
    )
    p.add_argument("source", metavar="HOST:PATH|PATH")
    p.set_defaults(func=cmd_pull)

    p = sub.add_parser("doctor", help="check the store; rebuild a damaged catalog from journals")
    p.set_defaults(func=cmd_doctor)

    add_replay_parsers(sub)
    add_propagate_parsers(sub)
    add_instrument_parser(sub)
    add_checkpoints_parser(sub)
    add_io_parser(sub)

    p = sub.add_parser("demo", help="build the demo project (several runs, two versions)")
    p.add_argument("dir", nargs="?", default="florwb-demo")
    p.add_argument("--no-ui", action="store_true", help="build and list runs only")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    commands = set(parser._subparsers._group_actions[0].choices)  # type: ignore[union-attr,arg-type]
    if not argv or (argv[0] not in commands and not argv[0].startswith("-")):
        if len(argv) > 1:
            parser.error(f"unknown command {argv[0]!r}")
        path = Path(argv[0] if argv else ".")
        if not path.exists() and os.sep not in argv[0] and "." not in argv[0]:
            # a bare word is more likely a mistyped command than a missing folder
            print(
                f"florwb: {argv[0]!r} is neither a command nor a folder here "
                f"(commands: {', '.join(sorted(commands))})",
                file=sys.stderr,
            )
            return 2
        if not path.exists():
            print(f"florwb: {path}: no such file or folder", file=sys.stderr)
            return 1
        from florwb.cli_app import open_workbench  # `florwb [PATH]`: the workbench

        return open_workbench(path)
    args = parser.parse_args(argv)
    _say_lock_waits()
    try:
        return args.func(args)  # reads retry a damaged catalog themselves (store/repair.py)
    except FlorwbError as exc:
        return fail(exc)
    except BrokenPipeError:  # `| head` stopped reading: stop quietly, as Unix tools do
        _silence_stdout()
        return 0
    except KeyboardInterrupt:
        print("florwb: interrupted", file=sys.stderr)
        return 130


def _say_lock_waits() -> None:
    """A store connection waiting on another process's lock says so on stderr, once
    (engine/store/db.py logs it; importing logging does not load DuckDB)."""
    import logging

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("florwb: %(message)s"))
    store_log = logging.getLogger("florwb_engine.store.db")
    store_log.addHandler(handler)
    store_log.setLevel(logging.INFO)
    store_log.propagate = False


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the final flush of what is still buffered for the
    closed pipe cannot raise again at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def fail(exc: FlorwbError) -> int:
    """The one way an expected failure ends a command: its message on stderr as
    `florwb: <message>`, and its exit status (1; 2 for a misused option)."""
    print(f"florwb: {exc}", file=sys.stderr)
    return exc.exit_code


def run() -> None:
    """The `florwb` command. Exits without tearing the interpreter down (0.2-0.3 s with
    DuckDB, libcst and numpy loaded): every file and connection is closed by then, and
    atexit handlers still run."""
    code = main()
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            with contextlib.suppress(BrokenPipeError):  # a pager or head that stopped reading
                stream.flush()
        except (OSError, ValueError):
            code = code or 120  # what Python itself exits with when stdout cannot be flushed
    os._exit(code)


if __name__ == "__main__":
    run()
