"""The one exception instrumentation raises for inputs it cannot work on at all."""

from __future__ import annotations


class InstrumentError(Exception):
    """The script cannot be read or parsed: a one-line reason, shown without a traceback."""
