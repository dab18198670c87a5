"""Runtime used inside training scripts (see api.py for the calls)."""

from florwb_engine.record import start_rng
from florwb_engine.record.api import (
    arg,
    checkpointing,
    commit,
    iteration,
    load_checkpoint,
    log,
    loop,
    set_checkpoint_budget,
    set_ckpt_interval,
)

# The RNG states at `import florwb`, before the script can draw after importing it (nothing
# imported above draws from a global generator).
start_rng.note_import()

__all__ = [
    "arg",
    "checkpointing",
    "commit",
    "iteration",
    "load_checkpoint",
    "log",
    "loop",
    "set_checkpoint_budget",
    "set_ckpt_interval",
]
