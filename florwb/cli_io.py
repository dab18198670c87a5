"""`florwb io RUN [--grep PATTERN] [--extract REGEX [--dry-run]]`: a run's printed lines.

Prints what the run wrote to stdout/stderr and logged with `logging`, one line each with its
loop coordinates and channel (`florwb_engine.store.console`). `--extract` reads metrics out of
the text with a regular expression whose named groups name them: `--dry-run` shows what it
would store, without it the values become logs of the source `extract`, read like any other
(`flor.dataframe("loss")`). Wired into `florwb.cli` by `add_parser`.
"""

from __future__ import annotations

import argparse
import sys

FORMATS = ("table", "csv", "json")


def add_parser(subparsers) -> None:
    """Register the `io` subcommand on florwb's subparsers."""
    p = subparsers.add_parser(
        "io",
        help="a run's printed and logged lines (print, logging)",
        description="Show the lines RUN (an id or a unique prefix of one) printed or logged, "
        "with their loop coordinates. --extract 'loss: (?P<loss>[0-9.]+)' reads metrics out "
        "of them (named groups name the metrics); add --dry-run to see what it would store.",
    )
    p.add_argument("run", metavar="RUN")
    p.add_argument("--grep", metavar="PATTERN", help="only lines matching this regex")
    p.add_argument("--extract", metavar="REGEX", help="store named groups' numbers as logs")
    p.add_argument("--dry-run", action="store_true", help="with --extract: show, store nothing")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.set_defaults(func=cmd_io)


def cmd_io(args: argparse.Namespace) -> int:
    from florwb.cli import open_store, say_ingest
    from florwb.output import write_frame
    from florwb_engine.errors import FlorwbError

    if args.dry_run and not args.extract:
        raise FlorwbError("--dry-run goes with --extract", exit_code=2)
    store = open_store(args)
    if args.extract:
        return _extract(store, args)
    from florwb_engine.store.console import read_io

    frame = read_io(store, args.run, args.grep)
    say_ingest(store)
    if args.format == "table":
        _write_lines(frame)
        return 0
    write_frame(frame, args.format)
    return 0


def _write_lines(frame) -> None:
    """One terminal line per captured line: coordinates, channel, text (whole), repeats."""
    import pandas as pd

    coords = [c for c in frame.columns if c not in ("run_id", "channel", "text", "n")]
    if frame.empty:
        print("(no lines: the run printed nothing, or capture was off (FLORWB_CAPTURE=0))")
        return
    out = sys.stdout
    shown = {c: c if c.isprintable() and c.strip() == c and c else repr(c) for c in coords}
    # plain tuples: a namedtuple renames loop names that are no identifiers (`x/y`, "\n")
    for row in frame.itertuples(index=False, name=None):
        values = dict(zip(frame.columns, row))
        where = " ".join(f"{shown[c]}={int(values[c])}" for c in coords if not pd.isna(values[c]))
        repeat = f"  (×{values['n']})" if values["n"] > 1 else ""
        out.write(f"{where or '-':<20} {values['channel']:<7} {values['text']}{repeat}\n")


def _extract(store, args: argparse.Namespace) -> int:
    from florwb.cli import say_ingest
    from florwb.output import write_table
    from florwb_engine.errors import FlorwbError
    from florwb_engine.store.console import ExtractError, run_extraction

    try:
        found = run_extraction(store, args.run, args.extract, save=not args.dry_run)
    except ExtractError as exc:  # a misused option: exit 2, as argparse's
        raise FlorwbError(f"--extract: {exc}", exit_code=2) from None
    say_ingest(store)
    rows = [
        [" ".join(f"{c}={v}" for c, v in where.items()) or "-", name, value, line]
        for _ctx, name, value, line, where in found.found
    ]
    write_table(["where", "name", "value", "line"], rows, sys.stdout, last="fit")
    names = ", ".join(found.names)
    skipped = f"; {found.not_numbers} matches were not numbers" if found.not_numbers else ""
    if found.stored:
        print(
            f"stored {len(found.found)} values of {names} from {found.lines_matched} lines of "
            f"run {found.run_id} as source 'extract' (flor.dataframe reads them){skipped}"
        )
    else:
        print(
            f"dry run: would store {len(found.found)} values of {names} from "
            f"{found.lines_matched} lines of run {found.run_id}{skipped}"
        )
    return 0
