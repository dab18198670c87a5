"""The script's own torch.save as the run's checkpoints: recorded by real training scripts
that never call flor.checkpointing, replayed from them, and compared with a forward run of
today's script; a script with both kinds; and saves florwb cannot map, said in the plan."""

from __future__ import annotations

import json

import torch
from conftest import git, run_py, write

import florwb as flor
from florwb_engine.project import checkpoint_dir
from florwb_engine.record.pull import list_checkpoints
from florwb_engine.replay import execute, plan_replay
from florwb_engine.store import Store

HEAD = """
import time

import torch
import florwb as flor

flor.set_checkpoint_budget(1.0)
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
opt = torch.optim.Adam(net.parameters(), lr=0.05)
x, y = torch.randn(64, 4), torch.randn(64, 1)
"""

STEPS = """
    for step in flor.loop("step", range(4)):
        idx = torch.randint(0, 64, (16,))  # draws from the RNG: a resumed segment must too
        loss = ((net(x[idx]) - y[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        flor.log("loss", loss.item())
    time.sleep(0.05)  # an epoch far longer than its checkpoint, even on a busy machine
"""

OWN = (
    HEAD
    + 'for epoch in flor.loop("epoch", range(4)):'
    + STEPS
    + """
    state = {"model": net.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch}
    torch.save(state, "ckpt.pth")
    if epoch % 2 == 0:
        torch.save(net, "best.pth")  # a whole module: mirrored as its state_dict
assert torch.save.__module__ == "florwb_engine.record.save_mirror"
flor.commit()
assert torch.save.__module__ == "torch.serialization", "torch.save given back at commit"
"""
)

EPOCH_STATEMENT = '        flor.log("loss", loss.item())\n'
TODAY = OWN.replace(
    EPOCH_STATEMENT,
    EPOCH_STATEMENT + '        flor.log("picked", idx.sum().item())\n',
).replace(
    '    torch.save(state, "ckpt.pth")\n',
    '    torch.save(state, "ckpt.pth")\n    flor.log("wnorm", net[0].weight.norm().item())\n',
)


def _commit(repo, text: str, message: str) -> None:
    write(repo / "train.py", text)
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", message)


def _values(repo, run_id: str, name: str) -> dict[tuple, float]:
    """`name`'s values of one run by loop coordinates."""
    frame = Store(repo).dataframe(name)
    frame = frame[(frame.run_id == run_id) & frame[name].notna()]
    assert len(frame), f"no {name} for {run_id}"
    keys = [c for c in ("epoch", "step") if c in frame.columns and frame[c].notna().any()]
    return {tuple(int(v) for v in row[keys]): float(row[name]) for _, row in frame.iterrows()}


def test_own_torch_save_is_mirrored_and_replayed_like_a_forward_run(repo):
    _commit(repo, OWN, "own checkpoints only")
    run_py(repo, "train.py")
    run_id = Store(repo).runs()[0]["run_id"]
    with Store(repo).session() as con:
        rows = con.execute(
            "SELECT iteration, path FROM checkpoints WHERE run_id = ? ORDER BY iteration",
            [run_id],
        ).fetchall()
    assert [i for i, _ in rows] == [0, 1, 2, 3]
    assert all(path.endswith(".saves.json") for _, path in rows)
    folder = checkpoint_dir(repo) / run_id
    manifests = [json.loads((folder / path).read_text()) for _, path in rows]
    first, last = (folder / m["saves"][0]["file"] for m in (manifests[0], manifests[-1]))
    assert manifests[0]["saves"][0]["line"] == OWN.splitlines().index(
        '    torch.save(state, "ckpt.pth")'
    )
    # ckpt.pth was overwritten three times; the epoch-0 mirror still holds epoch 0's weights
    assert first.read_bytes() != last.read_bytes()
    assert last.read_bytes() == (repo / "ckpt.pth").read_bytes()
    epoch0 = torch.load(first, weights_only=True)
    assert epoch0["epoch"] == 0 and set(epoch0) == {"model", "optimizer", "epoch"}
    assert [len(m["saves"]) for m in manifests] == [2, 1, 2, 1]
    best = torch.load(folder / manifests[2]["saves"][1]["file"], weights_only=True)
    assert manifests[2]["saves"][1]["how"] == "state_dict"
    assert best.keys() == epoch0["model"].keys()

    write(repo / "train.py", TODAY)
    outer = plan_replay(repo, ["wnorm"], workers=1)
    (run,) = outer.runs
    assert run.mode == "outer" and run.status == "ready", run
    assert any("own torch.save" in n and "model -> net" in n for n in run.notes), run.notes
    assert sorted(i for s in run.segments for i in s.skip_inner) == [0, 1, 2, 3]
    result = execute(outer)
    assert result.status == "finished", result

    inner = plan_replay(repo, ["picked"], workers=2)
    (run,) = inner.runs
    assert run.mode == "inner" and len(run.segments) == 2, run
    assert run.segments[1].first > 0  # starts from a mirrored checkpoint
    result = execute(inner)
    # loss was recorded: a segment restored without the optimizer or the RNG would diverge
    assert result.status == "finished" and result.runs[0].compared == 16, result

    run_py(repo, "train.py")  # today's script, forward
    forward = next(r["run_id"] for r in Store(repo).runs() if r["run_id"] != run_id)
    for name, n in (("wnorm", 4), ("picked", 16)):
        replayed, expected = _values(repo, run_id, name), _values(repo, forward, name)
        assert len(expected) == n
        assert replayed == expected, name


