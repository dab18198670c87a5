"""Expected failures, and where unexpected ones are kept.

An expected failure (bad SQL, no run matches, a script that does not parse, a busy
catalog) is a `FlorwbError`: its message is one line that a user can act on, so the CLI
prints it as `florwb: <message>` and exits with `exit_code`, and the workbench shows it in
its error modal under `title`. Anything else is a bug or an environment florwb did not
expect; its traceback is what finds the cause, so the workbench writes it to
`.florwb/logs/errors.log` (`log_exception`) before showing its first line.

This module imports nothing heavy: the CLI catches `FlorwbError` before any engine
module that raises one has been imported.
"""

from __future__ import annotations

import os
import traceback
from datetime import datetime, timezone
from pathlib import Path

LOG_NAME = "errors.log"
LOG_MAX_BYTES = 1 << 20  # past this the log moves to errors.log.1 (one older file kept)


class FlorwbError(Exception):
    """An expected failure: a one-line message, a title for the workbench's modal, and the
    exit status of the CLI command it ends (1; 2 for a usage error)."""

    title: str = ""  # "" : the workbench names what it was doing instead
    exit_code: int = 1

    def __init__(
        self, *args: object, title: str | None = None, exit_code: int | None = None
    ) -> None:
        super().__init__(*args)
        if title is not None:
            self.title = title
        if exit_code is not None:
            self.exit_code = exit_code

    def one_line(self) -> str:
        """The message as the one line the CLI and the modal show."""
        text = str(self).strip()
        return text.splitlines()[0] if text else type(self).__name__


def log_path(store: Path) -> Path:
    """The error log in a project's `.florwb/` folder (`project.store_dir`)."""
    return Path(store) / "logs" / LOG_NAME


def log_exception(store: Path, what: str, exc: BaseException) -> Path:
    """Append `exc` with its traceback to the error log in `store` (a project's `.florwb/`
    folder) and return the log's path. The log is bounded: past LOG_MAX_BYTES it becomes
    `errors.log.1` (replacing the older one) and a new log starts. Raises OSError when it
    cannot be written (the caller says so beside the error it shows: the traceback is then
    on screen only), also where the project has no `.florwb/` folder: readers create none."""
    path = log_path(store)
    path.parent.mkdir(exist_ok=True)  # FileNotFoundError without .florwb/
    try:
        if path.stat().st_size > LOG_MAX_BYTES:
            os.replace(path, path.with_name(LOG_NAME + ".1"))
    except FileNotFoundError:
        pass
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    with path.open("a", encoding="utf-8") as out:
        out.write(f"--- {stamp} pid {os.getpid()}: {what}\n")
        out.write(format_traceback(exc))
        out.write("\n")
    return path


def format_traceback(exc: BaseException) -> str:
    """The exception with its traceback and chained causes, as Python prints them."""
    return "".join(traceback.format_exception(exc))
