"""Memoized SkipBlock side effects: the names a step loop leaves for the code after it
(`running_loss`, the last batch's `loss`, a helper's `train_loss / (batch_idx + 1)`) are
kept with each checkpoint where the loop ends, so an outer-mode replay of an epoch-level
statement skips the step loops and still reads what a forward run read; checkpoints
without them make the run re-execute from its start, said in the plan."""

from __future__ import annotations

import random
from pathlib import Path

import torch
from conftest import recorded_project, run_py, write

from florwb_engine.analysis.loop_state import loop_state
from florwb_engine.replay import execute, plan_replay
from florwb_engine.store import Store

HEAD = """
import time
import torch
import florwb as flor

torch.manual_seed(0)
flor.set_checkpoint_budget(1.0)
data = torch.randn(32, 3)
target = data.sum(1, keepdim=True)
net = torch.nn.Linear(3, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.05)
n = 4
"""

PLAIN = (
    HEAD
    + """
with flor.checkpointing(model=net, optimizer=opt):
    for e in flor.loop("epoch", range(4)):
        running_loss = 0.0
        for s in flor.loop("step", range(n)):
            x, y = data[s * 8 : (s + 1) * 8], target[s * 8 : (s + 1) * 8]
            loss = ((net(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            running_loss += loss.item()
        print(f"epoch {e} loss {running_loss / n}")
        flor.log("epoch_loss", running_loss / n)
        time.sleep(0.02)
"""
)
PLAIN_NEW = PLAIN.replace(
    '        flor.log("epoch_loss", running_loss / n)\n',
    '        flor.log("epoch_loss", running_loss / n)\n'
    '        flor.log("memo_check", running_loss / n + loss.item())\n',
)

CIFAR = (
    HEAD
    + """

def train(epoch):
    train_loss = 0.0
    total = 0
    for batch_idx, s in enumerate(flor.loop("step", range(n))):
        x, y = data[s * 8 : (s + 1) * 8], target[s * 8 : (s + 1) * 8]
        loss = ((net(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        train_loss += loss.item()
        total += y.size(0)
    return train_loss / (batch_idx + 1) + total


with flor.checkpointing(model=net, optimizer=opt):
    for e in flor.loop("epoch", range(4)):
        avg = train(e)
        flor.log("avg", avg)
        time.sleep(0.02)
"""
)
CIFAR_NEW = CIFAR.replace(
    '        flor.log("avg", avg)\n',
    '        flor.log("avg", avg)\n        flor.log("memo_check", avg * 2 + e)\n',
)


def _forward(folder: Path, script: str, name: str) -> list[float]:
    write(folder / "train.py", script)
    run_py(folder, "train.py")
    return list(Store(folder).dataframe(name)[name])


def _replayed(root: Path, script: str, new: str, name: str) -> tuple[list[float], object]:
    project = recorded_project(root, script)
    write(project / "train.py", new)
    plan = plan_replay(project, [name], workers=2)
    (run,) = plan.runs
    assert execute(plan).status == "finished"
    return list(Store(project).dataframe(name)[name]), run


def _assert_skipped(run) -> None:
    assert run.mode == "outer", run.notes
    assert not run.from_start, run.notes
    assert len(run.segments) == 2 and run.segments[1].first > 0, run.segments
    assert sum(len(s.skip_inner) for s in run.segments) == 4, run.segments
    assert any("restored from the values memoized" in note for note in run.notes), run.notes


def test_an_epoch_summary_after_the_step_loop_replays_without_the_step_loop(tmp_path):
    values, run = _replayed(tmp_path / "p", PLAIN, PLAIN_NEW, "memo_check")
    _assert_skipped(run)
    assert values == _forward(tmp_path / "f", PLAIN_NEW, "memo_check")
    files = sorted((tmp_path / "p" / ".florwb" / "checkpoints").rglob("epoch-*.pt"))
    saved = torch.load(files[1], weights_only=True)
    assert sorted(saved["left"]["1"]) == ["loss", "running_loss", "s", "x", "y"]
    assert saved["unmemoized"] == {}


def test_a_helper_returning_what_its_step_loop_leaves_is_memoized_in_its_own_frame(tmp_path):
    values, run = _replayed(tmp_path / "p", CIFAR, CIFAR_NEW, "memo_check")
    _assert_skipped(run)
    assert values == _forward(tmp_path / "f", CIFAR_NEW, "memo_check")


def test_checkpoints_without_memoized_values_re_execute_from_the_start(tmp_path):
    project = recorded_project(tmp_path / "p", PLAIN)
    write(project / "train.py", PLAIN_NEW)
    for f in (project / ".florwb" / "checkpoints").rglob("epoch-*.pt"):
        saved = torch.load(f, weights_only=True)
        del saved["left"], saved["unmemoized"]  # as written before florwb memoized them
        torch.save(saved, f)
    plan = plan_replay(project, ["memo_check"], workers=2)
    (run,) = plan.runs
    assert run.from_start
    assert any("written before florwb memoized them" in note for note in run.notes), run.notes
    assert execute(plan).status == "finished"
    values = list(Store(project).dataframe("memo_check").memo_check)
    assert values == _forward(tmp_path / "f", PLAIN_NEW, "memo_check")


