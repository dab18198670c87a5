"""Which replay mode the placed statements need (FLOR's replay cases).

Before the main loop: PREFIX (run the script up to the loop). In the main loop's body:
OUTER (per iteration restore the checkpoint and skip the inner loops), unless that body
reads what the inner loops set, which skipping would leave stale. Inside a nested loop:
INNER (re-execute the iterations). Where each statement sits comes from the propagation
result (`Placement.loop_path`); where the main loop is and what its inner loops leave,
from the loop state of the placed code (analysis/loop_state.py). This module parses no
code.
"""

from __future__ import annotations

from florwb_engine.analysis.loop_state import LoopState
from florwb_engine.contract.replay_spec import INNER, OUTER, PREFIX, ReplayMode
from florwb_engine.propagate import Placement


def replay_mode(
    placed: dict[str, Placement],
    main_loop: str | None,
    found: LoopState,
    memoized: frozenset[str] = frozenset(),
) -> tuple[ReplayMode | None, str | None]:
    """The replay mode all placed statements need and a note, or (None, reason). `found`
    is the loop state of the placed code: where the main loop ends and which names the
    code after an inner loop reads (`leaves`: skipping the inner loops restores registered
    state, not plain variables, so `print(loss.item())` after the step loop would read a
    stale value). Names in `memoized` are put back where a skipped inner loop would have
    left them."""
    modes: list[ReplayMode] = []
    for name, placement in placed.items():
        path = tuple(placement.loop_path)
        if not path:
            if found.found and placement.old_line is not None:
                if placement.old_line > found.lines[1]:
                    return None, (
                        f"{name} runs after the main loop; only statements before "
                        "or inside it can be replayed"
                    )
            modes.append(PREFIX)
        elif main_loop is not None and path[0] != main_loop:
            return None, f"{name} sits in loop {path[0]!r}, not in the main loop {main_loop!r}"
        elif len(path) == 1:
            modes.append(OUTER)
        else:
            modes.append(INNER)
    mode: ReplayMode = INNER if INNER in modes else OUTER if OUTER in modes else PREFIX
    note = None
    if mode == OUTER:
        stale = set(found.leaves) - memoized
        if stale:
            mode = INNER
            listed = ", ".join(sorted(stale)[:4])
            note = (
                f"the {main_loop} body reads {listed} after the inner loop sets it, "
                "so inner loops are re-executed"
            )
    return mode, note
