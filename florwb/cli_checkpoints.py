"""`florwb checkpoints RUN [--json]`: the checkpoints a run wrote, to pull a past model.

Reads the run's checkpoint folder only (no DuckDB, no torch): one line per checkpoint with
its loop, iteration, size, kind (flor.checkpointing's file, the script's own torch.save
mirrored, or both) and files, then the call that loads the latest one. A run with no
checkpoints is a one-line failure (exit 1). Wired into `florwb.cli` by `add_parser`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_parser(subparsers) -> None:
    """Register the `checkpoints` subcommand on florwb's subparsers."""
    p = subparsers.add_parser(
        "checkpoints",
        help="list a run's checkpoints (loop, iteration, size, path)",
        description="List the checkpoints of RUN (an id or a unique prefix of one); "
        "load one with flor.load(RUN, ITERATION) or flor.load_into(RUN, model=..., epoch=N).",
    )
    p.add_argument("run", metavar="RUN")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_checkpoints)


def cmd_checkpoints(args: argparse.Namespace) -> int:
    from florwb.output import write_table
    from florwb_engine.errors import FlorwbError
    from florwb_engine.project import find_project
    from florwb_engine.record.pull import list_checkpoints

    project = find_project(getattr(args, "project", None))
    found = list_checkpoints(project, args.run)  # CheckpointError: an unknown run
    if not found:
        raise FlorwbError(f"run {args.run} has no finished checkpoint")
    if args.json:
        rows = [
            {
                "run_id": c.run_id,
                "loop": c.loop,
                "iteration": c.iteration,
                "bytes": c.bytes,
                "path": str(c.path),
                "kind": c.kind,
                "saves": [str(p) for p in c.saves],
            }
            for c in found
        ]
        json.dump(rows, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    write_table(
        ["loop", "iteration", "bytes", "kind", "file"],
        [[c.loop, c.iteration, c.bytes, c.kind, _files(c)] for c in found],
        sys.stdout,
    )
    last = found[-1]
    print(f"in {last.path.parent}")
    where = f"{last.loop}=" if last.loop.isidentifier() else "iteration="
    print(f"load: flor.load_into({last.run_id!r}, model=..., {where}{last.iteration})")
    return 0


def _files(c: Any) -> str:
    """The file that loads first, and how many more the iteration has (mirrored saves)."""
    first = c.path if c.kind != "torch.save" else c.saves[0]
    more = len(c.saves) - (1 if c.kind == "torch.save" else 0)
    return first.name + (f" (+{more})" if more else "")
