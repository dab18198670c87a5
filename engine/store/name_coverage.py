"""Which logged names some run still lacks: what a replay could still fill in.

A name a run has, recorded or from any replay that did not diverge (a diverged replay's
values are withheld: store/verdicts.py), is done for that run,
so the offer to replay a working-tree statement lasts exactly while some finished run of
its script lacks it: gone once every run was replayed, still there after a cancelled
replay, and there for older versions even when the newest version records the name.
Computed from counts the history read in its own session (queries.History), so the check
opens no connection of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def names_lacking(
    finished: Mapping[str, int],
    having: Mapping[str, Mapping[str, int]],
    script: str,
    names: Sequence[str],
) -> list[str]:
    """Of `names` (in their order), those that some finished, versioned run of `script`
    has no value for. `finished`: runs per script; `having`: per script, runs per name."""
    runs = finished.get(script, 0)
    have = having.get(script, {})
    return [n for n in names if have.get(n, 0) < runs]


__all__ = ["names_lacking"]
