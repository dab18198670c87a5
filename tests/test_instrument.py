"""Hands-free instrumentation on the corpus of plain training scripts (tests/instrument_corpus).

Each case is instrumented and compared with its expected file byte for byte, instrumented
again (nothing may change), and, unless refused, run as a training process of its own in
its own git repository, with a hindsight log statement added the way a user would. The
recorded run must have the args, the loop coordinates and the checkpoints replay needs.

Importing torch and the torch._dynamo an optimizer pulls in costs ~5 s of CPU per process
here, most of these tests' time, so the runs are forked from one process that imported
torch once (ZYGOTE): each child is still a fresh `__main__` run of train.py with its own
argv, working folder and interpreter-exit handling. test_instrument_cli.py runs an
instrumented script the plain way, `python train.py`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git, write

from florwb_engine.instrument import INSTRUMENTED, PARTIAL, REFUSED, UNCHANGED, instrument
from florwb_engine.record.checkpoint import load
from florwb_engine.store import Store

CORPUS = Path(__file__).parent / "instrument_corpus"
CASES = sorted(p for p in CORPUS.iterdir() if (p / "case.json").exists())
RUNNABLE = [c for c in CASES if json.loads((c / "case.json").read_text())["status"] != REFUSED]


def _read(path: Path) -> str:
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def _spec(case: Path) -> dict:
    return json.loads(_read(case / "case.json"))


def test_corpus_covers_the_shapes() -> None:
    statuses = [_spec(c)["status"] for c in CASES]
    assert len(CASES) >= 10
    assert statuses.count(REFUSED) >= 3
    assert PARTIAL in statuses and INSTRUMENTED in statuses
    for case in RUNNABLE:
        assert (case / "expected.py").exists(), case.name


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_instrumented_code_is_exactly_the_expected_file(case: Path) -> None:
    spec = _spec(case)
    source = _read(case / "train.py")
    result = instrument(source)
    assert result.status == spec["status"], result.report("train.py")
    if spec["status"] == REFUSED:
        assert spec["reason"] in result.reason
        assert "\n" not in result.reason
        assert result.code == source  # never touched
        return
    assert result.code == _read(case / "expected.py")
    compile(result.code, "expected.py", "exec")
    not_done = [n.text for n in result.notes if not n.done]
    for text in spec.get("not_done", []):
        assert any(text in line for line in not_done), (text, not_done)
    if spec["status"] == INSTRUMENTED:
        assert not_done == []
    logged = [n.text for n in result.notes if "added after the backward call" in n.text]
    assert [text.split('"')[1] for text in logged] == spec.get("logged", [])
    assert sorted(result.checkpointed) == sorted(spec["checkpointed"])


@pytest.mark.parametrize("case", RUNNABLE, ids=[c.name for c in RUNNABLE])
def test_instrumenting_twice_changes_nothing(case: Path) -> None:
    once = _read(case / "expected.py")
    again = instrument(once)
    assert again.status == UNCHANGED
    assert again.code == once
    assert not [n for n in again.notes if n.done]


def _with_hindsight_log(code: str, log: dict) -> str:
    """Add `log["statement"]` after the first line containing `log["after"]`, indented
    like it: what a user does later, and what replay fills in for past runs."""
    if "after" not in log:
        return code
    lines = code.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if log["after"] in line:
            indent = line[: len(line) - len(line.lstrip())]
            lines.insert(i + 1, f"{indent}{log['statement']}\n")
            return "".join(lines)
    raise AssertionError(f"no line with {log['after']!r}")


ZYGOTE = """
import atexit, json, os, runpy, sys
import torch

torch.optim.SGD(torch.nn.Linear(1, 1).parameters(), lr=0.1)  # imports torch._dynamo


def child(project, argv, log):
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.chdir(project)
    script = os.path.join(project, "train.py")
    sys.argv = ["train.py", *argv]
    sys.path[0] = project
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


jobs, parallel = json.loads(sys.argv[1]), int(sys.argv[2])
running, codes = {}, {}
for project, argv, log in jobs:
    while len(running) >= parallel:
        pid, status = os.wait()
        codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
    pid = os.fork()
    if pid == 0:
        child(project, argv, log)
    running[pid] = project
while running:
    pid, status = os.wait()
    codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
print(json.dumps(codes))
"""


def _project(case: Path, root: Path) -> Path:
    project = root / case.name
    project.mkdir()
    git(project, "init", "-q", "-b", "main")
    write(project / "README.md", "# project\n")
    git(project, "add", "README.md")
    git(project, "commit", "-q", "-m", "init")
    spec = _spec(case)
    code = _with_hindsight_log(_read(case / "expected.py"), spec["log"])
    (project / "train.py").write_text(code)
    return project


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> dict[str, tuple[Path, int, str]]:
    """Every runnable case instrumented, given a log statement, and run once:
    case name -> (project, exit status, output)."""
    root = tmp_path_factory.mktemp("instrumented")
    jobs = []
    for case in RUNNABLE:
        project = _project(case, root)
        jobs.append([str(project), _spec(case)["argv"], str(root / f"{case.name}.out")])
    parallel = str(max(2, min(4, os.cpu_count() or 2)))
    proc = subprocess.run(
        [sys.executable, "-c", ZYGOTE, json.dumps(jobs), parallel],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    codes = json.loads(proc.stdout)
    return {
        Path(project).name: (Path(project), codes[project], Path(log).read_text())
        for project, _, log in jobs
    }


@pytest.mark.parametrize("case", RUNNABLE, ids=[c.name for c in RUNNABLE])
def test_instrumented_script_records_a_run_replay_can_use(case: Path, recorded) -> None:
    spec = _spec(case)
    project, code, output = recorded[case.name]
    assert code == 0, output
    store = Store(project)
    (run,) = store.runs()
    assert run["status"] == "finished"
    assert run["args"] == spec["args"]

    loops = spec["loops"]
    outer = next(iter(loops))
    counted = store.query(
        "SELECT loop, count(*) AS n FROM iterations GROUP BY loop ORDER BY min(depth)"
    )
    assert dict(zip(counted.loop, (int(n) for n in counted.n))) == loops

    name = spec["log"]["name"]
    frame = store.dataframe(name)
    assert len(frame) > 0
    for loop in loops:
        assert loop in frame.columns and frame[loop].notna().all(), (loop, frame.columns)
    assert sorted(set(int(e) for e in frame[outer])) == list(range(loops[outer]))

    # The losses the instrumenter logs, one value per step, as numbers (flor.log converts
    # the one-element tensor at the call): what a replay's fidelity check compares.
    inner = list(loops)[-1]
    for loss in spec.get("logged", []):
        values = store.dataframe(loss)[loss]
        assert len(values) == loops[inner], (loss, len(values))
        assert all(isinstance(v, float) for v in values), values.head()
        if name == f"{loss}_value":  # the hindsight statement logs loss.item() beside it
            both = store.dataframe(loss, name)
            assert list(both[loss]) == list(both[name])

    ckpts = store.query("SELECT loop, iteration, path FROM checkpoints ORDER BY iteration")
    assert len(ckpts) >= 1 and set(ckpts.loop) == {outer}
    assert int(ckpts.iteration.iloc[-1]) == loops[outer] - 1  # the end state, always
    last = load(project / ".florwb" / "checkpoints" / run["run_id"] / ckpts.path.iloc[-1])
    assert sorted(last["objects"]) == sorted(spec["checkpointed"])
