"""Recording a flordb-style training script end to end: args, logs, loops, checkpoints."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
import torch
from conftest import florwb, git, repo_state, run_py, write

from florwb_engine.record.checkpoint import Policy, load, restore
from florwb_engine.store import Store, StoreError

TRAIN = """
import time
import torch
import florwb as flor

torch.manual_seed(0)
lr = flor.arg("lr", 0.01)
epochs = flor.arg("epochs", 3)
net = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=lr)
x, y = torch.randn(32, 4), torch.randn(32, 1)
# a share of the 0.2 s epoch a busy CI machine's fsync still fits in (0.1 skipped epoch 1
# once under load); the policy's own arithmetic is tested below with given costs. The epoch's
# time is spent in its step loop: whether an iteration is checkpointed is decided where its
# inner loops end, on the compute time until then
flor.set_checkpoint_budget(0.5)
with flor.checkpointing(model=net, optimizer=opt):
    for epoch in flor.loop("epoch", range(epochs)):
        for step in flor.loop("step", range(4)):
            loss = ((net(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            flor.log("loss", loss.item())
            time.sleep(0.05)  # an epoch far longer than its checkpoint
        flor.log("acc", 1 / (1 + loss.item()))
flor.log("final_weight_sum", net.weight.sum().item())
flor.commit()
"""


@pytest.fixture(scope="module")
def recorded_once(tmp_path_factory):
    root = tmp_path_factory.mktemp("record") / "project"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(root / "README.md", "# project\n")
    git(root, "add", "README.md")
    git(root, "commit", "-q", "-m", "init")
    write(root / "train.py", TRAIN)
    run_py(root, "train.py", "--kwargs", "lr=0.05")
    return root


@pytest.fixture
def recorded(recorded_once, tmp_path):
    """A private copy of a project with one recorded run (lr=0.05)."""
    copy = tmp_path / "project"
    shutil.copytree(recorded_once, copy)
    return copy


def test_run_records_args_coordinates_timings_and_checkpoints(recorded):
    store = Store(recorded)
    (run,) = store.runs()
    assert run["status"] == "finished"
    assert run["args"] == {"lr": 0.05, "epochs": 3}
    assert run["argv"] == ["train.py", "--kwargs", "lr=0.05"]
    assert run["script"] == "train.py"
    assert len(run["version"]) == 40

    frame = store.dataframe("loss")
    assert list(frame.columns) == ["run_id", "version", "start_time", "epoch", "step", "loss"]
    assert [(int(e), int(s)) for e, s in zip(frame.epoch, frame.step)] == [
        (e, s) for e in range(3) for s in range(4)
    ]
    acc = store.dataframe("acc")
    assert list(acc.epoch) == [0, 1, 2] and "step" not in acc.columns

    timings = store.query(
        "SELECT loop, count(*) AS n, min(wait_s) AS w, min(iter_s) AS t "
        "FROM iterations GROUP BY loop ORDER BY loop"
    )
    assert timings.to_dict("records")[0]["loop"] == "epoch"
    assert list(timings.n) == [3, 12]
    assert (timings.w >= 0).all() and (timings.t > 0).all()
    assert store.query("SELECT min(iter_s) AS t FROM iterations WHERE loop='epoch'").t[0] >= 0.2

    ckpts = store.query("SELECT iteration, path, bytes FROM checkpoints ORDER BY iteration")
    assert list(ckpts.iteration) == [0, 1, 2]  # cheap checkpoints: every epoch
    folder = recorded / ".florwb" / "checkpoints" / run["run_id"]
    last = load(folder / ckpts.path.iloc[-1])
    assert set(last["objects"]) == {"model", "optimizer"}
    assert {"python", "torch"} <= set(last["rng"])
    final = store.dataframe("final_weight_sum").final_weight_sum.iloc[0]
    assert last["objects"]["model"]["weight"].sum().item() == pytest.approx(final)


def test_checkpoint_restores_model_optimizer_and_rng(recorded):
    (run,) = Store(recorded).runs()
    first = load(recorded / ".florwb" / "checkpoints" / run["run_id"] / "epoch-000000.pt")
    net = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(net.parameters(), lr=1.0)
    restore({"model": net, "optimizer": opt}, first)
    assert torch.equal(net.weight, first["objects"]["model"]["weight"])
    assert opt.param_groups[0]["lr"] == 0.05
    expected = torch.rand(3)
    restore({}, first)
    assert torch.equal(torch.rand(3), expected)


def test_edited_script_is_a_second_version_and_git_is_untouched(recorded):
    before = repo_state(recorded)
    text = (recorded / "train.py").read_text().replace("range(4)", "range(2)")
    (recorded / "train.py").write_text(text)
    mid = repo_state(recorded)
    run_py(recorded, "train.py")
    assert repo_state(recorded) == mid
    runs = Store(recorded).runs()
    assert len(runs) == 2 and runs[0]["version"] != runs[1]["version"]
    assert runs[1]["git_dirty"] is True
    (recorded / "train.py").write_text(TRAIN.lstrip())
    assert repo_state(recorded) == before
    run_py(recorded, "train.py")
    assert repo_state(recorded) == before
    runs = Store(recorded).runs()
    assert runs[2]["version"] == runs[0]["version"]  # identical trees are one version
    assert ".florwb" not in git(recorded, "status", "--porcelain")


def test_cli_runs_query_and_dataframe(recorded):
    runs = json.loads(florwb(recorded, "runs", "--json").stdout)
    assert [r["args"]["lr"] for r in runs] == [0.05]
    table = florwb(recorded, "runs").stdout
    assert runs[0]["run_id"] in table and "lr=0.05" in table
    rows = json.loads(florwb(recorded, "dataframe", "loss", "acc", "--format", "json").stdout)
    assert len(rows) == 15 and {"loss", "acc", "epoch", "step"} <= set(rows[0])
    csv = florwb(recorded, "query", "SELECT count(*) AS n FROM logs", "--format", "csv").stdout
    assert csv.split() == ["n", "16"]  # 12 loss + 3 acc + 1 final


def test_cli_and_workbench_list_runs_through_one_listing(recorded):
    """`florwb runs --json`, Store.runs() and the workbench's history read the same runs
    through one query and one value decoder, and the JSON keys are the documented ones."""
    from florwb_engine.store.history_values import load_history_values as load_history
    from florwb_engine.store.queries import load_run_detail

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    documented = re.search(
        r"`florwb runs --json` prints a list of objects with the keys `([^`]+)`", readme
    )
    assert documented is not None
    keys = [k.strip() for k in documented.group(1).split(",")]
    printed = json.loads(florwb(recorded, "runs", "--json").stdout)
    assert [list(run) for run in printed] == [keys]
    store = Store(recorded)
    assert printed == json.loads(json.dumps(store.runs()))
    (row,) = load_history(store).runs
    assert row == store.run_rows()[0] == load_run_detail(store, row.run_id).run
    assert row.to_json()["args"] == printed[0]["args"] == {"lr": 0.05, "epochs": 3}
    assert isinstance(row.args["epochs"], int) and row.n_checkpoints == 3 and row.n_logs == 16
    assert printed[0]["start_time"] == row.start_time.isoformat()


def test_flor_dataframe_and_query_from_python(recorded):
    code = (
        "import florwb as flor\n"
        "df = flor.dataframe('loss', 'acc')\n"
        "print(len(df), list(df.columns)[-2:])\n"
        "print(flor.query('SELECT count(*) AS n FROM runs').n[0])\n"
    )
    write(recorded / "read.py", code)
    out = run_py(recorded, "read.py").stdout.split("\n")
    assert out[0] == "15 ['loss', 'acc']"
    assert out[1] == "1"  # reading does not start a run of its own


def test_bad_sql_and_unknown_names_are_one_line_errors(recorded):
    proc = florwb(recorded, "query", "SELEC oops", check=False)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("florwb: ")
    proc = florwb(recorded, "query", "DELETE FROM runs", check=False)
    assert proc.returncode == 1 and "read-only" in proc.stderr
    assert len(Store(recorded).runs()) == 1
    proc = florwb(recorded, "dataframe", "losss", check=False)
    assert proc.returncode == 1 and "unknown log name 'losss'" in proc.stderr
    assert "loss" in proc.stderr  # names what does exist
    with pytest.raises(StoreError):
        Store(recorded).query("SELECT * FROM no_such_table")
    proc = florwb(recorded, "query", check=False)
    assert proc.returncode == 2


def test_policy_keeps_cost_under_budget():
    cheap = Policy(budget=0.02)
    taken = 0
    for _ in range(50):
        if cheap.should_checkpoint(1.0, 0.001, reserve=True):
            cheap.paid(0.001)
            taken += 1
    assert taken == 50  # far cheaper than an iteration: every iteration
    costly = Policy(budget=0.05)
    taken = 0
    for i in range(200):
        last = i == 199
        if costly.should_checkpoint(1.0, 0.2, reserve=not last) or last:
            costly.paid(0.2)
            taken += 1
        assert costly.cost_s <= 0.05 * costly.compute_s + 1e-9  # the final one included
    assert 40 <= taken <= 50


def test_values_of_every_kind_and_awkward_names(repo):
    write(
        repo / "values.py",
        """
        import math
        import numpy as np
        import torch
        import florwb as flor

        flor.log("text", "hello 'world'")
        flor.log("tensor", torch.tensor(2.5))
        flor.log("vector", torch.arange(3))
        flor.log("np_scalar", np.float32(1.5))
        flor.log("np_int", np.int64(7))
        flor.log("a dict", {"a": 1, "b": [1, 2]})
        flor.log("none", None)
        flor.log("nan", math.nan)
        flor.log("inf", math.inf)
        flor.log('quote"s and \\'single\\'', 1)
        flor.log("ünïcode ✓", 2)
        flor.log("flag", True)
        flor.log("big", 10**30)
        """,
    )
    run_py(repo, "values.py")
    store = Store(repo)
    logs = store.query("SELECT name, value, text, vtype FROM logs ORDER BY seq")
    by_name = {r.name: r for r in logs.itertuples()}
    assert by_name["text"].text == "hello 'world'" and by_name["text"].vtype == "str"
    assert by_name["tensor"].value == 2.5
    assert json.loads(by_name["vector"].text) == [0, 1, 2]
    assert by_name["np_scalar"].value == 1.5 and by_name["np_int"].vtype == "int"
    assert json.loads(by_name["a dict"].text) == {"a": 1, "b": [1, 2]}
    assert by_name["none"].vtype == "none"
    assert math.isnan(by_name["nan"].value) and by_name["nan"].vtype == "float"
    assert by_name["inf"].value == math.inf
    assert by_name["flag"].vtype == "bool"
    assert by_name["big"].value == 1e30
    frame = store.dataframe("quote\"s and 'single'", "ünïcode ✓", "text", "nan")
    assert frame["quote\"s and 'single'"][0] == 1 and frame["ünïcode ✓"][0] == 2
    assert frame["text"][0] == "hello 'world'"
    count = store.query("SELECT count(*) AS n FROM logs WHERE name = 'ünïcode ✓'").n[0]
    assert count == 1


def test_exception_marks_run_failed_and_keeps_logs(repo):
    write(
        repo / "boom.py",
        """
        import florwb as flor
        for i in flor.loop("epoch", range(5)):
            flor.log("x", i)
            if i == 2:
                raise ValueError("diverged")
        """,
    )
    proc = run_py(repo, "boom.py", check=False)
    assert proc.returncode == 1 and "ValueError: diverged" in proc.stderr
    (run,) = Store(repo).runs()
    assert run["status"] == "failed" and run["exception"] == "ValueError"
    assert "diverged" in run["message"]
    assert list(Store(repo).dataframe("x").x) == [0, 1, 2]


def test_kwargs_removed_before_user_argparse_and_bad_kwargs_fail_cleanly(repo):
    write(
        repo / "argp.py",
        """
        import argparse
        import florwb as flor
        parser = argparse.ArgumentParser()
        parser.add_argument("--batch", type=int, default=8)
        ns = parser.parse_args()
        epochs = flor.arg("epochs", 2)
        flor.log("seen", ns.batch * 100 + epochs)
        """,
    )
    run_py(repo, "argp.py", "--batch", "4", "--kwargs", "epochs=3")
    assert list(Store(repo).dataframe("seen").seen) == [403]
    proc = run_py(repo, "argp.py", "--kwargs", "epochs=three", check=False)
    assert proc.returncode == 2
    assert "epochs=three: expected int" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_py(repo, "argp.py", "--kwargs", "epoch=3")
    assert "not used by any flor.arg: epoch" in proc.stderr


def test_flor_loop_keeps_iterable_semantics_and_break(repo):
    write(
        repo / "loops.py",
        """
        import florwb as flor
        def gen():
            yield from "abc"
        out = []
        for ch in flor.loop("chars", gen()):
            out.append(ch)
        for i in flor.loop("outer", range(10)):
            if i == 3:
                break
            flor.log("i", i)
        flor.log("after", len(out))
        assert out == ["a", "b", "c"]
        """,
    )
    run_py(repo, "loops.py")
    store = Store(repo)
    assert list(store.dataframe("i").outer) == [0, 1, 2]
    after = store.dataframe("after")
    assert after["after"][0] == 3 and "outer" not in after.columns
    totals = store.query("SELECT loop, total IS NULL AS unknown, total FROM loops ORDER BY loop")
    assert list(totals.unknown) == [True, False]  # a generator has no len(); range(10) has
    assert totals.total[1] == 10