def test_a_value_too_big_to_memoize_makes_the_run_re_execute(tmp_path):
    project = recorded_project(tmp_path / "p", PLAIN, env={"FLORWB_CARRIED_MAX_BYTES": "4"})
    write(project / "train.py", PLAIN_NEW)
    plan = plan_replay(project, ["memo_check"], workers=2)
    (run,) = plan.runs
    assert run.from_start, run.notes
    assert any("could not be memoized" in note for note in run.notes), run.notes


# -- generated loop bodies --------------------------------------------------------------------

INNER = [
    "acc{k} = acc{k} + float(step_loss) * {k}",
    "acc{k} += float(step_loss) - {k}",
    "last{k} = float(step_loss) * 2 + {k}",
    "box{k}.total = box{k}.total + float(step_loss)",
    "count{k} += {k}",
]
AFTER = ["acc{k}", "last{k}", "count{k}", "box{k}.total", "acc{k} * count{k} + last{k}"]


def _generated(rng: random.Random, bodies: int, attributes: bool) -> tuple[str, str, str]:
    """(recorded script, today's script logging `memo_check`, its reads): `bodies` generated
    step-loop bodies side by side (names suffixed by their number), each with a read after
    the loop; `attributes` lets them write an attribute of an object the loop changes."""
    grammar = INNER if attributes else [line for line in INNER if "box" not in line]
    reads = AFTER if attributes else [read for read in AFTER if "box" not in read]
    inner, after, setup = [], [], []
    for k in range(1, bodies + 1):
        inner += [line.format(k=k) for line in rng.sample(grammar, 3)]
        after.append(rng.choice(reads).format(k=k))
        setup.append(f"box{k} = Box()\nacc{k} = 0.0\nlast{k} = 0.0\ncount{k} = 0\n")
    body = "\n".join(f"            {line}" for line in inner)
    script = (
        HEAD
        + """

class Box:
    total = 0.0


"""
        + "".join(setup)
        + f"""
with flor.checkpointing(model=net, optimizer=opt):
    for e in flor.loop("epoch", range(4)):
        for s in flor.loop("step", range(n)):
            x, y = data[s * 8 : (s + 1) * 8], target[s * 8 : (s + 1) * 8]
            step_loss = ((net(x) - y) ** 2).mean()
            opt.zero_grad()
            step_loss.backward()
            opt.step()
{body}
        time.sleep(0.02)
"""
    )
    read = " + ".join(f"float({a})" for a in after)
    new = script.replace(
        "        time.sleep(0.02)\n",
        f'        flor.log("memo_check", {read})\n        time.sleep(0.02)\n',
    )
    return script, new, read


def test_generated_bodies_replay_the_values_of_a_forward_run(tmp_path):
    """Whichever names the step loop assigns and the epoch body reads after it (plain,
    augmented, an attribute of an object the loop changes), a replay gives the values of a
    forward run of the new script: memoized (the step loop skipped) where the checkpoints
    hold what the loop left, re-executed from the start where they cannot (an object the
    loop changes that no checkpoint holds)."""
    rng = random.Random(21)
    for case, attributes in enumerate((False, True)):
        script, new, read = _generated(rng, 3, attributes)
        values, run = _replayed(tmp_path / f"p{case}", script, new, "memo_check")
        assert values == _forward(tmp_path / f"f{case}", new, "memo_check"), (read, run.notes)
        if "box" in new.split("opt.step()")[-1]:
            assert run.from_start, run.notes
        else:
            _assert_skipped(run)


def test_the_analysis_says_per_inner_loop_what_it_leaves_and_assigns_by_its_header_lines():
    code = CIFAR + "\n"
    found = loop_state(code, "epoch")
    lines = code.splitlines()
    ((first, last, left, assigned),) = found.inner_leaves
    assert 'flor.loop("step"' in lines[first - 1]  # the frame's line where the loop ends
    assert first <= last
    assert left == ("batch_idx", "total", "train_loss")
    assert set(assigned) >= {"batch_idx", "loss", "s", "total", "train_loss", "x", "y"}
    assert found.leaves == left


