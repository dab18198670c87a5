"""What a recording run prints and logs, kept with its loop coordinates.

`print` output is teed, not swallowed: `sys.stdout` and `sys.stderr` become thin proxies
that write every byte to the stream they replace first, then append
`(channel, ctx_id, text)` to a flat buffer (one list operation, like `flor.log`). `logging`
records are taken where their level still exists: `Logger.handle` is wrapped, and while a
record is dispatched the tee of that thread is muted, so a record a StreamHandler also
writes to stderr is kept once, with its level as the channel.

Turning writes into lines is the flusher's work (`drain`), off the training thread:
- a line is what ends in a newline; text repainted with a carriage return (progress bars)
  keeps only its last state;
- lines longer than MAX_LINE characters are cut, with how much was cut;
- a line repeated within one loop iteration (same channel and text) is kept once with a
  count (`n`), also when the repeats reach the journal in different flushes;
- at most MAX_LINES lines per run; past that, lines still reach the terminal, the run
  gets a `console capped` issue with how many were not kept, said once on stderr.

Lines travel in the run's journal as `console` events; ingestion stores them in
`console_rows` (view `console`). `FLORWB_CAPTURE=0` (or flordb's `FLOR_CAPTURE=0`) turns
capture off; `flor.log` does not go through here at all. Writes below Python's streams
(C extensions writing to file descriptor 1, subprocesses) are not seen.
"""

from __future__ import annotations

import importlib
import logging
import re
import sys
import threading
from types import ModuleType
from typing import Any

from florwb_engine import settings as env
from florwb_engine.journal_events import Console
from florwb_engine.record import notebook
from florwb_engine.record.values import REPLACED

MAX_LINE = env.read(env.CAPTURE_MAX_LINE)
MAX_LINES = env.read(env.CAPTURE_MAX_LINES)
CAPPED = "console capped"

# Written by the tee and the logging wrapper, drained by the flusher: channel, ctx_id, text.
RAW: list = []
_RAW_EXTEND = RAW.extend

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")


def enabled_by_env() -> bool:
    """False when FLORWB_CAPTURE or FLOR_CAPTURE says off (0, false, no, off)."""
    return env.read(env.CAPTURE) and env.read(env.FLOR_CAPTURE)


class Settings:
    """What `flor.set_capture` changes (flordb's names): on/off, line length, line cap."""

    def __init__(self) -> None:
        self.enabled = True
        self.max_line = MAX_LINE
        self.max_lines = MAX_LINES


settings = Settings()

# --- the training side ----------------------------------------------------------------

_on = False  # a run records and capture is installed
_api: ModuleType | None = None  # florwb_engine.record.api, for its current ctx id
_muted: set[int] = set()  # threads dispatching a logging record


class Tee:
    """A text stream that writes through to `stream` and keeps what was written.

    Anything a library asks of a stream (encoding, fileno, isatty, buffer...) is the
    wrapped stream's; only `write` and `writelines` are extended."""

    def __init__(self, stream: Any, channel: str) -> None:
        self._florwb_stream = stream
        self._florwb_channel = channel

    def write(self, text: str) -> int:
        n = self._florwb_stream.write(text)  # the terminal first, whatever happens next
        if _on and (not _muted or threading.get_ident() not in _muted):
            _RAW_EXTEND((self._florwb_channel, _api._CTX, text))  # type: ignore[union-attr]
        return n

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._florwb_stream, name)

    def __iter__(self) -> Any:
        return iter(self._florwb_stream)


def raw(stream: Any) -> Any:
    """The stream a tee writes to (florwb's own messages about capture go there)."""
    return stream._florwb_stream if isinstance(stream, Tee) else stream


_saved_handle: Any = None
# A Jupyter kernel logs its own messaging (message headers, session ids) through these
# loggers in the user's process; they are the host's lines, not the run's.
KERNEL_LOGGERS = frozenset(
    {"IPKernelApp", "ipykernel", "traitlets", "tornado", "jupyter_client", "comm", "zmq"}
)
_skipped_loggers: frozenset[str] = frozenset()


def _handle(logger: logging.Logger, record: logging.LogRecord) -> Any:
    """`Logger.handle` that keeps the record once, with its level as the channel; whatever
    the handlers write to a teed stream meanwhile is not kept a second time."""
    if not _on:
        return _saved_handle(logger, record)
    me = threading.get_ident()
    if me in _muted or str(record.name).partition(".")[0] in _skipped_loggers:
        return _saved_handle(logger, record)
    _muted.add(me)
    try:
        _RAW_EXTEND((str(record.levelname).lower(), _api._CTX, _record_text(record)))  # type: ignore[union-attr]
        return _saved_handle(logger, record)
    finally:
        _muted.discard(me)


def _record_text(record: logging.LogRecord) -> str:
    try:
        text = record.getMessage()
    except Exception as exc:  # the user's bad format args: logging itself reports them
        text = f"{record.msg!r} (message not formatted: {type(exc).__name__})"
    if record.name and record.name != "root":
        text = f"{record.name}: {text}"
    if record.exc_info and record.exc_info[0] is not None:
        text += "\n" + logging.Formatter().formatException(record.exc_info)
    return text + "\n"


