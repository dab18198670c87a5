"""The differential replay harness: a corpus script's old version (v1) is recorded in a real
git repository, today's version (v2: v1 with its `# @<position> <statement>` lines
uncommented) is committed, the new statements are replayed, and every value a reader serves
(`Store.dataframe`, what `florwb dataframe` and `flor.dataframe` print) is compared with a
forward run of v2 with the same args, the run's inputs and the run's RNG states at
`import florwb`. A coordinate the forward run logged that the replay did not serve must be
named by the replay's result; a refusal must say why.

Used by tests/test_replay_corpus.py (one run per script, statements grouped),
tests/test_replay_differential.py (the loop-state corpus in tests/replay_corpus/stateful/,
per position) and benchmarks/replay_corpus_matrix.py (every position x workers x budget).
Statements must not draw random numbers: one that does changes the run it is compared with.
"""

from __future__ import annotations

import math
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from conftest import git, recorded_project, run_py

from florwb_engine.replay import Plan, ReplayResult, execute, plan_replay
from florwb_engine.store import Store

CORPUS = Path(__file__).parent / "replay_corpus"
STATEFUL = CORPUS / "stateful"
POSITIONS = ("before", "epoch_start", "epoch_end", "step", "function", "closure")
# What the planner replays each group of positions in: before the main loop (prefix), the
# main loop's body before and after its inner loop (outer), inside the inner loop (inner).
PLACES = {"prefix": ("before",), "outer": ("epoch_start", "epoch_end"), "inner": ("step",)}
# The recorder's checkpoint budget (FLORWB_CKPT_BUDGET): "every" checkpoints each iteration
# of these tiny loops, "default" leaves the adaptive policy its usual 2%.
BUDGETS = {"every": "100", "default": None}
MARK = re.compile(r"^(?P<indent>\s*)# @(?P<position>\w+) (?P<statement>.+)$")
EXPECT = re.compile(r"^# expect: (?P<position>\w+) (?P<verdict>refused|marked): (?P<why>.+)$")
ARGS = re.compile(r"^# args: (?P<args>.*)$")
FILES = re.compile(r"^# files: (?P<module>\w+)$")
GITIGNORE = "*.pt\n*.pth\nout/\n"
META_COLUMNS = ("run_id", "version", "start_time")

# The forward run starts from the recorded run's RNG states at `import florwb` (what a
# replay restores before the script's first line), so unseeded scripts and scripts that
# draw their own seed have a reference: what the run would have logged with the statement.
FORWARD = """
import json, runpy, sys
import numpy, torch
from florwb_engine.record import start_rng
start_rng.restore(json.loads(open({states!r}).read())["at_import"])
sys.argv = ["train.py", *sys.argv[1:]]
runpy.run_path("train.py", run_name="__main__")
"""


@dataclass
class Case:
    """One corpus script, parsed from its comment lines."""

    name: str
    v1: str
    v2: str
    positions: dict[str, str]  # position -> statement name
    expect: dict[str, tuple[str, str]]  # position -> (refused|marked, reason substring)
    args: list[str]
    files: str | None  # a helper in the script's folder that writes its input files
    folder: Path = CORPUS
    outcome: dict[str, str] = field(default_factory=dict)

    def names_at(self, place: str) -> list[str]:
        """The statement names at the positions replayed in `place` (prefix/outer/inner)."""
        return [self.positions[p] for p in PLACES[place] if p in self.positions]


def load_case(path: Path) -> Case:
    v1_lines: list[str] = []
    v2_lines: list[str] = []
    positions: dict[str, str] = {}
    expect: dict[str, tuple[str, str]] = {}
    args: list[str] = []
    files: str | None = None
    for line in path.read_text().splitlines():
        if m := MARK.match(line):
            statement = m["statement"]
            name = re.search(r'flor\.log\("(\w+)"', statement)
            assert name, f"{path.name}: a marked statement must be a flor.log: {line}"
            positions[m["position"]] = name[1]
            v2_lines.append(m["indent"] + statement)
            continue
        if m := EXPECT.match(line):
            expect[m["position"]] = (m["verdict"], m["why"])
        if m := ARGS.match(line):
            args = m["args"].split()
        if m := FILES.match(line):
            files = m["module"]
        v1_lines.append(line)
        v2_lines.append(line)
    assert set(positions) <= set(POSITIONS), positions
    return Case(
        path.stem,
        "\n".join(v1_lines) + "\n",
        "\n".join(v2_lines) + "\n",
        positions,
        expect,
        args,
        files,
        path.parent,
    )


