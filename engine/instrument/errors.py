"""The one exception instrumentation raises for inputs it cannot work on at all."""

from __future__ import annotations

from florwb_engine.errors import FlorwbError


class InstrumentError(FlorwbError):
    """The script cannot be read or parsed: a one-line reason, shown without a traceback."""

    title = "Cannot instrument the script"
