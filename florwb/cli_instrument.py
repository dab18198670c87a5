"""`florwb instrument SCRIPT [--write]`: add florwb recording to a plain training script.

Prints a unified diff on stdout and, on stderr, one line per change or per thing left
undone (with the line of the original script), then a summary. `--write` applies the
change in place. Exit status 0 when the script is instrumented (fully or partly) or was
already instrumented; 1 with a one-line reason when nothing could be done safely (the
file is then never touched); 2 for usage errors.

Wired into `florwb.cli` by `add_parser(subparsers)`; florwb_engine.instrument (and libcst) load
only when the command runs, so other commands start as fast as before.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(subparsers) -> None:
    """Register the `instrument` subcommand on florwb's subparsers."""
    p = subparsers.add_parser(
        "instrument",
        help="add florwb recording to a plain training script",
        description=(
            "Print the diff that instruments a plain PyTorch training script: import florwb, "
            "flor.loop around the training loops, flor.checkpointing of model, optimizer, "
            "LR scheduler and GradScaler around the outer loop, flor.arg for literal "
            "hyperparameters and argparse arguments. --write applies it."
        ),
    )
    p.add_argument("script", metavar="SCRIPT", help="the training script (.py)")
    p.add_argument(
        "--write",
        action="store_true",
        help="apply the change in place (keeps SCRIPT.bak unless git holds the original)",
    )
    p.set_defaults(func=cmd_instrument)


def cmd_instrument(args: argparse.Namespace) -> int:
    """Handler for `florwb instrument`; returns the exit status."""
    from florwb_engine.instrument import (
        REFUSED,
        InstrumentError,
        instrument,
        read_script,
        unified_diff,
        write_instrumented,
    )

    path = Path(args.script)
    shown = args.script
    try:
        source = read_script(path)
        result = instrument(source)
    except InstrumentError as exc:
        raise InstrumentError(f"{shown}: {exc}") from None
    if result.status == REFUSED:
        raise InstrumentError(result.summary(shown))
    if result.changed:
        sys.stdout.write(unified_diff(result.original, result.code, shown))
        sys.stdout.flush()
    for line in result.report(shown):
        print(line, file=sys.stderr)
    print(result.summary(shown), file=sys.stderr)
    if args.write and result.changed:
        try:
            backup = write_instrumented(path, result.original, result.code)
        except OSError as exc:
            raise InstrumentError(f"cannot write {shown}: {exc.strerror}") from None
        kept = f" (original kept in {backup.name})" if backup else " (git holds the original)"
        print(f"wrote {shown}{kept}", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (`python -m florwb.cli_instrument SCRIPT`), same as the subcommand."""
    parser = argparse.ArgumentParser(prog="florwb")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["instrument", *(sys.argv[1:] if argv is None else argv)])
    from florwb.cli import fail
    from florwb_engine.errors import FlorwbError

    try:
        return args.func(args)
    except FlorwbError as exc:
        return fail(exc)
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
