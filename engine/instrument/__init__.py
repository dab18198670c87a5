"""Hands-free instrumentation of a plain PyTorch training script (FLOR's hands-free mode).

`instrument(source)` returns the script with `import florwb as flor`, its training loops
in `flor.loop`, its model/optimizer/scheduler/GradScaler in `flor.checkpointing` around
the outer loop, and its literal hyperparameters and argparse arguments recorded with
`flor.arg`, plus a report of what was and was not done. Scripts it cannot instrument safely
are refused with a reason and left unchanged; the output always compiles, keeps every
byte outside the changed lines, and instrumenting it again changes nothing.
"""

from __future__ import annotations

from florwb_engine.instrument.errors import InstrumentError
from florwb_engine.instrument.files import BackupExists, read_script, write_instrumented
from florwb_engine.instrument.instrumenter import instrument
from florwb_engine.instrument.result import (
    INSTRUMENTED,
    PARTIAL,
    REFUSED,
    UNCHANGED,
    InstrumentResult,
    Note,
    unified_diff,
)

__all__ = [
    "INSTRUMENTED",
    "PARTIAL",
    "REFUSED",
    "UNCHANGED",
    "BackupExists",
    "InstrumentError",
    "InstrumentResult",
    "Note",
    "instrument",
    "read_script",
    "unified_diff",
    "write_instrumented",
]
