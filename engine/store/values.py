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


def _exact_int(text: str) -> int | str:
    """The int of its digits; past Python's 4,300-digit limit on int <-> text (which every
    str() and JSON writer of it would hit) the digits themselves, as text."""
    try:
        return int(text)
    except ValueError:
        return text
