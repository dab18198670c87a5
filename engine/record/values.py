"""Turning logged values into journal-safe primitives.

Primitives pass through untouched (that is the hot path). Anything else is converted at the
call, not later: a tensor or array logged now may be modified in place by the next optimizer
step, and the journal must hold the value as it was when logged. Non-scalar values become
JSON text, marked by wrapping them in a 2-tuple so a plain string that happens to look like
JSON stays a string.
"""

from __future__ import annotations

import json
import math
from typing import Any

PRIMITIVES = frozenset({int, float, str, bool, type(None)})
MAX_ELEMENTS = 10_000


def encode(value: Any) -> Any:
    if type(value) in PRIMITIVES:
        return value
    scalar = _as_scalar(value)
    if scalar is not _NO:
        return scalar
    if isinstance(value, (str, int, float)):  # subclasses of primitives (enums, np.float64)
        for base in (bool, int, float, str):
            if isinstance(value, base):
                return base(value)
    try:
        return ("json", json.dumps(_jsonable(value), allow_nan=True))
    except (TypeError, ValueError, RecursionError):
        return ("object", _short_repr(value))


_NO = object()


def _as_scalar(value: Any) -> Any:
    """One-element tensors and numpy scalars become Python numbers."""
    numel = getattr(value, "numel", None)  # torch.Tensor
    if numel is not None and callable(numel):
        try:
            if numel() == 1:
                return value.item()
        except (RuntimeError, TypeError, ValueError):
            return _NO
        return _NO
    size = getattr(value, "size", None)  # numpy scalar / ndarray
    if isinstance(size, int) and size == 1 and hasattr(value, "item") and hasattr(value, "dtype"):
        try:
            item = value.item()
        except (TypeError, ValueError):
            return _NO
        return item if type(item) in PRIMITIVES else _NO
    return _NO


def _jsonable(value: Any) -> Any:
    if type(value) in PRIMITIVES:
        if isinstance(value, float) and not math.isfinite(value):
            return repr(value)
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    scalar = _as_scalar(value)
    if scalar is not _NO:
        return _jsonable(scalar)
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        count = _element_count(value)
        if count is not None and count <= MAX_ELEMENTS:
            return _jsonable(tolist())
        shape = tuple(getattr(value, "shape", ()))
        return f"<{type(value).__name__} shape={shape} dtype={getattr(value, 'dtype', '?')}>"
    raise TypeError(type(value).__name__)


def _element_count(value: Any) -> int | None:
    numel = getattr(value, "numel", None)
    if callable(numel):
        return int(numel())
    size = getattr(value, "size", None)
    return size if isinstance(size, int) else None


def _short_repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not break the training script
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 1000 else text[:997] + "..."
