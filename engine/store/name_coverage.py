"""Which logged names some run still lacks: what a replay could still fill in.

A name a run has, recorded or from any replay, is done for that run (issue 14, defect 4),
so the offer to replay a working-tree statement lasts exactly while some run of its
script lacks it: gone once every run was replayed, still there after a cancelled replay,
and there for older versions even when the newest version records the name.
"""

from __future__ import annotations

from collections.abc import Sequence

from florwb_engine.store import Store
from florwb_engine.store.workbench import _session


def names_lacking(store: Store, script: str, names: Sequence[str]) -> list[str]:
    """Of `names` (in their order), those that a finished, versioned run of `script` has
    no value for, from any source."""
    if not names:
        return []
    with _session(store) as con:
        have = con.execute(
            """
            SELECT k.name, count(DISTINCT s.run_key)
            FROM name_stats s JOIN name_keys k ON k.name_key = s.name_key
            JOIN runs r ON r.run_key = s.run_key
            WHERE r.script = ? AND r.version IS NOT NULL AND r.status = 'finished'
              AND list_contains(?, k.name)
            GROUP BY k.name
            """,
            [script, list(names)],
        ).fetchall()
        (runs,) = con.execute(
            "SELECT count(*) FROM runs WHERE script = ? AND version IS NOT NULL "
            "AND status = 'finished'",
            [script],
        ).fetchone() or (0,)
    done = {name for name, n in have if n >= runs}
    return [n for n in names if n not in done]


__all__ = ["names_lacking"]