BOTH = (
    HEAD
    + 'with flor.checkpointing(model=net):\n    for epoch in flor.loop("epoch", range(4)):'
    + STEPS.replace("\n    ", "\n        ")
    + """
        torch.save({"model": net.state_dict(), "optimizer": opt.state_dict()}, "own.pth")
"""
)


def test_flor_checkpointing_and_own_saves_in_one_script(repo):
    """The model is in both; Adam's moments only in the script's own save: a segment that
    starts at a later epoch needs both to match the run."""
    _commit(repo, BOTH, "both kinds")
    run_py(repo, "train.py")
    run_id = Store(repo).runs()[0]["run_id"]
    with Store(repo).session() as con:
        paths = [p for (p,) in con.execute("SELECT path FROM checkpoints").fetchall()]
    assert sum(p.endswith(".saves.json") for p in paths) == 4
    assert sum(p.endswith(".pt") for p in paths) == 4
    # pulled, both kinds are one checkpoint: flor.checkpointing's model, the save's optimizer
    (first,) = [c for c in list_checkpoints(repo, run_id) if c.iteration == 0]
    assert first.kind == "checkpointing+torch.save" and len(first.saves) == 1
    states = flor.load(run_id, 0, project=repo)
    assert set(states) == {"model", "optimizer"} and states["optimizer"]["state"]

    today = BOTH.replace(
        EPOCH_STATEMENT.replace("    ", "        ", 1),
        EPOCH_STATEMENT.replace("    ", "        ", 1)
        + '            flor.log("picked", idx.sum().item())\n',
    )
    assert today != BOTH
    write(repo / "train.py", today)
    plan = plan_replay(repo, ["picked"], workers=2)
    (run,) = plan.runs
    assert len(run.segments) == 2 and run.segments[1].first > 0, run
    assert any("optimizer -> opt" in n for n in run.notes), run.notes
    result = execute(plan)
    assert result.status == "finished" and result.runs[0].compared == 16, result
    run_py(repo, "train.py")
    forward = next(r["run_id"] for r in Store(repo).runs() if r["run_id"] != run_id)
    assert _values(repo, run_id, "picked") == _values(repo, forward, "picked")


UNMAPPED = (
    HEAD
    + """

def make_state():
    return {"model": net.state_dict(), "optimizer": opt.state_dict()}


for epoch in flor.loop("epoch", range(3)):"""
    + STEPS.replace(
        '        flor.log("loss", loss.item())\n',
        '        flor.log("loss", loss.item())\n        torch.save(net.state_dict(), "step.pth")\n',
    )
    + """
    torch.save(make_state(), "ckpt.pth")
"""
)


def test_a_save_florwb_cannot_map_is_named_in_the_plan(repo):
    _commit(repo, UNMAPPED, "unmappable save")
    proc = run_py(repo, "train.py")
    assert proc.stderr.count("torch.save inside loop 'step' is not mirrored") == 1
    run_id = Store(repo).runs()[0]["run_id"]
    assert (repo / "ckpt.pth").exists() and (repo / "step.pth").exists()
    with Store(repo).session() as con:
        assert con.execute("SELECT count(*) FROM checkpoints").fetchone() == (3,)
        issues = con.execute("SELECT kind, detail FROM run_issues WHERE run_id = ?", [run_id])
        assert ("mirror", "torch.save inside loop 'step' not mirrored") in issues.fetchall()

    write(
        repo / "train.py",
        UNMAPPED.replace(
            '    torch.save(make_state(), "ckpt.pth")\n',
            '    torch.save(make_state(), "ckpt.pth")\n'
            '    flor.log("w", net[0].weight.sum().item())\n',
        ),
    )
    plan = plan_replay(repo, ["w"], workers=2)
    (run,) = plan.runs
    line = UNMAPPED.splitlines().index('    torch.save(make_state(), "ckpt.pth")')
    expected = f"torch.save at train.py:{line}: cannot map `make_state()` to an object"
    assert any(expected in n for n in run.notes), run.notes
    assert len(run.segments) == 1 and run.segments[0].first == 0  # re-executed from the start
    result = execute(plan)
    assert result.status == "finished" and result.runs[0].compared == 12, result


