"""An opt-in summary line of logged values, for users who miss flordb's echo.

flordb prints every logged value; florwb prints nothing, which keeps the hot path at a
list append. With `FLORWB_ECHO=1` a recording prints one line on stderr at the end of
each outermost loop iteration, at most one a second (`FLORWB_ECHO=5`: one per 5 s), with
the last value of each name logged since the previous line:

    florwb: epoch 3/10 · loss 0.3121 · acc 0.91

The last iteration's line is always printed. Only while recording, never in a replay.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from florwb_engine import settings
from florwb_engine.record.values import PENDING, PRIMITIVES, Staged

ENV = settings.ECHO.name


def interval_from_env() -> float | None:
    """Seconds between lines, or None when echo is off (unset, empty, 0 or not a number)."""
    return settings.read(settings.ECHO)


class Echo:
    """Keeps the last logged value per name and prints them once per outer iteration."""

    def __init__(self, extend: Callable[[tuple], None], interval_s: float) -> None:
        self._extend = extend
        self.interval_s = interval_s
        self.last: dict[str, object] = {}
        self._printed = float("-inf")

    def extend(self, record: tuple) -> None:
        """Stands in for the log buffer's extend: the same append, plus the last value."""
        self._extend(record)
        name, value = record[0], record[1]
        if (type(value) in PRIMITIVES or type(value) is Staged) and type(name) is str:
            self.last[name] = value

    def iteration_ended(self, loop: str, index: int, total: int | None) -> None:
        now = time.monotonic()
        final = total is not None and index + 1 >= total
        if not self.last or (now - self._printed < self.interval_s and not final):
            return
        self._printed = now
        where = f"{loop} {index + 1}" + (f"/{total}" if total is not None else "")
        values = " · ".join(
            f"{name} {_short(value)}" for name, value in self.last.items() if _ready(value)
        )
        self.last.clear()
        if values:  # none when every value is a GPU copy still under way
            print(f"florwb: {where} · {values}", file=sys.stderr, flush=True)


def _ready(value: object) -> bool:
    """A GPU value the flusher has not read yet is left out of the line: reading it here
    would stall the training thread on the device."""
    return type(value) is not Staged or value.value is not PENDING


def _short(value: object) -> str:
    if type(value) is Staged:
        value = value.value  # read by the flusher already (_ready)
    if isinstance(value, float):
        return f"{value:.4g}"
    text = str(value)
    return text if len(text) <= 40 else text[:39] + "…"