def test_a_name_too_big_to_memoize_costs_only_the_statements_that_read_it(tmp_path):
    """The step loop's `big` is over the bound and named in the checkpoint; a statement that
    reads only `loss` and `running_loss` is still replayed with the step loop skipped."""
    script = PLAIN.replace(
        "            running_loss += loss.item()\n",
        "            running_loss += loss.item()\n            big = torch.zeros(300_000)\n",
    )
    new = PLAIN_NEW.replace(
        "            running_loss += loss.item()\n",
        "            running_loss += loss.item()\n            big = torch.zeros(300_000)\n",
    )
    project = recorded_project(tmp_path / "p", script, env={"FLORWB_CARRIED_MAX_BYTES": "1000000"})
    saved = torch.load(
        sorted((project / ".florwb" / "checkpoints").rglob("epoch-*.pt"))[0], weights_only=True
    )
    assert "too big" in saved["unmemoized"]["big"] and "big" not in saved["left"]["1"]
    assert "loss" in saved["left"]["1"]
    write(project / "train.py", new)
    plan = plan_replay(project, ["memo_check"], workers=2)
    (run,) = plan.runs
    _assert_skipped(run)
    assert execute(plan).status == "finished"
    values = list(Store(project).dataframe("memo_check").memo_check)
    assert values == _forward(tmp_path / "f", new, "memo_check")


def test_an_evaluation_loop_that_binds_the_step_loops_names_again_skips_the_step_loop(tmp_path):
    """pytorch-cifar's shape: after the step loop a plain loop over held-out data binds `x`
    and `y` again before reading them, so nothing reads the step loop's `x`, `y`: the
    replay skips the step loop (memoized `running_loss`) and gives a forward run's values."""
    evaluation = (
        "        val = 0.0\n"
        "        for x, y in [(data[:8], target[:8]), (data[8:16], target[8:16])]:\n"
        "            val += float(((net(x) - y) ** 2).mean())\n"
    )
    script = PLAIN.replace('        print(f"epoch {e}', evaluation + '        print(f"epoch {e}')
    new = script.replace(
        '        flor.log("epoch_loss", running_loss / n)\n',
        '        flor.log("epoch_loss", running_loss / n)\n'
        '        flor.log("memo_check", running_loss / n + val)\n',
    )
    values, run = _replayed(tmp_path / "p", script, new, "memo_check")
    _assert_skipped(run)
    assert values == _forward(tmp_path / "f", new, "memo_check")


def test_a_name_the_next_epoch_reads_before_its_step_loop_re_executes_from_the_start(tmp_path):
    """`loss` of the last step read at the top of the next epoch (`if e: ...`): live where
    the step loop ends across the back edge, so it counts among what the step loop leaves;
    but a segment starting at f > 0 runs f - 1's top before any checkpoint is restored,
    where nothing set `loss`: the run re-executes from its start, said in the plan, and
    gives a forward run's values."""
    script = PLAIN.replace(
        "        running_loss = 0.0\n",
        "        running_loss = 0.0\n        before = loss.item() if e else 0.0\n",
    )
    new = script.replace(
        '        flor.log("epoch_loss", running_loss / n)\n',
        '        flor.log("epoch_loss", running_loss / n)\n'
        '        flor.log("memo_check", running_loss / n + before)\n',
    )
    found = loop_state(script, "epoch")
    assert "loss" in found.leaves and found.before_inner == ("loss",)
    values, run = _replayed(tmp_path / "p", script, new, "memo_check")
    assert run.from_start, run.notes
    assert any("reads loss before its inner loops" in note for note in run.notes), run.notes
    assert values == _forward(tmp_path / "f", new, "memo_check")


def test_a_segment_replays_its_lead_iteration_with_the_names_earlier_epochs_left(tmp_path):
    """`prev`, set at the end of each epoch, read at the top of the next one before its
    step loop: a segment starting at f >= 2 runs f - 1's top silently before restoring
    f - 1's checkpoint at the step loop, and that top must find `prev` as the run had it
    (it raised NameError), so each segment gives a forward run's values."""
    script = (
        PLAIN.replace("range(4)", "range(6)")
        .replace(
            "        running_loss = 0.0\n",
            "        running_loss = 0.0\n        shown = prev + 1 if e else 0.0\n",
        )
        .replace(
            "        time.sleep(0.02)\n",
            "        prev = running_loss / n\n        time.sleep(0.02)\n",
        )
    )
    new = script.replace(
        '        flor.log("epoch_loss", running_loss / n)\n',
        '        flor.log("epoch_loss", running_loss / n)\n'
        '        flor.log("memo_check", running_loss / n + shown)\n',
    )
    project = recorded_project(tmp_path / "p", script)
    write(project / "train.py", new)
    plan = plan_replay(project, ["memo_check"], workers=3)
    (run,) = plan.runs
    assert run.mode == "outer" and not run.from_start, run.notes
    assert any(s.first >= 2 for s in run.segments), run.segments
    assert execute(plan).status == "finished"
    values = list(Store(project).dataframe("memo_check").memo_check)
    assert values == _forward(tmp_path / "f", new, "memo_check")
