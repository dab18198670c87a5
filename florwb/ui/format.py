"""Short, fixed-width text for ids, times, numbers and args: what fits in 80 columns."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

STATUS_ICONS = {
    "finished": "✓",
    "running": "●",
    "failed": "✗",
    "killed": "✗",
    "interrupted": "◌",
    "replayed": "↻",
    "diverged": "≠",
}
STATUS_STYLES = {
    "finished": "green",
    "running": "bold yellow",
    "failed": "bold red",
    "killed": "red",
    "interrupted": "magenta",
    "replayed": "cyan",
    "diverged": "bold yellow",
}


# The title icon: a plain character (Textual's default ⭘ is an empty box without a Nerd
# Font); CP437 has it, so every monospace font does.
TITLE_ICON = "≡"


def short_run(run_id: str) -> str:
    """The random tail of a run id (`20261121-143501-a1b2c3` -> `a1b2c3`)."""
    return run_id.rsplit("-", 1)[-1] if run_id.count("-") >= 2 else run_id[:8]


def short_version(version: str | None) -> str:
    return version[:8] if version else "-"


def clock(moment: datetime | None) -> str:
    return moment.strftime("%m-%d %H:%M") if moment else "-"


def duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def number(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.{digits}g}"
    return str(value)


def size(n_bytes: int | None) -> str:
    if n_bytes is None:
        return "-"
    value = float(n_bytes)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def percent(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def args_text(args: Mapping[str, Any], names: Iterable[str] | None = None) -> str:
    chosen = list(names) if names is not None else list(args)
    return " ".join(f"{n}={number(args[n], 3)}" for n in chosen if n in args)


def rows_label(shown: int, total: int | None) -> str:
    """Honest truncation: '1,000 of 2,500,000 rows', '1,000 of >1,000 rows' while counting."""
    if total is None:
        return f"{shown:,} of >{shown:,} rows (counting…)"
    if total > shown:
        return f"{shown:,} of {total:,} rows"
    return f"{total:,} row" + ("" if total == 1 else "s")


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def one_line(exc: BaseException) -> str:
    """An exception as the one line the workbench shows."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
