"""Which replay mode the placed statements need (FLOR's replay cases).

Before the main loop: PREFIX (run the script up to the loop). In the main loop's body:
OUTER (per iteration restore the checkpoint and skip the inner loops), unless that body
reads what the inner loops set, which skipping would leave stale. Inside a nested loop:
INNER (re-execute the iterations). Where each statement sits and what the loops read come
from the propagation result (`Placement.loop_path`, `PropagationResult.loops`); this module
does not parse code.
"""

from __future__ import annotations

from florwb_engine.analysis.loop_state import LoopState
from florwb_engine.contract.replay_spec import INNER, OUTER, PREFIX, ReplayMode
from florwb_engine.propagate import FlorLoop, Placement, PropagationResult


def replay_mode(
    result: PropagationResult,
    placed: dict[str, Placement],
    main_loop: str | None,
    memoized: frozenset[str] = frozenset(),
    found: LoopState | None = None,
) -> tuple[ReplayMode | None, str | None]:
    """The replay mode all placed statements need and a note, or (None, reason). Names in
    `memoized` are put back where a skipped inner loop would have left them; `found`, the
    loop state of the placed code, says which names the code after an inner loop reads."""
    main = _main_loop(result.loops, main_loop)
    modes: list[ReplayMode] = []
    for name, placement in placed.items():
        path = tuple(placement.loop_path)
        if not path:
            if main is not None and placement.old_line is not None:
                if placement.old_line > main.last_line:
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
        stale = reads_inner(result.loops, main_loop, found) - memoized
        if stale:
            mode = INNER
            listed = ", ".join(sorted(stale)[:4])
            note = (
                f"the {main_loop} body reads {listed} after the inner loop sets it, "
                "so inner loops are re-executed"
            )
    return mode, note


def _main_loop(loops: tuple[FlorLoop, ...], main_loop: str | None) -> FlorLoop | None:
    """The outermost, first loop named `main_loop`."""
    named = [loop for loop in loops if loop.name == main_loop]
    return min(named, key=lambda loop: (len(loop.path), loop.first_line)) if named else None


def reads_inner(
    loops: tuple[FlorLoop, ...], main_loop: str | None, found: LoopState | None = None
) -> set[str]:
    """Names the main loop's body reads outside its inner loops that the inner loops assign.

    Skipping the inner loops restores registered state (model, optimizer...) from the
    checkpoint, but not plain variables: `print(loss.item())` or a running total after the
    step loop would read a stale or missing value. Such bodies need the inner loops run,
    unless the names are memoized.

    Without `found` this is every such name the body reads anywhere. With it (the loop
    state of the same code), and where its liveness analysis covers every inner loop of
    the main loop, it is the names live after an inner loop (`found.leaves`): a name the
    body binds again before reading it (`for inputs, targets in testloader:` after a step
    loop that set them) is not read from the skipped loop. Where the analysis does not
    cover them all (a flor.loop inside a plain loop, several main loops of that name) the
    names of both are taken.
    """
    coarse: set[str] = set()
    contained: set[int] = set()
    for loop in loops:
        if loop.name != main_loop:
            continue
        inner = [other for other in loops if loop.contains(other)]
        contained |= {other.first_line for other in inner}
        coarse |= {name for other in inner for name in other.binds} & loop.reads
    if found is None or not found.found:
        return coarse
    analysed = {first for first, _last, _left, _assigned in found.inner_leaves}
    if contained <= analysed:
        return set(found.leaves)
    return coarse | set(found.leaves)
