"""Every flordb 4.0.1 call under `import florwb as flor`, and scripts in the shapes of
FlorDB's README and CIDR examples run with only the import changed.

FLORDB_4_0_1 is flordb 4.0.1's public API as its `flordb/__init__.py` exports it (`api.py`'s
`__all__`, `repl.py`'s query/dataframe/io/replay, `checkpoint_io.py`'s checkpoints; and
`api.cleanup`, its exit hook), written down here so the test needs no network.
"""

from __future__ import annotations

import inspect
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import florwb, git, run_py, write
from rich.console import Console

import florwb as flor
from florwb.screens.run_compare import render_header
from florwb.screens.run_detail import render_detail
from florwb_engine.replay import plan_replay
from florwb_engine.replay.requests import unreachable_iterations
from florwb_engine.run_compare import compare_runs
from florwb_engine.store import Store
from florwb_engine.store.queries import load_run_detail

# name -> flordb 4.0.1's signature (its private `_bypass_projection` of log left out)
FLORDB_4_0_1 = {
    "log": "(name, value)",
    "arg": "(name, default=None)",
    "checkpointing": "(**kwargs)",
    "restore": "(path, *target, **keyed)",
    "loop": "(name, iterator)",
    "iteration": "(name, idx, value)",
    "commit": "()",
    "set_ckpt_interval": "(seconds)",
    "set_capture": "(enabled=None, *, max_line=None, max_records=None, extract=None)",
    "load_checkpoint": "(tstamp, name=None, *, map_location='cpu', weights_only=True)",
    "query": "(user_query)",
    "dataframe": "(*args)",
    "io": "(channel=None)",
    "replay": "(apply_vars, narrow_iters=None, where_clause=None, overrides=None)",
    "checkpoints": "(tstamp)",
    "cleanup": "()",
}


def _signature(text: str) -> inspect.Signature:
    scope: dict = {}
    exec(f"def f{text}: pass", scope)
    return inspect.signature(scope["f"])