def case_names(folder: Path) -> list[str]:
    return [p.stem for p in sorted(folder.glob("*.py")) if not p.stem.startswith("_")]


def write_inputs(case: Case, folder: Path, version: int) -> None:
    if case.files:
        namespace: dict = {}
        exec((case.folder / f"{case.files}.py").read_text(), namespace)
        namespace["write"](folder, version)


@dataclass
class Recorded:
    """v1 recorded in `root`, v2 committed on top."""

    case: Case
    root: Path
    run_id: str
    v1_commit: str


def record(case: Case, root: Path, budget: str = "every") -> Recorded:
    """Commit and record v1 in a new git repository at `root` with the recorder's checkpoint
    budget `budget` (see BUDGETS), then commit v2 on top: the project a replay starts from."""
    assert not case.files, "input files are written by tests/test_replay_corpus.py only"
    fraction = BUDGETS[budget]
    recorded_project(
        root,
        case.v1,
        *case.args,
        files={".gitignore": GITIGNORE},
        env={"FLORWB_CKPT_BUDGET": fraction} if fraction else None,
    )
    (run_id,) = [r["run_id"] for r in Store(root).runs()]
    v1_commit = git(root, "rev-parse", "HEAD").strip()
    (root / "train.py").write_text(case.v2)
    git(root, "commit", "-q", "-am", "v2")
    return Recorded(case, root, run_id, v1_commit)


Values = dict[tuple, object]  # loop coordinates ((loop, index or None), ...) -> value


def forward(recorded: Recorded, folder: Path) -> dict[str, Values]:
    """Every new statement's values in a forward run of v2: the working tree as the run
    found it, the same args, the run's RNG states at import, the same thread settings as
    the recording (both inherit this process's environment)."""
    case = recorded.case
    folder.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", recorded.v1_commit],
        cwd=recorded.root,
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x"], cwd=folder, input=archive, check=True)
    (folder / "train.py").write_text(case.v2)
    states = recorded.root / ".florwb" / "checkpoints" / recorded.run_id / "start-rng.json"
    (folder / "_forward.py").write_text(FORWARD.format(states=str(states)))
    run_py(folder, "_forward.py", *case.args)
    (run_id,) = [r["run_id"] for r in Store(folder).runs()]
    return {name: served(folder, run_id, name) for name in case.positions.values()}


def served(project: Path, run_id: str, name: str) -> Values:
    """What a reader is served for `name` of `run_id` (the store's dataframe), by loop
    coordinates. Nothing logged under the name at all is an empty mapping."""
    with Store(project).session() as con:
        known = con.execute(
            "SELECT count(*) FROM name_stats s JOIN name_keys k USING (name_key) WHERE k.name = ?",
            [name],
        ).fetchone()[0]
    if not known:
        return {}
    frame = Store(project).dataframe(name)
    frame = frame[frame["run_id"] == run_id]
    loops = [c for c in frame.columns if c not in (*META_COLUMNS, name)]
    values: Values = {}
    for row in frame.to_dict("records"):
        value = row[name]
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        coords = tuple((c, None if _missing(row[c]) else int(row[c])) for c in loops)
        values[coords] = value
    return values


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


@dataclass
class Outcome:
    """One replay compared with the forward run: `kind` is equal, differs, missing (named or
    not), refused, failed (the replay crashed) or "diverged, served" (the replay called
    the run diverged and readers still serve its values); `detail` says what (the first
    differing value, the reason)."""

    kind: str
    detail: str
    mode: str | None = None

    @property
    def acceptable(self) -> bool:
        """Right, or withheld and named: what the corpus demands of every replay."""
        return self.kind in ("equal", "refused", "missing (named)")

    def __str__(self) -> str:
        mode = f" [{self.mode}]" if self.mode else ""
        return f"{self.kind}{mode}: {self.detail}" if self.detail else f"{self.kind}{mode}"