def test_mirroring_failure_never_breaks_the_users_save(repo):
    """A checkpoint folder florwb cannot create: the user's files are written, the run ends
    normally, the failure is said once and counted."""
    write(
        repo / "train.py",
        HEAD
        + 'for epoch in flor.loop("epoch", range(3)):'
        + STEPS
        + '    torch.save({"model": net.state_dict()}, f"ckpt{epoch}.pth")\n'
        + "try:\n"
        + '    torch.save(net, "/nonexistent-dir/x.pth")\n'
        + "except (OSError, RuntimeError) as exc:\n"
        + '    print("user error kept:", type(exc).__name__)\n',
    )
    (repo / ".florwb").mkdir()
    (repo / ".florwb" / "checkpoints").write_text("not a folder")
    proc = run_py(repo, "train.py")
    assert "user error kept:" in proc.stdout
    assert proc.stderr.count("could not mirror a torch.save") == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for epoch in range(3):
        saved = torch.load(repo / f"ckpt{epoch}.pth", weights_only=True)
        assert set(saved) == {"model"}
    run_id = Store(repo).runs()[0]["run_id"]
    with Store(repo).session() as con:
        (n,) = con.execute(
            "SELECT sum(n) FROM run_issues WHERE run_id = ? AND kind = 'mirror'", [run_id]
        ).fetchone()
        status = con.execute("SELECT status FROM runs WHERE run_id = ?", [run_id]).fetchone()
    assert n == 3 and status == ("finished",)


def _map(body: str, prelude: str = ""):
    """map_save for the torch.save call in `body`, the main loop's body."""
    import textwrap

    from florwb_engine.replay.saved_state import map_save

    source = (
        "import florwb as flor\n"
        "net = opt = sched = data = extra = p = f = None\n"
        + textwrap.dedent(prelude)
        + 'for epoch in flor.loop("epoch", range(3)):\n'
        + textwrap.indent(textwrap.dedent(body), "    ")
    )
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "torch.save(" in text)
    return map_save(source, line, "epoch")


def test_state_expressions_map_onto_the_scripts_objects():
    steps = 'for x in flor.loop("step", data):\n    opt.step()\n'
    m = _map(steps + 'torch.save({"model": net.state_dict(), "opt": opt.state_dict(), "e": 1}, p)')
    assert (m.position, m.problem) == ("end", None)
    assert m.targets == [[["model"], "net", True], [["opt"], "opt", True]]
    assert _map(steps + "torch.save(net, p)").targets == [[[], "net", True]]
    method = _map(steps + "torch.save(self.model.state_dict(), p)", prelude="self = None\n")
    assert method.targets == [[[], "self.model", True]]
    followed = _map(
        steps + "state = dict(model=net.state_dict(), epoch=epoch)\ntorch.save(state, p)\n"
    )
    assert followed.targets == [[["model"], "net", True], [["epoch"], "epoch", False]]
    model = _map(steps + "torch.save(net, p)", prelude="net = Net()\n")
    assert model.targets == [[[], "net", True]]  # an object, not followed into Net()
    alias = _map(steps + "sd = net.state_dict()\ntorch.save(sd, p)\n")
    assert alias.targets == [[[], "net", True]]
    nested = _map(steps + 'torch.save({"ckpt": {"model": net.state_dict()}}, p)')
    assert nested.targets == [[["ckpt", "model"], "net", True]]
    start = _map('torch.save(net.state_dict(), p)\nfor x in flor.loop("step", data):\n    f()\n')
    assert (start.position, start.problem) == ("start", None)