def _accepts(theirs: inspect.Signature, ours: inspect.Signature) -> list[str]:
    """How a call written against `theirs` fails against `ours` (empty: every call works):
    required arguments by position, optional ones by position and by keyword, *args and
    **kwargs passed on."""
    problems = []
    required = [p for p in theirs.parameters.values() if p.default is p.empty]
    positional = [p for p in theirs.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    base = [object()] * sum(p.kind is p.POSITIONAL_OR_KEYWORD for p in required)
    calls = [(base, {})]
    calls.append(([object()] * len(positional), {}))
    for p in theirs.parameters.values():
        if p.default is not p.empty:
            calls.append((base, {p.name: p.default}))
        elif p.kind is p.VAR_POSITIONAL:
            calls.append((base + [object(), object()], {}))
        elif p.kind is p.VAR_KEYWORD:
            calls.append((base, {"model": object(), "optimizer": object()}))
    for args, kwargs in calls:
        try:
            ours.bind(*args, **kwargs)
        except TypeError as exc:
            problems.append(f"{len(args)} positional, {sorted(kwargs)}: {exc}")
    return problems


@pytest.mark.parametrize("name", sorted(FLORDB_4_0_1))
def test_every_flordb_call_exists_with_a_compatible_signature(name: str) -> None:
    ours = getattr(flor, name, None)
    assert callable(ours), f"flor.{name} is missing"
    assert _accepts(_signature(FLORDB_4_0_1[name]), inspect.signature(ours)) == []


def test_the_table_check_catches_an_incompatible_signature() -> None:
    assert _accepts(_signature("(tstamp, name=None)"), _signature("(tstamp)"))
    assert _accepts(_signature("(a, *, b=1)"), _signature("(a, c=1)"))
    assert not _accepts(_signature("(a, *, b=1)"), _signature("(a, b=1, **rest)"))


def _py(project: Path, code: str, *, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=project, capture_output=True, text=True, timeout=300
    )
    if check and proc.returncode != 0:
        raise AssertionError(proc.stderr)
    return proc


def _rendered(renderable: object) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def _commit(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        write(tmp_path / name, text)
    git(tmp_path, "init", "-q")
    _commit(tmp_path, "init")
    return tmp_path


TUTORIAL = """
import torch
import florwb as flor

torch.manual_seed(0)
net = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(net.parameters(), lr=flor.arg("lr", 0.1))
data = torch.randn(3, 4, 3)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(flor.arg("epochs", 2))):
        for x in flor.loop("step", data):
            loss = ((net(x) - x.sum(1, keepdim=True)) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            flor.log("loss", loss.item())
        flor.log("acc", 1.0 / (1.0 + loss.item()))
flor.commit()
"""

FLORDB_COLUMNS = {"projid", "tstamp", "filename", "source"}


def test_tutorial_then_gradient_norm_hindsight_from_python_and_narrowed(tmp_path: Path) -> None:
    repo = _project(tmp_path, {"train.py": TUTORIAL})
    run_py(repo, "train.py", "--kwargs", "epochs=3")
    today = TUTORIAL.replace(
        "            opt.step()\n",
        '            flor.log("grad_norm", net.weight.grad.norm().item())\n'
        "            opt.step()\n",
    ).replace(
        '        flor.log("acc"',
        '        flor.log("w_norm", net.weight.norm().item())\n        flor.log("acc"',
    )
    write(repo / "train.py", today)
    proc = _py(
        repo,
        "import json, florwb as flor\n"
        "df = flor.replay(['grad_norm'], narrow_iters=[('epoch', '1')])\n"
        "print(json.dumps({'columns': list(df.columns), 'epochs': sorted({int(e) for e in "
        "df.dropna(subset=['grad_norm']).epoch}), 'n': int(df.grad_norm.notna().sum()), "
        "'verdicts': [r['verdict'] for r in df.attrs['replay']['runs']], "
        "'replayed': sorted(set(df.dropna(subset=['grad_norm']).source)), "
        "'recorded': sorted(set(flor.dataframe('loss').source))}))",
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert FLORDB_COLUMNS | {"epoch", "step", "grad_norm"} <= set(out["columns"])
    # epoch 1 asked for: the replay stops after it (epoch 0 runs too where no checkpoint
    # lets it start at 1), epoch 2 is not computed
    assert 1 in out["epochs"] and 2 not in out["epochs"]
    assert out["n"] == 3 * len(out["epochs"])
    assert out["verdicts"] == ["verified"]
    assert (out["replayed"], out["recorded"]) == (["replay"], ["forward"])  # flordb's `source`

    florwb(repo, "replay", "w_norm", "--iter", "epoch=last", "--yes")
    frame = Store(repo).dataframe("w_norm")
    assert 2 in [int(e) for e in frame.dropna(subset=["w_norm"]).epoch]
    bad = florwb(repo, "replay", "w_norm", "--iter", "epoch", "--yes", check=False)
    assert bad.returncode == 1 and "--iter expects NAME=SPEC" in bad.stderr


FEATURIZE = """
import os
import florwb as flor

for name in flor.loop("document", sorted(os.listdir("docs"))):
    with flor.iteration("page", 0, None):
        first = open(os.path.join("docs", name)).read().splitlines()[0]
        flor.log("first_page", first)
"""

FEEDBACK = """
import florwb as flor


class App:
    def __init__(self):
        self.routes = {}

    def route(self, path):
        def register(handler):
            self.routes[path] = handler
            return handler

        return register


app = App()


@app.route("/feedback")
def feedback(name, label):
    with flor.iteration("document", None, name):
        flor.log("label", label)
    flor.commit()


if __name__ == "__main__":  # one long-lived process; each request commits its own run
    for name, label in [("a.txt", "good"), ("c.txt", "bad")]:
        app.routes["/feedback"](name, label)
"""


def test_pipeline_scripts_join_by_document_and_a_request_is_not_replayed(tmp_path: Path) -> None:
    files = {f"docs/{d}.txt": f"title {d}\nbody of {d}\n" for d in "abc"}
    repo = _project(tmp_path, {**files, "featurize.py": FEATURIZE, "feedback.py": FEEDBACK})
    run_py(repo, "featurize.py")
    run_py(repo, "feedback.py")
    runs = json.loads(florwb(repo, "runs", "--json").stdout)
    assert [r["script"] for r in runs] == ["featurize.py", "feedback.py", "feedback.py"]

    out = json.loads(
        _py(
            repo,
            "import json, florwb as flor\n"
            "f = flor.dataframe('first_page'); l = flor.dataframe('label')\n"
            "j = f.merge(l[['document_value', 'label']], on='document_value', how='left')\n"
            "print(json.dumps({'f': list(f.columns), 'l': list(l.columns), "
            "'joined': j[['document_value', 'first_page', 'label']].fillna('').values.tolist(),"
            " 'docs': l.document.tolist()}))",
        ).stdout.strip()
    )
    assert FLORDB_COLUMNS | {"document", "page", "document_value", "first_page"} <= set(out["f"])
    assert FLORDB_COLUMNS | {"document", "document_value", "label"} <= set(out["l"])
    assert out["joined"] == [
        ["a.txt", "title a", "good"],
        ["b.txt", "title b", ""],
        ["c.txt", "title c", "bad"],
    ]
    assert out["docs"] == [0, 0]  # no index given: each request's run counts from 0

    write(
        repo / "feedback.py",
        FEEDBACK.replace(
            '        flor.log("label", label)\n',
            '        flor.log("label", label)\n        flor.log("label_len", len(label))\n',
        ),
    )
    plan = plan_replay(repo, ["label_len"])
    reasons = {r.script: r.reason for r in plan.runs}
    assert "a web request cannot be replayed" in reasons["feedback.py"]
    assert not plan.ready()


def test_request_handlers_are_told_from_iterations_the_script_reaches() -> None:
    found = unreachable_iterations(FEEDBACK)
    assert [(u.iteration, u.function) for u in found] == [("'document'", "feedback")]
    reached = FEEDBACK.replace('app.routes["/feedback"](name, label)', "feedback(name, label)")
    assert unreachable_iterations(reached) == []
    # handed on as a value, the script reaches it; a name only bound or used as a keyword
    # (`feedback = ...` after the def, `serve(feedback=True)`) does not
    handed = FEEDBACK.replace(
        'app.routes["/feedback"](name, label)', "threading.Thread(target=feedback).start()"
    )
    assert unreachable_iterations(handed) == []
    named = FEEDBACK.replace(
        'app.routes["/feedback"](name, label)', "serve(feedback=True)\n        label: str = name"
    )
    assert [(u.first_line, u.last_line) for u in unreachable_iterations(named)] == [
        (u.first_line, u.last_line) for u in found
    ]


ITERATIONS = """
import itertools
import florwb as flor

for i, name in enumerate(["x.pdf", "y.pdf"]):
    with flor.iteration("document", i, name):
        for page in flor.loop("page", range(2)):
            flor.log("chars", 10 * i + page)
for tick in flor.loop("tick", itertools.count()):
    flor.log("tick_sq", tick * tick)
    if tick == 3:
        break
flor.commit()
"""


def test_iteration_gives_coordinates_and_its_script_replays_whole(tmp_path: Path) -> None:
    repo = _project(tmp_path, {"pipe.py": ITERATIONS})
    run_py(repo, "pipe.py")
    out = json.loads(
        _py(
            repo,
            "import json, florwb as flor\n"
            "f = flor.dataframe('chars'); t = flor.dataframe('tick_sq')\n"
            "print(json.dumps({'rows': f[['document', 'page', 'document_value', 'chars']]"
            ".values.tolist(), 'ticks': t.tick_sq.tolist()}))",
        ).stdout.strip()
    )
    assert out["rows"] == [
        [0, 0, "x.pdf", 0],
        [0, 1, "x.pdf", 1],
        [1, 0, "y.pdf", 10],
        [1, 1, "y.pdf", 11],
    ]
    assert out["ticks"] == [0, 1, 4, 9]  # a never-ending iterable, left by break
    write(
        repo / "pipe.py",
        ITERATIONS.replace(
            '            flor.log("chars", 10 * i + page)\n',
            '            flor.log("chars", 10 * i + page)\n            flor.log("odd", page % 2)\n',
        ),
    )
    florwb(repo, "replay", "odd", "--yes")
    frame = Store(repo).dataframe("odd")
    assert [int(v) for v in frame.odd] == [0, 1, 0, 1]


TRAIN = """
import torch
import florwb as flor

torch.manual_seed(0)
net = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(net.parameters(), lr=flor.arg("lr", 0.1))
x = torch.randn(16, 3)
y = x.sum(1, keepdim=True)
for epoch in flor.loop("epoch", range(3)):
    loss = ((net(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    flor.log("loss", loss.item())
    torch.save({"model": net.state_dict()}, "ckpt.pth")
"""

FINETUNE = """
import torch
import florwb as flor

df = flor.dataframe("loss")
best = df[df.filename == "train.py"].sort_values("loss").iloc[0]
state = flor.load_checkpoint(best.tstamp, "ckpt.pth")
net = torch.nn.Linear(3, 1)
net.load_state_dict(state["model"])
opt = torch.optim.SGD(net.parameters(), lr=0.05)
x = torch.randn(16, 3)
y = x.sum(1, keepdim=True)
for epoch in flor.loop("epoch", range(2)):
    loss = ((net(x) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    flor.log("ft_loss", loss.item())
"""


def test_fine_tune_records_lineage_and_replays_from_the_same_parent(tmp_path: Path) -> None:
    repo = _project(tmp_path, {"train.py": TRAIN, "finetune.py": FINETUNE})
    run_py(repo, "train.py", "--kwargs", "lr=0.01")
    run_py(repo, "finetune.py")
    parent, child = (r["run_id"] for r in json.loads(florwb(repo, "runs", "--json").stdout))
    listed = _py(
        repo,
        f"import florwb as flor\nprint(flor.checkpoints({parent!r}).to_json(orient='records'))",
    ).stdout
    rows = json.loads(listed)
    assert [(r["name"], r["kind"], r["iteration"]) for r in rows] == [
        ("ckpt.pth", "torch.save", i) for i in range(3)
    ]
    run_py(repo, "train.py", "--kwargs", "lr=0.2")  # a better run: the query now picks it
    runs = json.loads(florwb(repo, "runs", "--json").stdout)
    (start,) = next(r for r in runs if r["run_id"] == child)["started_from"]
    assert (start["parent"], start["checkpoint"], start["iteration"]) == (parent, "ckpt.pth", 2)
    assert parent in florwb(repo, "runs").stdout.split("\n")[2]  # the `from` column
    store = Store(repo)
    detail = _rendered(render_detail(load_run_detail(store, child)))
    assert f"started from ckpt.pth of {parent} (epoch 2)" in detail
    compared = _rendered(render_header(compare_runs(repo, store, parent, child)))
    assert "its own initialisation" in compared and parent in compared.split("from", 1)[1]

    write(
        repo / "finetune.py",
        FINETUNE.replace(
            '    flor.log("ft_loss", loss.item())\n',
            '    flor.log("ft_loss", loss.item())\n    flor.log("w0", net.weight[0, 0].item())\n',
        ),
    )
    proc = florwb(repo, "replay", "w0", "--yes", "--json")
    (result,) = json.loads(proc.stdout)["result"]["runs"]
    assert (result["run_id"], result["verdict"]) == (child, "verified")  # ft_loss re-logged equal

    shutil.rmtree(repo / ".florwb" / "checkpoints" / parent)
    write(
        repo / "finetune.py",
        FINETUNE.replace(
            '    flor.log("ft_loss", loss.item())\n',
            '    flor.log("ft_loss", loss.item())\n    flor.log("b", net.bias.item())\n',
        ),
    )
    (planned,) = [r for r in plan_replay(repo, ["b"]).runs if r.run_id == child]
    assert "whose file is gone" in (planned.reason or "")


RETIRED = """
import sys
import torch
import florwb as flor

flor.restore("old.pt")
flor.restore("older.pt")
flor.set_ckpt_interval(float(sys.argv[1]))
net = torch.nn.Linear(2, 1)
with flor.checkpointing(model=net):
    for epoch in flor.loop("epoch", range(4)):
        a = torch.randn(120, 120)
        for _ in range(200):  # an epoch far above a checkpoint's cost, even under load
            a = torch.tanh(a @ a)
        flor.log("x", epoch)
flor.cleanup()
"""


def test_set_ckpt_interval_is_a_floor_and_retired_calls_say_so_once(tmp_path: Path) -> None:
    repo = _project(tmp_path, {"t.py": RETIRED})
    env = {"FLORWB_CKPT_BUDGET": "1"}  # the budget allows every iteration's checkpoint
    every = run_py(repo, "t.py", "0", env=env)
    floored = run_py(repo, "t.py", "3600", env=env)
    notes = [line for line in floored.stderr.splitlines() if "flor.restore" in line]
    assert len(notes) == 1 and "has no effect" in notes[0]
    assert every.returncode == 0
    store = Store(repo)
    counts = store.query(
        "SELECT r.argv, list(c.iteration ORDER BY c.iteration) AS its FROM checkpoints c "
        "JOIN runs r USING (run_id) GROUP BY ALL ORDER BY min(r.start_time)"
    )
    assert [list(its) for its in counts.its] == [[0, 1, 2, 3], [0, 3]]  # first, then the last
    assert list(store.query("SELECT status FROM runs").status) == ["finished", "finished"]

    first = store.run_rows()[0]
    loaded = _py(
        repo,
        "import florwb as flor\n"
        f"state = flor.load_checkpoint({first.run_id!r}, 'epoch-000002.pt')\n"
        f"latest = flor.load_checkpoint(flor.dataframe('x').tstamp.iloc[0])\n"
        "print(sorted(state), sorted(state['model']), sorted(latest) == sorted(state))",
    )
    assert loaded.stdout.split("\n")[0] == "['model'] ['bias', 'weight'] True"
    assert len(store.run_rows()) == 2  # reading a checkpoint from `python -c` is no run


def test_a_dataframe_of_no_names_is_every_value_logged_outside_a_loop(tmp_path: Path) -> None:
    """flordb's `flor.dataframe()`: one row per run, a column per run-level name."""
    script = (
        "import florwb as flor\n"
        'lr = flor.arg("lr", 0.1)\n'
        'for epoch in flor.loop("epoch", range(2)):\n'
        '    flor.log("loss", epoch * lr)\n'
        'flor.log("final", 10 * lr)\n'
    )
    repo = _project(tmp_path / "project", {"train.py": script})
    run_py(repo, "train.py", "--kwargs", "lr=0.1")
    loops_only = script.replace('flor.log("final"', 'print("final"')
    other = _project(tmp_path / "other", {"train.py": loops_only})
    run_py(other, "train.py")
    empty = _py(other, "import florwb as flor\nprint(len(flor.dataframe()))")
    assert empty.stdout.strip() == "0" and "nothing to show" in empty.stderr
    run_py(repo, "train.py", "--kwargs", "lr=0.2")
    proc = _py(
        repo,
        "import json, florwb as flor\ndf = flor.dataframe()\n"
        "print(json.dumps({'columns': list(df.columns), 'final': sorted(df.final)}))",
    )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert FLORDB_COLUMNS | {"final"} <= set(out["columns"])
    assert "loss" not in out["columns"] and "epoch" not in out["columns"]
    assert out["final"] == [1.0, 2.0]
