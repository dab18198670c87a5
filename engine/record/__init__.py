"""Runtime used inside training scripts (see api.py for the calls)."""

from florwb_engine.record import start_rng

start_rng.note_import()  # first: the RNG states before the script could draw after import

from florwb_engine.record.api import arg, checkpointing, commit, log, loop, set_checkpoint_budget

__all__ = ["arg", "checkpointing", "commit", "log", "loop", "set_checkpoint_budget"]