def test_saves_florwb_cannot_map_say_why():
    steps = 'for x in flor.loop("step", data):\n    opt.step()\n'
    assert "cannot map `make_state()`" in _map(steps + "torch.save(make_state(), p)").problem
    spread = _map(steps + 'torch.save({"model": net.state_dict(), **extra}, p)').problem
    assert "cannot map `**extra`" in spread
    inner = _map('for x in flor.loop("step", data):\n    torch.save(net.state_dict(), p)\n')
    assert "inside a loop nested in the main loop" in inner.problem
    between = _map("for x in data:\n    f()\ntorch.save(net.state_dict(), p)\nsched.step()\n")
    assert "cannot tell which iteration" in between.problem
    helper = _map(
        "save_it(net)\n",
        prelude="def save_it(m):\n    torch.save(m.state_dict(), 'p')\n",
    )
    assert "not in the body of the main loop" in helper.problem
    unbound = _map(steps + 'torch.save({"model": model.state_dict(), "epoch": epoch}, p)')
    assert "cannot map `model` (not defined where the main loop runs)" in unbound.problem


def test_a_state_dict_is_followed_to_the_values_that_reach_the_save():
    """`state` is followed through what is bound where the save runs: the last assignment,
    each branch of an if/else, or, where only `None` is surely bound, what the loop's body
    sets it to; values that may differ make the save unusable rather than half-right."""
    steps = 'for x in flor.loop("step", data):\n    opt.step()\n'
    literal = _map(
        steps + 'state = {"model": net.state_dict(), "e": epoch}\ntorch.save(state, p)\n'
    )
    assert literal.targets == [[["model"], "net", True], [["e"], "epoch", False]]
    last = _map(
        steps + 'state = {"a": opt.state_dict()}\nstate = {"m": net.state_dict()}\n'
        "torch.save(state, p)\n"
    )
    assert last.targets == [[["m"], "net", True]]
    rebound = _map(steps + "sd = net.state_dict()\nsd = build()\ntorch.save(sd, p)\n")
    assert rebound.targets == [[[], "sd", True]]  # the object `build()` made, not net
    branches = (
        'if epoch:\n    state = {"m": A}\nelse:\n    state = {"m": B}\ntorch.save(state, p)\n'
    )
    same = _map(steps + branches.replace("A", "net.state_dict()").replace("B", "net.state_dict()"))
    assert (same.targets, same.problem) == ([[["m"], "net", True]], None)
    differ = _map(
        steps + branches.replace("A", "net.state_dict()").replace("B", "opt.state_dict()")
    )
    assert "cannot map `state` (it may hold different objects" in differ.problem
    best = _map(
        steps + 'if epoch > 1:\n    state = {"m": net.state_dict()}\ntorch.save(state, p)\n',
        prelude="state = None\n",
    )
    assert (best.targets, best.problem) == ([[["m"], "net", True]], None)
    spread = _map(steps + "torch.save(dict(model=net.state_dict(), **extra), p)")
    assert "cannot map `**extra`" in spread.problem


def test_a_state_dict_is_followed_in_the_function_holding_the_main_loop():
    from florwb_engine.replay.saved_state import map_save

    source = (
        "import torch\nimport florwb as flor\n"
        "def main(net, opt):\n"
        "    state = None\n"
        '    for epoch in flor.loop("epoch", range(3)):\n'
        "        opt.step()\n"
        "        if epoch % 2:\n"
        '            state = {"net": net.state_dict(), "opt": opt.state_dict()}\n'
        '        torch.save(state, "ckpt.pt")\n'
    )
    found = map_save(source, 9, "epoch")
    assert (found.position, found.problem) == ("end", None)
    assert found.targets == [[["net"], "net", True], [["opt"], "opt", True]]


def test_where_the_save_sits_says_which_iterations_state_it_holds():
    inner = 'for x in flor.loop("step", data):\n    opt.step()\n'
    after = _map(inner + 'torch.save(net, p)\nprint(epoch)\nif epoch:\n    flor.log("a", 1)\n')
    assert (after.position, after.problem) == ("end", None)
    before = _map('flor.log("e", epoch)\ntorch.save(net, p)\n' + inner)
    assert (before.position, before.problem) == ("start", None)
    changed = _map("sched.step()\ntorch.save(net, p)\n" + inner)
    assert "cannot tell which iteration" in changed.problem
    no_inner = _map("opt.step()\ntorch.save(net, p)\n")
    assert (no_inner.position, no_inner.problem) == ("end", None)


def test_saved_references_are_written_the_way_the_replay_looks_them_up():
    steps = 'for x in flor.loop("step", data):\n    opt.step()\n'
    m = _map(
        steps + 'torch.save({"a": self . net.state_dict(), "b": nets[0], "c": d["m"]}, p)',
        prelude="self = nets = d = None\n",
    )
    assert m.targets == [
        [["a"], "self.net", True],
        [["b"], "nets[0]", False],
        [["c"], "d['m']", False],
    ]