def install() -> bool:
    """Tee stdout/stderr and wrap logging, unless capture is off. True when installed."""
    global _on, _api, _saved_handle, _skipped_loggers
    if _on or not settings.enabled or not enabled_by_env():
        return False
    _api = importlib.import_module("florwb_engine.record.api")
    _skipped_loggers = KERNEL_LOGGERS if notebook.shell() is not None else frozenset()
    _state.reset()
    if not isinstance(sys.stdout, Tee) and sys.stdout is not None:
        sys.stdout = Tee(sys.stdout, "stdout")
    if not isinstance(sys.stderr, Tee) and sys.stderr is not None:
        sys.stderr = Tee(sys.stderr, "stderr")
    if _saved_handle is None:
        _saved_handle = logging.Logger.handle
        logging.Logger.handle = _handle  # type: ignore[method-assign, assignment]
    _on = True
    return True


def uninstall() -> None:
    """Stop keeping lines and put the streams and logging back (at the run's end)."""
    global _on, _saved_handle
    _on = False
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, Tee):
            setattr(sys, name, stream._florwb_stream)
    if _saved_handle is not None:
        logging.Logger.handle = _saved_handle  # type: ignore[method-assign]
        _saved_handle = None


def disable_in_child() -> None:
    """A forked child (a DataLoader worker) writes through its tees but keeps nothing."""
    global _on
    _on = False
    RAW.clear()


# --- the flusher side -------------------------------------------------------------------


class _Lines:
    """Assembly of raw writes into kept lines; owned by the flusher (one thread)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.partial: dict[str, list] = {}  # channel -> [text, ctx_id]
        self.seq = 0  # lines kept so far in this run
        self.ctx: int | None = None  # the iteration the duplicate index is for
        self.seen: dict[tuple[str, str], list] = {}  # (channel, text) -> its line record
        self.dropped = 0
        self.said_capped = False

    def add(self, channel: str, ctx: int, text: str, lines: list, more: dict) -> None:
        partial = self.partial.get(channel)
        if partial is not None:
            text = partial[0] + text
            ctx = partial[1]
        pieces = text.split("\n")
        for piece in pieces[:-1]:
            self._line(channel, ctx, piece, lines, more)
        rest = pieces[-1]
        if rest:
            if "\r" in rest:
                rest = rest[rest.rfind("\r") + 1 :]
            # A bar that never ends its line: bounded, its last state kept.
            if len(rest) > 4 * settings.max_line:
                rest = rest[: 4 * settings.max_line]
            self.partial[channel] = [rest, ctx]
        else:
            self.partial.pop(channel, None)

    def end(self, lines: list, more: dict) -> None:
        """Lines left without a newline at the run's end are kept too."""
        for channel, (text, ctx) in list(self.partial.items()):
            self._line(channel, ctx, text, lines, more)
        self.partial.clear()

    def _line(self, channel: str, ctx: int, text: str, lines: list, more: dict) -> None:
        if text.endswith("\r"):
            text = text[:-1]
        if "\r" in text:
            text = text[text.rfind("\r") + 1 :]
        if "\x1b" in text:
            text = _ANSI.sub("", text)
        text = text.rstrip()
        if not text.strip():
            return
        if len(text) > settings.max_line:
            cut = len(text) - settings.max_line
            text = f"{text[: settings.max_line]}… [{cut:,} more characters]"
        if ctx != self.ctx:
            self.ctx = ctx
            self.seen.clear()
        record = self.seen.get((channel, text))
        if record is not None:
            if record[5]:  # still in this flush's batch: count it there
                record[4] += 1
            else:  # already in the journal: the increment goes with the next batch
                more[record[0]] = more.get(record[0], 0) + 1
            return
        if self.seq >= settings.max_lines:
            self.dropped += 1
            REPLACED.add(CAPPED, f"lines past {settings.max_lines:,} not kept")
            if not self.said_capped:
                self.said_capped = True
                print(
                    f"florwb: this run printed more than {settings.max_lines:,} lines; "
                    "the rest reach the terminal but are not kept",
                    file=raw(sys.stderr),
                )
            return
        record = [self.seq, ctx, channel, text, 1, True]
        self.seq += 1
        self.seen[(channel, text)] = record
        lines.append(record)


_state = _Lines()


def drain(events: list, final: bool = False) -> None:
    """Turn what was written since the last call into one `console` event in `events`:
    `lines` [(seq, ctx_id, channel, text, n)], `more` [(seq, n)] for repeats of lines an
    earlier event holds. `final`: the run ends, partial lines are kept as they are."""
    n = len(RAW)
    if not n and not (final and _state.partial):
        return
    items = RAW[:n]
    del RAW[:n]
    lines: list = []
    more: dict[int, int] = {}
    add = _state.add
    for i in range(0, n - n % 3, 3):
        text = items[i + 2]
        if type(text) is not str:
            text = _as_text(text)
        add(items[i], items[i + 1], text, lines, more)
    if final:
        _state.end(lines, more)
    if not lines and not more:
        return
    for record in lines:
        record[5] = False  # sent: later repeats are increments
    events.append(Console([tuple(r[:5]) for r in lines], sorted(more.items())).to_dict())


def _as_text(value: object) -> str:
    """What a non-str write (bytes from a confused library) looks like as text."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    try:
        return str(value)
    except Exception:  # a value that cannot say what it is
        return f"<{type(value).__name__}>"
