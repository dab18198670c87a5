"""`florwb` command line: thin wrappers over engine functions, shared with the workbench.

Exit codes: 0 ok, 2 usage error, 1 failure with a one-line reason on stderr. Expected
failures (bad SQL, unknown names, a busy database) never print a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

from florwb.cli_checkpoints import add_parser as add_checkpoints_parser
from florwb.cli_instrument import add_parser as add_instrument_parser
from florwb.cli_replay import ReplayCommandError
from florwb.cli_replay import add_parsers as add_replay_parsers
from florwb.output import json_safe, write_frame, write_table

FORMATS = ("table", "csv", "json")


class CommandError(Exception):
    """An expected failure: printed as one line, exit status 1."""


def _project(args: argparse.Namespace) -> Path:
    from florwb_engine.project import find_project

    return find_project(getattr(args, "project", None))


def _store(args: argparse.Namespace):
    from florwb_engine.store import Store

    return Store(_project(args))


def cmd_runs(args: argparse.Namespace) -> int:
    runs = _store(args).runs()
    if args.json:
        json.dump(json_safe(runs), sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    rows = []
    for r in runs:
        stall = r["data_wait_share"]
        rows.append(
            [
                r["run_id"],
                (r["start_time"] or "")[:19].replace("T", " "),
                r["status"] + (f" ({r['exception']})" if r["exception"] else ""),
                (r["version"] or "")[:8],
                r["script"],
                f"{r['duration_s']:.1f}s" if r["duration_s"] is not None else "",
                r["n_logs"],
                f"{stall:.0%}" if stall is not None else "",
                _args_text(r["args"]),
            ]
        )
    columns = ["run", "started", "status", "version", "script", "time", "logs", "stall", "args"]
    write_table(columns, rows, sys.stdout)
    from florwb_engine.store.hints import data_wait_hint

    for r in runs:
        if hint := data_wait_hint(r["data_wait_share"]):
            print(f"hint: run {r['run_id']} {hint}")
    return 0


def _short(value) -> str:
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 20 else text[:19] + "…"


def cmd_query(args: argparse.Namespace) -> int:
    write_frame(_store(args).query(args.sql), args.format)
    return 0


def cmd_dataframe(args: argparse.Namespace) -> int:
    names = [n for arg in args.names for n in arg.split(",") if n]
    write_frame(_store(args).dataframe(*names), args.format)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from florwb.demo.build import DemoError, build_demo

    try:
        folder = build_demo(Path(args.dir), progress=lambda line: print(line, file=sys.stderr))
    except DemoError as exc:
        raise CommandError(str(exc)) from None
    print(f"demo project ready in {folder}", file=sys.stderr)
    if not args.no_ui:
        from florwb.cli_app import open_workbench

        return open_workbench(folder)
    from florwb_engine.store import Store

    runs = Store(folder).runs()
    write_table(
        ["run", "status", "version", "args"],
        [[r["run_id"], r["status"], (r["version"] or "")[:8], _args_text(r["args"])] for r in runs],
        sys.stdout,
    )
    return 0


def _args_text(values: dict) -> str:
    return " ".join(f"{k}={_short(v)}" for k, v in values.items())


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
    p.set_defaults(func=cmd_dataframe)

    add_replay_parsers(sub)
    add_instrument_parser(sub)
    add_checkpoints_parser(sub)

    p = sub.add_parser("demo", help="build the demo project (several runs, two versions)")
    p.add_argument("dir", nargs="?", default="florwb-demo")
    p.add_argument("--no-ui", action="store_true", help="build and list runs only")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    commands = set(parser._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    if not argv or (argv[0] not in commands and not argv[0].startswith("-")):
        if len(argv) > 1:
            parser.error(f"unknown command {argv[0]!r}")
        path = Path(argv[0] if argv else ".")
        if not path.exists():
            print(f"florwb: {path}: no such file or folder", file=sys.stderr)
            return 1
        from florwb.cli_app import open_workbench  # `florwb [PATH]`: the workbench

        return open_workbench(path)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (CommandError, ReplayCommandError) as exc:
        print(f"florwb: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        if not _is_store_error(exc):
            raise
        print(f"florwb: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("florwb: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


def _is_store_error(exc: Exception) -> bool:
    """Store errors are expected (a busy database, a broken file); the store module is
    imported only here, once one was raised, so commands that never touch the store (and
    `florwb replay` starting its workers) do not wait for DuckDB to load."""
    store = sys.modules.get("florwb_engine.store")
    return store is not None and isinstance(exc, (store.StoreError, store.StoreBusy))


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
