"""`florwb [PATH]` and `florwb demo`: open the workbench. Imported only when a screen is
wanted, so the rest of the CLI never pays for Textual."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path


def has_terminal() -> bool:
    """Whether a person can see and type into the workbench: without a terminal on both
    ends (a pipe, a script, cron, `nohup`), Textual reads an input that never blocks and
    spins a core forever with nothing on screen."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def open_workbench(project: Path) -> int:
    """Run the workbench on the project containing `project`; returns the exit code."""
    return run_workbench(project)


def run_workbench(
    project: Path,
    *,
    headless: bool = False,
    size: tuple[int, int] | None = None,
    on_ready: Callable[[], None] | None = None,
) -> int:
    """open_workbench with the knobs the benchmarks and screenshots need."""
    from florwb_engine.project import find_project, store_dir

    root = find_project(project)
    if not store_dir(root).is_dir():
        print(
            f"florwb: no recorded runs in {root} (run a training script that imports florwb, "
            "or try `florwb demo`)",
            file=sys.stderr,
        )
        return 1
    if not headless and not has_terminal():
        print(
            "florwb: the workbench needs a terminal (stdin and stdout are not one); "
            "`florwb runs`, `florwb query` and `florwb dataframe` read the same runs",
            file=sys.stderr,
        )
        return 1
    from florwb.app import WorkbenchApp

    app = WorkbenchApp(root, on_ready=on_ready)
    result = app.run(headless=headless, size=size)
    return int(result or 0)


def main(argv: list[str] | None = None) -> int:
    """`python -m florwb.cli_app [PATH]`, handy before the CLI wiring exists."""
    args = sys.argv[1:] if argv is None else argv
    return open_workbench(Path(args[0] if args else "."))


if __name__ == "__main__":
    sys.exit(main())
