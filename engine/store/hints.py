"""Advice derived from a run's recorded timings, worded once for the CLI and the workbench."""

from __future__ import annotations

DATA_WAIT_HINT_SHARE = 0.2  # waiting on the data iterator for more than this share of loop time


def data_wait_hint(share: float | None) -> str | None:
    """The input-pipeline advice for a run that waited on its data `share` of loop time, or
    None when the wait is unremarkable (or was not measured)."""
    if share is None or share <= DATA_WAIT_HINT_SHARE:
        return None
    return (
        f"waited on the data iterator {share:.0%} of loop time; "
        "try more DataLoader workers or prefetching"
    )