def test_an_optimizer_made_stateful_anywhere_is_not_taken_for_plain_sgd():
    from florwb_engine.replay.saved_state import unheld_updates

    source = (
        "import torch\nimport florwb as flor\n"
        "opt = torch.optim.SGD(params, lr=0.1)\n"
        "if fine_tune:\n    opt = torch.optim.Adam(params)\n"
        'for epoch in flor.loop("epoch", range(3)):\n    opt.step()\n'
    )
    assert unheld_updates(source, "epoch", set()) == {"opt": "opt.step()"}
    plain = source.replace("if fine_tune:\n    opt = torch.optim.Adam(params)\n", "")
    assert unheld_updates(plain, "epoch", set()) == {}


def test_mirroring_can_be_turned_off(repo):
    write(
        repo / "train.py",
        HEAD
        + 'for epoch in flor.loop("epoch", range(2)):\n'
        + '    torch.save(net.state_dict(), "ckpt.pth")\n'
        + 'assert torch.save.__module__ == "torch.serialization"\n',
    )
    run_py(repo, "train.py", env={"FLORWB_MIRROR_SAVES": "0"})
    with Store(repo).session() as con:
        assert con.execute("SELECT count(*) FROM checkpoints").fetchone() == (0,)
    assert (repo / "ckpt.pth").exists()


MODEL_ONLY = (
    HEAD
    + 'for epoch in flor.loop("epoch", range(4)):'
    + STEPS
    + """
    torch.save(net.state_dict(), "model.pt")  # Adam's moments are not saved
"""
)


def test_a_save_without_the_optimizer_the_loop_steps_is_not_restored_from(repo):
    """Restarting a later epoch from the model alone gives Adam fresh moments: the plan
    re-executes from the first epoch instead, says why, and the values equal a forward run."""
    _commit(repo, MODEL_ONLY, "model-only save")
    run_py(repo, "train.py")
    run_id = Store(repo).runs()[0]["run_id"]
    with Store(repo).session() as con:
        assert con.execute("SELECT count(*) FROM checkpoints").fetchone() == (4,)
    today = MODEL_ONLY.replace(
        '    torch.save(net.state_dict(), "model.pt")',
        '    torch.save(net.state_dict(), "model.pt")\n'
        '    flor.log("wnorm", net[0].weight.norm().item())',
    )
    write(repo / "train.py", today)
    plan = plan_replay(repo, ["wnorm"], workers=2)
    (run,) = plan.runs
    assert run.status == "ready" and run.from_start, run
    assert len(run.segments) == 1 and run.segments[0].first == 0, run.segments
    assert not any("restores from the script's own torch.save" in n for n in run.notes)
    assert any(
        "does not hold opt (opt.step()), which the epoch loop updates" in n
        and "re-executed from its first iteration" in n
        for n in run.notes
    ), run.notes
    result = execute(plan)
    assert result.status == "finished" and result.runs[0].compared == 16, result
    run_py(repo, "train.py")
    forward = next(r["run_id"] for r in Store(repo).runs() if r["run_id"] != run_id)
    assert _values(repo, run_id, "wnorm") == _values(repo, forward, "wnorm")


def test_what_the_main_loop_updates_is_found_through_helpers_and_methods():
    import textwrap

    from florwb_engine.replay.saved_state import loop_updates, unheld_updates

    source = textwrap.dedent(
        """
        import torch
        import florwb as flor

        sgd = torch.optim.SGD(params, lr=0.1)
        heavy = torch.optim.SGD(params, lr=0.1, momentum=0.9)

        def train(model, optimizer, scaler):
            loss = model(x)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

        class Trainer:
            def _epoch(self):
                self.sched.step()

            def fit(self):
                for epoch in flor.loop("epoch", range(3)):
                    train(self.net, self.opt, amp)
                    self._epoch()
                    sgd.step()
                    heavy.step()
                    bar.update(1)  # a progress bar, not training state
                    ema.update(self.net)
        """
    )
    found = loop_updates(source, "epoch")
    assert found == {
        "amp": "amp.step()",
        "self.opt": "amp.step()",
        "self.sched": "self.sched.step()",
        "sgd": "sgd.step()",
        "heavy": "heavy.step()",
        "ema": "ema.update()",
    }
    # plain SGD keeps no state; what the saves or flor.checkpointing hold is covered
    assert set(unheld_updates(source, "epoch", {"self.opt"})) == {
        "amp",
        "self.sched",
        "heavy",
        "ema",
    }
    assert set(unheld_updates(source, "epoch", {"self", "amp", "heavy", "ema"})) == set()
