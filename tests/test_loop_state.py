"""Loop state (FLOR's SkipBlock side effects): the names a training loop carries from one
iteration to the next are found in the code, saved with each checkpoint and put back at a
replay segment's start, so a segment that starts mid-run sees what a forward run saw; a run
whose state cannot all be restored re-executes from its start, said in the plan."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import recorded_project, run_py, write

from florwb_engine.analysis.loop_state import loop_state
from florwb_engine.replay import execute, plan_replay
from florwb_engine.store import Store


def _state(code: str, loop: str):
    return loop_state(textwrap.dedent(code).lstrip(), loop)


def test_a_prefetching_while_style_loop_carries_its_batch_ema_best_and_counter():
    found = _state(
        """
        import torch
        import florwb as flor
        net = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        def get_batch(split):
            return torch.randn(4, 2), torch.randn(4, 1)
        X, Y = get_batch("train")
        iter_num, best_val, ema, shown = 0, 1e9, None, 0
        with flor.checkpointing(model=net, optimizer=opt):
            for it in flor.loop("iter", range(10)):
                for micro in flor.loop("micro", range(2)):
                    loss = ((net(X) - Y) ** 2).mean()
                    X, Y = get_batch("train")
                    loss.backward()
                opt.step()
                ema = loss.item() if ema is None else 0.9 * ema + 0.1 * loss.item()
                best_val = min(best_val, loss.item())
                only_read = iter_num * 2
                fresh = 3
                print(fresh, only_read, shown)
                iter_num += 1
                if iter_num > 5:
                    break
        """,
        "iter",
    )
    assert found.found and found.at_module
    # read before assigned, and assigned: carried; `fresh`/`only_read` are assigned before
    # any read, `shown` only read; `it` is the loop's own, net/opt are checkpointed
    assert found.carried == ("X", "Y", "best_val", "ema", "iter_num")
    assert found.mutated_objects == ()  # opt.step() changes a registered object
    # the micro-step loop sets loss, which the body reads after it, and the prefetched X, Y,
    # which the next iteration's micro-step loop reads first
    assert found.leaves == ("X", "Y", "loss")


def test_an_rl_episode_loop_over_count_carries_its_running_reward():
    found = _state(
        """
        from itertools import count
        import florwb as flor
        rewards = []
        def finish_episode():
            rewards.append(1)
            del rewards[:]
        def main():
            running_reward = 10
            for i_episode in flor.loop("episode", count(1)):
                ep_reward = 0
                for t in flor.loop("t", range(1, 100)):
                    ep_reward += t
                running_reward = 0.05 * ep_reward + (1 - 0.05) * running_reward
                finish_episode()
                if running_reward > 100:
                    break
        main()
        """,
        "episode",
    )
    assert not found.at_module
    assert found.carried == ("running_reward",)
    assert found.global_names == frozenset()
    assert found.mutated_objects == ("rewards",)  # through the helper it calls
    assert found.leaves == ("ep_reward",)


def test_a_helper_function_trainer_with_a_global_best_and_counters():
    found = _state(
        """
        import florwb as flor
        best = 0.0
        steps = 0
        def evaluate(acc):
            global best
            if acc > best:
                best = acc
        def main(net, sched):
            global steps
            with flor.checkpointing(model=net):
                for epoch in flor.loop("epoch", range(3)):
                    running_loss, correct, total = 0.0, 0, 0
                    for i in flor.loop("step", range(3)):
                        running_loss += i
                        correct += 1
                        total += 2
                        steps += 1
                    flor.log("loss", running_loss / 3)
                    evaluate(correct / total)
                    sched.step()
        """,
        "epoch",
    )
    assert found.carried == ("best", "steps")
    assert found.global_names == {"best", "steps"}
    assert found.mutated_objects == ("sched",)
    # `steps += 1` in the next epoch's step loop reads what this one left
    assert found.leaves == ("correct", "running_loss", "steps", "total")


def test_only_flor_loops_leave_names_anywhere_under_the_main_loop():
    """A replay skips flor.loops only: a plain `for` runs, so what it sets is no leave. A
    step loop inside a helper the main loop calls (pytorch-cifar's `train()`) leaves what
    the helper reads after it, its `return` included."""
    found = _state(
        """
        import florwb as flor
        def train(loader):
            total = 0.0
            for batch_idx, x in flor.loop("step", enumerate(loader)):
                total += x
            return total / (batch_idx + 1)
        for epoch in flor.loop("epoch", range(3)):
            seen = 0
            for x in range(4):
                seen += x
            flor.log("loss", train([1.0, 2.0]) + seen)
        """,
        "epoch",
    )
    assert found.leaves == ("batch_idx", "total")


def test_a_flor_loop_inside_a_plain_loop_is_an_inner_loop_and_leaves_only_what_is_read():
    """The replay skips every flor.loop one flor.loop deep, also inside a plain `for` over
    phases: what it sets and the code after it reads (`loss`) is left stale. A name the
    body binds again before reading (`inputs` of the test loop) is not, although the step
    loop sets it too."""
    code = """
        import florwb as flor
        for epoch in flor.loop("epoch", range(2)):
            for phase in ("train", "val"):
                for inputs, targets in flor.loop("step", loader):
                    loss = f(inputs, targets)
                print(phase, loss)
            for inputs, targets in testloader:
                acc = g(inputs, targets)
            flor.log("acc", acc)
        """
    found = _state(code, "epoch")
    assert found.leaves == ("loss",)
    # the recording memoizes all the loop assigns, found by its header's line
    assert found.inner_leaves == ((4, 5, ("loss",), ("inputs", "loss", "targets")),)
    assert found.lines == (2, 9) and found.tail


def test_every_main_loop_of_the_name_has_its_inner_loops_analysed():
    """A script training twice with loops of one name: what the second epoch loop's step
    loop leaves counts too, and the first loop is the one whose lines are given."""
    found = _state(
        """
        import florwb as flor
        for epoch in flor.loop("epoch", range(2)):
            for x in flor.loop("step", range(3)):
                a = x
            flor.log("a", a)
        for epoch in flor.loop("epoch", range(2)):
            for y in flor.loop("step", range(3)):
                b = y
        """,
        "epoch",
    )
    assert found.leaves == ("a",)  # nothing reads b after its loop
    assert [first for first, *_ in found.inner_leaves] == [3, 7]
    assert found.lines == (2, 5) and found.tail


def test_an_object_registered_by_subscript_holds_nothing_else_of_its_container():
    """`flor.checkpointing(model=nets[0])` holds that one object: `nets[1]`, changed in
    place by the loop, is not held, and the paths the analysis compares cannot tell the
    two apart, so the container counts as changed."""
    found = _state(
        """
        import florwb as flor
        with flor.checkpointing(model=nets[0]):
            for epoch in flor.loop("epoch", range(2)):
                nets[1].step()
        """,
        "epoch",
    )
    assert found.registered == ()
    assert found.mutated_objects == ("nets",)


def test_a_trainer_method_changing_its_own_attributes_is_not_whole_state():
    found = _state(
        """
        import florwb as flor
        class Trainer:
            def fit(self):
                with flor.checkpointing(model=self.net, optimizer=self.opt):
                    for epoch in flor.loop("epoch", range(3)):
                        loss = self.net(1)
                        self.opt.step()
                        self.best = min(self.best, loss)
                        self.history.append(loss)
        """,
        "epoch",
    )
    assert found.carried == ()  # attributes, not names
    assert found.mutated_objects == ("self.best", "self.history")  # self.net/opt: held


def test_names_only_read_or_assigned_before_read_are_not_carried():
    found = _state(
        """
        import florwb as flor
        lr = 0.1
        scale = 2
        for epoch in flor.loop("epoch", range(3)):
            step_lr = lr * scale
            if epoch > 0:
                prev = step_lr
            else:
                prev = 0.0
            flor.log("lr", step_lr + prev)
        """,
        "epoch",
    )
    assert found.carried == ()


def test_a_name_read_on_one_branch_before_its_assignment_is_carried():
    found = _state(
        """
        import florwb as flor
        total = 0
        for epoch in flor.loop("epoch", range(3)):
            if epoch % 2:
                flor.log("total", total)
            total = epoch
        """,
        "epoch",
    )
    assert found.carried == ("total",)


def test_an_iterator_drawn_with_next_and_a_list_shuffled_in_place_are_changed_objects():
    """`batch = next(batches)` on an iterator made before the loop: a segment starting
    from a checkpoint would draw from a fresh one (other batches), so it is state the
    loop changes, like a list `shuffle` reorders in place."""
    found = _state(
        """
        import random
        import florwb as flor
        batches = iter(range(100))
        order = list(range(10))
        for epoch in flor.loop("epoch", range(3)):
            random.shuffle(order)
            batch = next(batches)
            flor.log("batch", batch + order[0])
        """,
        "epoch",
    )
    assert set(found.mutated_objects) == {"batches", "order"}


SCRIPT = """
import time
import numpy as np
import torch
import florwb as flor

torch.manual_seed(0)
flor.set_checkpoint_budget(1.0)
data = torch.randn(64, 3)
target = data.sum(1, keepdim=True)
net = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.05)


