"""`florwb propagate NEW.py OLD.py`: NEW's log statements placed into OLD, byte-exact, with
one line per statement saying where it went and how sure the place is."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from florwb_engine.errors import FlorwbError


def add_parsers(sub) -> None:
    p = sub.add_parser("propagate", help="place NEW's missing log statements into OLD")
    p.add_argument("new", metavar="NEW.py")
    p.add_argument("old", metavar="OLD.py")
    p.add_argument("-o", "--output", metavar="OUT", help="write the result here, not stdout")
    p.add_argument("--json", action="store_true", help="report placements as JSON")
    p.set_defaults(func=cmd_propagate)


def cmd_propagate(args: argparse.Namespace) -> int:
    from florwb_engine.propagate import propagate

    sources = []
    for path in (args.new, args.old):
        try:
            sources.append(Path(path).read_text())
        except OSError as exc:
            raise FlorwbError(f"cannot read {path}: {exc.strerror}") from None
    result = propagate(*sources)
    if args.output:
        Path(args.output).write_text(result.code)
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif not args.output:
        sys.stdout.write(result.code)
    if not args.json:
        for p in result.placements:
            print(f"florwb: {_placement_text(p)}", file=sys.stderr)
    return 0


def _placement_text(p) -> str:
    """One line per statement: where it went and how sure the place is (its anchor)."""
    head = f"{p.name} (line {p.new_line})"
    if p.status == "unplaced":
        return f"{head} not placed: {p.reason}"
    if p.status == "present":
        return f"{head} already present at line {p.old_line}" + (
            f" ({p.reason})" if p.reason else ""
        )
    text = f"{head} inserted at line {p.old_line}, anchored {p.anchor}"
    return text + (f" ({p.reason})" if p.reason else "")
