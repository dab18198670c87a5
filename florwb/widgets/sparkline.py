"""Sparklines as text, so they fit in a list row or a table cell (Textual's Sparkline is a
whole widget). Values are averaged into at most `width` buckets; NaN and missing values
leave a gap rather than a misleading bar."""

from __future__ import annotations

import math
from collections.abc import Sequence

BLOCKS = "▁▂▃▄▅▆▇█"


def resample(values: Sequence[float | None], width: int) -> list[float]:
    clean = [_as_float(v) for v in values]
    if len(clean) <= width:
        return clean
    out = []
    for i in range(width):
        start = i * len(clean) // width
        end = max((i + 1) * len(clean) // width, start + 1)
        bucket = [v for v in clean[start:end] if not math.isnan(v)]
        out.append(sum(bucket) / len(bucket) if bucket else math.nan)
    return out


def sparkline(
    values: Sequence[float | None],
    width: int = 12,
    low: float | None = None,
    high: float | None = None,
) -> str:
    """A string of at most `width` block characters (empty for no values)."""
    if width <= 0 or not values:
        return ""
    points = resample(values, width)
    finite = [v for v in points if not math.isnan(v)]
    if not finite:
        return " " * len(points)
    lo = min(finite) if low is None else low
    hi = max(finite) if high is None else high
    span = hi - lo
    chars = []
    for v in points:
        if math.isnan(v):
            chars.append(" ")
        elif span <= 0:
            chars.append(BLOCKS[3])
        else:
            level = int((min(max(v, lo), hi) - lo) / span * (len(BLOCKS) - 1) + 0.5)
            chars.append(BLOCKS[level])
    return "".join(chars)


def _as_float(value: object) -> float:
    """The value as a finite float (bools and decimals too), else NaN."""
    if value is None or isinstance(value, str):
        return math.nan
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return math.nan
    return number if math.isfinite(number) else math.nan
