"""The loop-state corpus (tests/replay_corpus/stateful/): scripts that carry state across
iterations (a prefetched batch, a running reward, a global best, an EMA, a counter), leave
their loop through `break`, keep their own saves, resume from their own snapshot file or
step a scheduler at the end of the epoch. Each is recorded once with a checkpoint every
iteration, and its epoch-level (outer) and step-level (inner) statements are replayed with
two workers, so segments start from checkpoints: every value served must equal a forward run
of today's script, and every value not served must be named by the replay.

The full matrix (prefix/outer/inner x 1 and 4 workers x checkpoints every iteration and at
the default budget) is benchmarks/replay_corpus_matrix.py.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from replay_differential import (
    STATEFUL,
    Recorded,
    Values,
    case_names,
    compare,
    forward,
    load_case,
    record,
)

SCRIPTS = case_names(STATEFUL)
PLACES = ("outer", "inner")


Recording = tuple[Recorded, dict[str, Values]]


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Recording]:
    """Each script recorded (and run forward) once per xdist worker, on first use: its
    outer and inner replays share the recording (they replay different names)."""
    made: dict[str, Recording] = {}

    def recording(script: str) -> Recording:
        if script not in made:
            base = tmp_path_factory.mktemp(script)
            recorded = record(load_case(STATEFUL / f"{script}.py"), base / "project")
            made[script] = (recorded, forward(recorded, base / "forward"))
        return made[script]

    return recording


# One xdist group per script: its two replays share its recording on one worker, and the
# scripts spread over the workers.
@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize(
    "script", [pytest.param(s, marks=pytest.mark.xdist_group(f"stateful-{s}")) for s in SCRIPTS]
)
def test_served_values_equal_forward_run(
    script: str, place: str, recordings: Callable[[str], Recording]
) -> None:
    recorded, reference = recordings(script)
    names = recorded.case.names_at(place)
    assert names, f"{script} has no statement at {place}"
    assert all(reference[n] for n in names), f"the forward run of {script} logged {reference}"
    outcome = compare(recorded, names, 2, reference)
    print(f"\n{script} {place} workers=2 every iteration: {outcome}")
    assert outcome.acceptable, f"{script} {place}: {outcome}"