def replay(recorded: Recorded, names: list[str], workers: int) -> tuple[Plan, ReplayResult | None]:
    """Plan and execute a replay of `names` through the engine's public path."""
    plan = plan_replay(recorded.root, names, workers=workers)
    result = execute(plan) if plan.ready() else None
    return plan, result


def compare(
    recorded: Recorded, names: list[str], workers: int, reference: dict[str, Values]
) -> Outcome:
    """Replay `names` with `workers` workers and judge every served value against the
    forward run's `reference`."""
    plan, result = replay(recorded, names, workers)
    (run,) = [r for r in plan.runs if r.run_id == recorded.run_id]
    if run.status != "ready":
        why = run.reason or " ".join(run.notes)
        return Outcome("refused" if why else "failed", why or "refused without a reason")
    mode = f"{run.mode}, {len(run.segments)} seg"
    assert result is not None
    (outcome,) = [r for r in result.runs if r.run_id == recorded.run_id]
    named_missing: str = getattr(outcome, "missing", None) or ""
    served_any = False
    absent: list[tuple[str, int | None]] = []  # (name[coords], main-loop iteration)
    for name in names:
        got = served(recorded.root, recorded.run_id, name)
        served_any = served_any or bool(got)
        want = reference[name]
        for coords in sorted(set(got) | set(want), key=_order):
            if coords not in want:
                return Outcome(
                    "differs",
                    f"{name}{_at(coords)} served {got[coords]!r}, "
                    "the forward run logged nothing there",
                    mode,
                )
            if coords not in got:
                absent.append((f"{name}{_at(coords)}", dict(coords).get(run.main_loop)))
                continue
            if not _same(got[coords], want[coords]):
                return Outcome(
                    "differs",
                    f"{name}{_at(coords)} served {got[coords]!r}, forward {want[coords]!r}",
                    mode,
                )
    if outcome.status in ("failed", "cancelled"):
        lines = (outcome.error or "").strip().splitlines() or ["no error text"]
        return Outcome("failed", f"{outcome.status}: {lines[-1]}", mode)
    diverged = "diverged" in (outcome.status, getattr(outcome, "verdict", None))
    said = f"diverged: {outcome.divergence}" if diverged else (named_missing or "'finished'")
    if absent:
        named = (
            _iterations(named_missing.removeprefix(run.main_loop or "")) if named_missing else set()
        )
        unnamed = [a for a, it in absent if not diverged and it not in named]
        shown = _few([a for a, _ in absent])
        if unnamed:
            which = _few(unnamed) + ("" if len(unnamed) == len(absent) else f" of {shown}")
            return Outcome("missing (unnamed)", f"{which}; the replay said {said}", mode)
        if diverged and served_any:
            return Outcome("diverged, served", f"some values served; the replay said {said}", mode)
        return Outcome("missing (named)", f"{shown}; the replay said {said}", mode)
    count = sum(len(reference[n]) for n in names)
    if not count:
        return Outcome("failed", "the forward run logged nothing (a broken corpus script)", mode)
    if diverged:
        return Outcome("diverged, served", f"{count} values served; the replay said {said}", mode)
    return Outcome("equal", f"{count} values", mode)


def _iterations(text: str) -> set[int]:
    """The main-loop iterations a replay's `missing` names ("iter 3, 7-9")."""
    found: set[int] = set()
    for first, last in re.findall(r"(\d+)(?:-(\d+))?", text):
        found.update(range(int(first), int(last or first) + 1))
    return found


def _few(items: list[str]) -> str:
    return ", ".join(items[:3]) + (f" (+{len(items) - 3})" if len(items) > 3 else "")


def _order(coords: tuple) -> tuple:
    return tuple((c is not None, c or 0) for _, c in coords)


def _at(coords: tuple) -> str:
    shown = ",".join(f"{loop}={c}" for loop, c in coords if c is not None)
    return f"[{shown}]"


def _same(a: object, b: object) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
    return a == b
