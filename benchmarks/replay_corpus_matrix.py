"""The loop-state replay corpus, every case: each script in tests/replay_corpus/stateful/ x
statement position (prefix, outer, inner) x replay workers (1, 4) x recorder checkpoint
budget (every iteration, the default 2%). tests/test_replay_differential.py runs a subset.

Per script, budget and worker count, v1 is recorded once in a throwaway git repository and
the three positions are replayed into it (they replay different names); per script, v2 is
run forward once. A case is judged by tests/replay_differential.py: `equal` (every served
value equals the forward run), `differs` (the first differing value), `missing (named)` /
`missing (unnamed)` (values not served, and whether the replay said which), `refused`
(with the planner's reason) or `failed` (the replay crashed). Right cases are `equal`,
`refused` and `missing (named)`; the others count as wrong.

    .venv/bin/python benchmarks/replay_corpus_matrix.py [--scripts a,b] [--workers 1,4]
        [--budgets every,default] [--places prefix,outer,inner]

Prints a table (lines starting with `#`) and
`RESULT replay_corpus_cases_equal <n> cases`, `RESULT replay_corpus_cases_wrong <n> cases`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from replay_differential import (  # noqa: E402
    BUDGETS,
    PLACES,
    STATEFUL,
    Outcome,
    case_names,
    compare,
    forward,
    load_case,
    record,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scripts", default=",".join(case_names(STATEFUL)))
    parser.add_argument("--workers", default="1,4")
    parser.add_argument("--budgets", default=",".join(BUDGETS))
    parser.add_argument("--places", default=",".join(PLACES))
    args = parser.parse_args()
    scripts = args.scripts.split(",")
    workers = [int(w) for w in args.workers.split(",")]
    budgets, places = args.budgets.split(","), args.places.split(",")
    rows: list[tuple[str, str, int, str, Outcome]] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="florwb-corpus-") as tmp:
        base = Path(tmp)
        for script in scripts:
            case = load_case(STATEFUL / f"{script}.py")
            reference = None
            for budget in budgets:
                for n in workers:
                    folder = base / f"{script}-{budget}-{n}"
                    recorded = record(case, folder / "project", budget)
                    if reference is None:
                        reference = forward(recorded, base / f"{script}-forward")
                    for place in places:
                        names = case.names_at(place)
                        if not names:
                            continue
                        outcome = compare(recorded, names, n, reference)
                        rows.append((script, place, n, budget, outcome))
                        print(f"# {script:<18} {place:<6} w={n} {budget:<7} {outcome}", flush=True)
    print("#")
    print(f"# {'script':<18} {'place':<6} {'workers':<7} {'budget':<7} outcome")
    for script, place, n, budget, outcome in rows:
        print(f"# {script:<18} {place:<6} {n:<7} {budget:<7} {outcome}")
    equal = sum(outcome.kind == "equal" for *_, outcome in rows)
    wrong = sum(not outcome.acceptable for *_, outcome in rows)
    print(f"# {len(rows)} cases in {time.perf_counter() - started:.0f} s")
    print(f"RESULT replay_corpus_cases_equal {equal} cases")
    print(f"RESULT replay_corpus_cases_wrong {wrong} cases")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