def get_batch():
    idx = torch.randint(0, 64, (8,))
    return data[idx], target[idx]


def train():
    X, Y = get_batch()
    ema = 0.0
    best = float("inf")
    spread = np.zeros(3, dtype=np.float32)
    with flor.checkpointing(model=net, optimizer=opt):
        for it in flor.loop("iter", range(6)):
            loss = ((net(X) - Y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            value = loss.item()
            ema = 0.9 * ema + 0.1 * value
            best = min(best, value)
            spread = spread * np.float32(0.5) + np.float32(value)
            X, Y = get_batch()
            time.sleep(0.02)


train()
"""
NEW = SCRIPT.replace(
    "            best = min(best, value)\n",
    "            best = min(best, value)\n"
    '            flor.log("ema", ema)\n'
    '            flor.log("best", best)\n'
    '            flor.log("next_batch", float(X.sum()))\n'
    '            flor.log("spread", float(spread.sum()))\n',
)


CARRIED_LOGS = ("ema", "best", "next_batch", "spread")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("project")
    recorded_project(root, SCRIPT)
    write(root / "train.py", NEW)
    return root


@pytest.fixture(scope="module")
def forward(tmp_path_factory) -> dict[str, list[float]]:
    folder = tmp_path_factory.mktemp("forward")
    write(folder / "train.py", NEW)
    run_py(folder, "train.py")
    frame = Store(folder).dataframe(*CARRIED_LOGS)
    return {name: list(frame[name]) for name in CARRIED_LOGS}


def test_checkpoints_keep_the_carried_names_by_value(recorded):
    files = sorted((recorded / ".florwb" / "checkpoints").rglob("iter-*.pt"))
    assert len(files) == 6
    saved = torch.load(files[2], weights_only=True)
    assert sorted(saved["carried"]) == ["X", "Y", "best", "ema", "spread"]
    assert saved["uncarried"] == {}
    assert saved["carried"]["X"].shape == (8, 3)


def test_a_segment_starting_mid_run_sees_the_carried_state_of_a_forward_run(recorded, forward):
    plan = plan_replay(recorded, list(CARRIED_LOGS), workers=2)
    (run,) = plan.runs
    assert not run.from_start, run.notes
    assert len(run.segments) == 2 and run.segments[1].first > 0  # from a checkpoint
    assert execute(plan).status == "finished"
    frame = Store(recorded).dataframe(*CARRIED_LOGS)
    for name in CARRIED_LOGS:
        assert list(frame[name]) == forward[name], name  # bit for bit


def test_checkpoints_without_loop_state_make_the_run_re_execute_from_its_start(tmp_path, forward):
    project = tmp_path / "old"
    recorded_project(project, SCRIPT)
    write(project / "train.py", NEW)
    for f in (project / ".florwb" / "checkpoints").rglob("iter-*.pt"):
        saved = torch.load(f, weights_only=True)
        del saved["carried"], saved["uncarried"]  # as written before florwb kept them
        torch.save(saved, f)
    plan = plan_replay(project, ["ema"], workers=2)
    (run,) = plan.runs
    assert run.from_start
    assert [(s.first, s.last) for s in run.segments] == [(0, 5)]
    assert any(
        "the iter loop carries X, Y, best, ema from one iteration to the next, which this "
        "run's checkpoints do not hold" in note
        for note in run.notes
    ), run.notes
    assert execute(plan).status == "finished"
    assert list(Store(project).dataframe("ema").ema) == forward["ema"]


ITERATOR = """
import time
import torch
import florwb as flor

net = torch.nn.Linear(1, 1)
history = []
flor.set_checkpoint_budget(1.0)
stream = iter(range(100))
with flor.checkpointing(model=net):
    for epoch in flor.loop("epoch", range(4)):
        if epoch % 2 == 0:
            stream = iter(range(epoch, 100))
        x = next(stream)
        time.sleep(0.02)
"""


def test_what_cannot_be_saved_is_named_and_the_run_re_executes_from_its_start(tmp_path):
    project = tmp_path / "it"
    recorded_project(project, ITERATOR)
    saved = torch.load(
        sorted((project / ".florwb" / "checkpoints").rglob("epoch-*.pt"))[0], weights_only=True
    )
    assert saved["carried"] == {}
    assert "an iterator (range_iterator)" in saved["uncarried"]["stream"]
    issues = Store(project).query("SELECT kind, detail FROM run_issues")
    assert list(issues.kind) == ["loop state not saved"]  # said once, not per checkpoint
    write(
        project / "train.py",
        ITERATOR.replace("        time.sleep", '        flor.log("x", x)\n        time.sleep'),
    )
    plan = plan_replay(project, ["x"], workers=2)
    (run,) = plan.runs
    assert run.from_start
    assert any("stream could not be saved with checkpoint" in n for n in run.notes), run.notes
    assert execute(plan).status == "finished"
    assert list(Store(project).dataframe("x").x) == [0, 1, 2, 3]


def test_a_loop_that_changes_an_unregistered_object_restores_whole_state_or_none(tmp_path):
    script = ITERATOR.replace(
        "        x = next(stream)\n", "        x = next(stream)\n        history.append(x)\n"
    ).replace("stream = iter(range(epoch, 100))", "pass")
    project = tmp_path / "hist"
    recorded_project(project, script)
    write(
        project / "train.py",
        script.replace(
            "        time.sleep", '        flor.log("n", len(history))\n        time.sleep'
        ),
    )
    plan = plan_replay(project, ["n"], workers=2)
    (run,) = plan.runs
    assert run.from_start
    assert execute(plan).status == "finished"
    assert list(Store(project).dataframe("n").n) == [1, 2, 3, 4]


SHUFFLED = """
import time
import torch
from torch.utils.data import DataLoader, TensorDataset
import florwb as flor

torch.manual_seed(0)
flor.set_checkpoint_budget(1.0)
data = torch.randn(32, 3)
generator = torch.Generator()
generator.manual_seed(7)
loader = DataLoader(TensorDataset(data), batch_size=8, shuffle=True, generator=generator)
net = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.05)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(5)):
        for (x,) in flor.loop("step", loader):
            loss = (net(x) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        time.sleep(0.02)
"""
SHUFFLED_NEW = SHUFFLED.replace(
    "            opt.step()\n",
    '            opt.step()\n            flor.log("first", float(x[0, 0]))\n',
)


def test_a_shuffling_dataloaders_own_generator_is_restored_with_the_checkpoint(tmp_path):
    """The loader's generator draws each epoch's order: a segment starting at epoch 3
    must shuffle as the run did there, not as a fresh generator at epoch 0 would."""
    forward = tmp_path / "forward"
    write(forward / "train.py", SHUFFLED_NEW)
    run_py(forward, "train.py")
    expected = list(Store(forward).dataframe("first")["first"])
    project = recorded_project(tmp_path / "project", SHUFFLED)
    saved = torch.load(next((project / ".florwb" / "checkpoints").rglob("epoch-*.pt")))
    assert set(saved["generators"]) == {"generator"}
    write(project / "train.py", SHUFFLED_NEW)
    plan = plan_replay(project, ["first"], workers=2)
    (run,) = plan.runs
    assert not run.from_start and run.segments[1].first > 0, run.notes
    assert execute(plan).status == "finished"
    assert list(Store(project).dataframe("first")["first"]) == expected


def test_the_analysis_of_a_script_is_kept_and_reused_by_its_later_runs(tmp_path):
    """The analysis costs about a second of CPU per run: a second run of the same code
    reads the answer the first one kept (shown here by an answer edited in between)."""
    cache = tmp_path / "cache"
    env = {"XDG_CACHE_HOME": str(cache)}
    project = tmp_path / "project"
    recorded_project(project, SCRIPT, env=env)
    (kept,) = (cache / "florwb" / "loop-state").glob("*.json")
    answer = json.loads(kept.read_text())
    assert sorted(answer["carried"]) == ["X", "Y", "best", "ema", "spread"]
    kept.write_text(json.dumps({**answer, "carried": ["ema"]}))
    run_py(project, "train.py", env=env)
    newest = max(Store(project).runs(), key=lambda r: r["start_time"])["run_id"]
    files = sorted((project / ".florwb" / "checkpoints" / newest).glob("iter-*.pt"))
    assert sorted(torch.load(files[-1], weights_only=True)["carried"]) == ["ema"]
