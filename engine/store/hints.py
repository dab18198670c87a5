"""Advice derived from a run's recorded timings, worded once for the CLI and the workbench."""

from __future__ import annotations

DATA_WAIT_HINT_SHARE = 0.2  # waiting on the data iterator for more than this share of loop time
# ...and for at least this long in all: a loop of a few microseconds (a toy run over
# range(3)) can spend 25% of them in `next()` and is no input pipeline to tune
DATA_WAIT_HINT_MIN_S = 0.1


def data_wait_hint(share: float | None, wait_s: float | None) -> str | None:
    """The input-pipeline advice for a run that waited on its data `share` of loop time
    (`wait_s` seconds in all), or None when the wait is unremarkable (or not measured)."""
    if share is None or share <= DATA_WAIT_HINT_SHARE:
        return None
    if wait_s is None or wait_s < DATA_WAIT_HINT_MIN_S:
        return None
    return (
        f"waited on the data iterator {share:.0%} of loop time; "
        "try more DataLoader workers or prefetching"
    )
