"""The one exception propagation raises, so callers (CLI, replay) can show a one-line reason.

Everything that is an expected outcome (a statement that cannot be placed, a name the old
version lacks) is *reported* in the result instead; this exception is only for inputs that
cannot be analysed at all, such as a source that does not parse.
"""

from __future__ import annotations

from florwb_engine.errors import FlorwbError


class PropagationError(FlorwbError):
    """A source cannot be analysed; the message is one line and names the file line."""

    title = "Cannot place the log statements"
