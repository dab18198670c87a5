"""The differential replay corpus: every script shape x every statement position,
replayed against a recorded old version and compared with a forward run of today's script.

Each script in tests/replay_corpus/ is the old version (v1) of a small training script; its
`# @<position> <statement>` lines are today's new statements (v2 = v1 with those lines
uncommented). Per script: v1 is committed in a real git repository and recorded; v2 is
committed; the statements are replayed (epoch-level ones together, step-level ones
together: see GROUPS) and each replayed value is compared with what a forward run of v2
logs with the same args, the run's inputs and the run's RNG states at `import florwb`. A
position a script declares refused (`# expect: <position> refused: <reason>`) must be
refused with that reason instead. A wrong value fails the test: "right or refused".
Statements must not draw random numbers: one that does changes the run it is compared
with. The script format and the forward run are tests/replay_differential.py's, shared with
the loop-state corpus (tests/test_replay_differential.py).
"""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path

import pytest
from conftest import git, run_py
from replay_differential import CORPUS, FORWARD, case_names, load_case, write_inputs

from florwb_engine.replay import execute, plan_replay
from florwb_engine.store import Store

# Positions replayed together, to keep the corpus within its time budget (a replay costs a
# worker process): the epoch-level ones share the outer mode (and the prefix statement runs
# before their loop), the step-level ones the inner mode. A statement a plan refuses is
# taken out of its group and the rest replayed without it.
GROUPS = (("before", "epoch_start", "epoch_end"), ("step", "closure", "function"))
CASES = case_names(CORPUS)


def _values(project: Path, run_id: str, name: str, source: str | None) -> list:
    where = "run_id = ? AND name = ?" + (" AND source = ?" if source else "")
    params = [run_id, name, *([source] if source else [])]
    with Store(project).session() as con:
        rows = con.execute(
            f"SELECT value, text FROM logs WHERE {where} ORDER BY epoch NULLS FIRST, step "
            "NULLS FIRST, seq",
            params,
        ).fetchall()
    return [t if v is None or (isinstance(v, float) and math.isnan(v)) else v for v, t in rows]


@pytest.mark.parametrize("script", CASES)
def test_replay_corpus(script: str, tmp_path: Path) -> None:
    start, cpu0 = time.perf_counter(), _cpu()
    timings: list[str] = []
    case = load_case(CORPUS / f"{script}.py")
    root = tmp_path / "project"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text("*.pt\nout/\n")
    (root / "train.py").write_text(case.v1)
    write_inputs(case, root, 1)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "v1")
    run_py(root, "train.py", *case.args)
    (run_id,) = [r["run_id"] for r in Store(root).runs()]

    # the forward run: today's script, the same args, the run's inputs, its own project
    fresh = tmp_path / "fresh"
    shutil.copytree(root, fresh, ignore=shutil.ignore_patterns(".florwb", ".git"))
    (fresh / "train.py").write_text(case.v2)
    states = root / ".florwb" / "checkpoints" / run_id / "start-rng.json"
    (fresh / "_forward.py").write_text(FORWARD.format(states=str(states)))
    run_py(fresh, "_forward.py", *case.args)
    (fresh_id,) = [r["run_id"] for r in Store(fresh).runs()]

    (root / "train.py").write_text(case.v2)
    write_inputs(case, root, 2)
    git(root, "commit", "-q", "-am", "v2")
    outputs = {p: p.read_bytes() for p in root.rglob("*") if _user_output(root, p)}

    timings.append(f"record+forward {time.perf_counter() - start:.1f}s cpu {_cpu() - cpu0:.1f}")
    report: dict[str, str] = {}
    for group in GROUPS:
        wanted = {p: case.positions[p] for p in group if p in case.positions}
        if not wanted:
            continue
        t0 = time.perf_counter()
        plan = plan_replay(root, list(wanted.values()))
        (run,) = plan.runs
        while run.status == "skip" and len(wanted) > 1:
            refused = [p for p, n in wanted.items() if (run.reason or "").startswith(n + " ")]
            if not refused:
                break
            report[refused[0]] = _verdict(case, refused[0], wanted.pop(refused[0]), run)
            plan = plan_replay(root, list(wanted.values()))
            (run,) = plan.runs
        result = execute(plan) if plan.ready() else None
        timings.append(f"{'+'.join(group)} {time.perf_counter() - t0:.1f}s cpu {_cpu() - cpu0:.1f}")
        for position, name in wanted.items():
            report[position] = _verdict(
                case, position, name, run, plan, result, root, run_id, fresh, fresh_id
            )
    changed = [
        str(p.relative_to(root))
        for p, data in outputs.items()
        if not p.exists() or p.read_bytes() != data
    ]
    assert not changed, f"replay wrote into the user's working tree: {changed}"
    wrong = {p: v for p, v in report.items() if not v.startswith(("ok", "refused as expected"))}
    print(f"\n{script}: " + "; ".join(f"{p}: {v}" for p, v in report.items()))
    print("  " + ", ".join(timings))
    assert not wrong, f"{script}: {wrong}"


def _cpu() -> float:
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    me = resource.getrusage(resource.RUSAGE_SELF)
    return children.ru_utime + children.ru_stime + me.ru_utime + me.ru_stime


def _user_output(root: Path, path: Path) -> bool:
    rel = path.relative_to(root).parts
    return path.is_file() and rel[0] not in (".git", ".florwb")


def _verdict(
    case,
    position,
    name,
    run,
    plan=None,
    result=None,
    root=None,
    run_id=None,
    fresh=None,
    fresh_id=None,
) -> str:
    why_text = " ".join([run.reason or "", *run.notes])
    expected = case.expect.get(position)
    if run.status != "ready" or name not in run.names:
        if expected and expected[0] == "refused" and expected[1] in why_text:
            return f"refused as expected ({run.reason})"
        return f"refused: {run.reason or why_text}"
    (outcome,) = [r for r in result.runs if r.run_id == run_id]
    if expected:
        if expected[1] in why_text or expected[1] in (outcome.divergence or ""):
            return f"refused as expected (marked: {expected[1]})"
        return f"expected {expected[0]} ({expected[1]}), but replayed: {outcome.status}"
    replayed = _values(root, run_id, name, plan.replay_id)
    forward = _values(fresh, fresh_id, name, None)
    if outcome.status != "finished":
        return f"replay {outcome.status}: {outcome.error or outcome.divergence}"
    if not forward:
        return "the forward run logged nothing (a broken corpus script)"
    if replayed != pytest.approx(forward, rel=1e-6, abs=1e-9):
        return f"WRONG VALUES ({run.mode}): replayed {replayed} forward {forward}"
    return f"ok ({run.mode}, {len(replayed)} values)"
