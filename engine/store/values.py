"""Decoding a stored value back into the Python value that was recorded.

Args and logged values are stored as (value DOUBLE, text VARCHAR, vtype) so numbers stay
numbers in SQL. Every reader (the CLI's run listing, the workbench, replay planning) turns
them back with this one function, so a value reads the same wherever it is shown.
"""

from __future__ import annotations

import json
from typing import Any, overload


def decode_value(value: float | None, text: str | None, vtype: str | None) -> Any:
    """The recorded Python value of one stored (value, text, vtype) triple.

    A number column that is NULL for an int or bool (never written so by florwb, but a
    hand-edited catalog may hold it) gives None rather than an exception, and JSON that
    does not parse gives its text: a reader shows what is there instead of failing.
    """
    if vtype == "int" and text is not None:  # exact digits of an int a float cannot hold
        return _exact_int(text)
    if vtype == "int":
        return int(value) if value is not None else None
    if vtype == "bool":
        return bool(value) if value is not None else None
    if vtype == "float":
        return value
    if vtype == "json" and text is not None:
        try:
            return json.loads(text)
        except ValueError:
            return text
    return text


@overload
def exact_number(value: float, digits: str | None) -> float: ...
@overload
def exact_number(value: float | None, digits: str | None) -> float | None: ...
def exact_number(value: float | None, digits: str | None) -> float | None:
    """A number a reader shows alone (a run's last value): the int of its kept digits when
    it is an int a float would round (past 2**53), else `value`."""
    if digits is not None:
        exact = _exact_int(digits)
        if isinstance(exact, int):
            return exact
    return value


BOUNDS = ("plain_low", "plain_high", "big_low", "big_high")


def exact_bounds_sql(value: str = "value", text: str = "text") -> str:
    """Four aggregates, named as BOUNDS, for a run's exact low and high (`exact_bounds`
    reads them): the bounds of the values a float holds exactly, and of the ints kept as
    digits (up to HUGEINT's 2**127; wider ones are left to the rounded bounds)."""
    plain = f"isfinite({value}) AND {text} IS NULL"
    big = f"TRY_CAST({text} AS HUGEINT)"
    return (
        f"min({value}) FILTER (WHERE {plain}) AS plain_low, "
        f"max({value}) FILTER (WHERE {plain}) AS plain_high, "
        f"min({big}) AS big_low, max({big}) AS big_high"
    )


def exact_bounds(
    plain_low: float | None,
    plain_high: float | None,
    big_low: Any,
    big_high: Any,
) -> tuple[float | None, float | None]:
    """A run's low and high as logged: Python compares an int and a float exactly, so an
    int past 2**53 is its own bound, not its rounded neighbour."""
    lows = [v for v in (plain_low, None if big_low is None else int(big_low)) if v is not None]
    highs = [v for v in (plain_high, None if big_high is None else int(big_high)) if v is not None]
    return (min(lows) if lows else None, max(highs) if highs else None)


def _exact_int(text: str) -> int | str:
    """The int of its digits; past Python's 4,300-digit limit on int <-> text (which every
    str() and JSON writer of it would hit) the digits themselves, as text."""
    try:
        return int(text)
    except ValueError:
        return text
