"""Unit tests for florwb_engine.propagate: finding, placing and diffing log statements."""

from __future__ import annotations

import ast
import difflib
import importlib.util
import json
import time
from pathlib import Path

import pytest

from florwb_engine.propagate import (
    LogStatement,
    Placement,
    PropagationError,
    PropagationResult,
    find_log_statements,
    propagate,
    statement_matrix,
)

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(__file__).parent / "propagation_corpus"


def _removed_lines(old: str, new: str) -> list[str]:
    """Lines of `old` that are not in `new` (byte-exact, line endings kept)."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    removed: list[str] = []
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            removed.extend(a[i1:i2])
    return removed


def _added_lines(old: str, new: str) -> list[str]:
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    added: list[str] = []
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            added.extend(b[j1:j2])
    return added


# -- finding ---------------------------------------------------------------------------------

FIND_SOURCE = """\
import florwb as flor
import torch


def evaluate(model, loader):
    correct = sum((model(x).argmax(1) == y).sum().item() for x, y in loader)
    return flor.log("acc", correct / len(loader.dataset))


def main(model, loader, optimizer):
    bs = flor.arg("bs", 32)
    loader = make_loader(batch_size=flor.log("batch_size", bs))
    for epoch in flor.loop("epoch", range(3)):
        for i, (x, y) in enumerate(flor.loop("step", loader)):
            loss = model(x, y)
            flor.log("loss", loss.item())
            with torch.no_grad():
                if i % 10 == 0:
                    flor.log("w", model.w.norm().item())
        evaluate(model, loader)
    flor.log(name_variable, 1)
    logger.log("not_flor", 1)


main(None, None, None)
"""


def test_find_log_statements_forms_lines_loops_and_reads() -> None:
    found = {s.name: s for s in find_log_statements(FIND_SOURCE)}
    assert set(found) == {"acc", "batch_size", "loss", "w"}
    assert all(isinstance(s, LogStatement) for s in found.values())

    loss = found["loss"]
    assert (loss.line, loss.form) == (16, "standalone")
    assert loss.code == 'flor.log("loss", loss.item())'
    assert loss.loop_path == ("epoch", "step")
    assert loss.reads == frozenset({"loss"})
    assert loss.chain[0] == "def main"

    batch_size = found["batch_size"]
    assert (batch_size.line, batch_size.form) == (12, "wrapped")
    assert batch_size.loop_path == ()
    assert batch_size.reads == frozenset({"bs"})
    assert "make_loader" in batch_size.code

    acc = found["acc"]
    assert acc.form == "wrapped" and acc.code.startswith("return flor.log(")
    # evaluate() is only called inside the epoch loop, so that is where it runs
    assert acc.loop_path == ("epoch",)
    assert acc.reads == frozenset({"correct", "len", "loader"})

    w = found["w"]
    assert w.loop_path == ("epoch", "step")
    assert w.chain[-2:] == ("with torch.no_grad()", "if i % 10 == 0")


@pytest.mark.parametrize(
    "header, call",
    [
        ("import florwb as flor", 'flor.log("x", x)'),
        ("import flordb as flor", 'flor.log("x", x)'),
        ("import florwb", 'florwb.log("x", x)'),
        ("from florwb import log", 'log("x", x)'),
        ("from flordb import log as record", 'record("x", x)'),
    ],
)
def test_find_log_statements_import_forms(header: str, call: str) -> None:
    source = f"{header}\nx = 1\n{call}\n"
    [statement] = find_log_statements(source)
    assert (statement.name, statement.line, statement.form) == ("x", 3, "standalone")


def test_find_ignores_other_modules_named_flor() -> None:
    assert find_log_statements('import mylib as flor\nflor.log("x", 1)\n') == []


# -- propagation -----------------------------------------------------------------------------

OLD = """\
#!/usr/bin/env python
# Training script, old version.  Odd   spacing and comments must survive.
import florwb as flor
import torch  # the framework

model = torch.nn.Linear( 4,2 )   # tiny
opt   = torch.optim.SGD(model.parameters(), lr = 0.1)


def train(loader):
    \"\"\"One pass.\"\"\"
    for x, y in flor.loop('step', loader):   # inner loop
        # forward
        out = model(x)
        loss = ((out - y) ** 2).mean()

        loss.backward()   # backward
        opt.step() ; opt.zero_grad()
    # trailing comment in the block
    return loss.item()


for epoch in flor.loop("epoch", range(3)):
    avg = train([])
    print( "epoch" , epoch , avg )
"""

NEW = """\
import florwb as flor
import torch

model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def train(loader):
    for x, y in flor.loop("step", loader):
        out = model(x)
        loss = ((out - y) ** 2).mean()
        flor.log("loss", loss.item())
        loss.backward()
        flor.log("grad", model.weight.grad.norm().item())
        opt.step()
        opt.zero_grad()
    return flor.log("last_loss", loss.item())


for epoch in flor.loop("epoch", range(3)):
    avg = train([])
    flor.log("avg", avg)
    print("epoch", epoch, avg)
"""


def test_formatting_and_comments_preserved_byte_for_byte() -> None:
    result = propagate(NEW, OLD)
    assert {p.name: p.status for p in result.placements} == {
        "loss": "inserted",
        "grad": "inserted",
        "last_loss": "inserted",
        "avg": "inserted",
    }
    # only whole lines were added, except the one wrapped return
    removed = _removed_lines(OLD, result.code)
    assert removed == ["    return loss.item()\n"]
    added = _added_lines(OLD, result.code)
    assert added == [
        '        flor.log("loss", loss.item())\n',
        '        flor.log("grad", model.weight.grad.norm().item())\n',
        '    return flor.log("last_loss", loss.item())\n',
        '    flor.log("avg", avg)\n',
    ]
    lines = result.code.splitlines()
    for placement in result.placements:
        assert f'"{placement.name}"' in lines[placement.old_line - 1]
    # the new statements go right after their matched predecessors
    assert (
        lines.index('        flor.log("loss", loss.item())')
        == lines.index("        loss = ((out - y) ** 2).mean()") + 1
    )


def test_unchanged_when_nothing_to_place() -> None:
    result = propagate(OLD, OLD)
    assert result.code == OLD
    assert result.placements == ()
    again = propagate(NEW, propagate(NEW, OLD).code)
    assert all(p.status == "present" for p in again.placements)
    assert again.code == propagate(NEW, OLD).code


def test_crlf_and_tabs_are_kept() -> None:
    old = "import florwb as flor\r\nfor i in range(3):\r\n\tx = i * 2\r\n\tprint(x)\r\n"
    new = 'import florwb as flor\nfor i in range(3):\n    x = i * 2\n    flor.log("x", x)\n'
    result = propagate(new, old)
    assert result.code == (
        'import florwb as flor\r\nfor i in range(3):\r\n\tx = i * 2\r\n\tflor.log("x", x)\r\n'
        "\tprint(x)\r\n"
    )


def test_wrapped_form_wraps_the_old_expression() -> None:
    new = """\
import florwb as flor
from torch.utils.data import DataLoader

lr = flor.log("lr", flor.arg("lr", 1e-3))
loader = DataLoader(ds, shuffle=True, batch_size=flor.log("bs", 64))


def score(a, b):
    return flor.log("score", a / b)
"""
    old = """\
import florwb as flor
from torch.utils.data import DataLoader

lr = 0.01  # fixed
loader = DataLoader(ds, batch_size=32, num_workers=2, shuffle=True)


def score(a, b):
    return (a + 1) / b
"""
    result = propagate(new, old)
    assert all(p.status == "inserted" for p in result.placements)
    assert (
        result.code
        == """\
import florwb as flor
from torch.utils.data import DataLoader

lr = flor.log("lr", 0.01)  # fixed
loader = DataLoader(ds, batch_size=flor.log("bs", 32), num_workers=2, shuffle=True)


def score(a, b):
    return flor.log("score", (a + 1) / b)
"""
    )
    lines = {p.name: p.old_line for p in result.placements}
    assert lines == {"lr": 4, "bs": 5, "score": 9}


def test_wrapped_form_without_counterpart_is_reported() -> None:
    new = 'import florwb as flor\nloader = make(ds, batch_size=flor.log("bs", 64))\n'
    old = "import florwb as flor\nloader = make(ds)\n"
    [placement] = propagate(new, old).placements
    assert placement.status == "unplaced"
    assert placement.old_line is None and "no expression" in placement.reason


def test_present_statements_report_their_line_in_the_output() -> None:
    old = """\
import florwb as flor
for epoch in flor.loop("epoch", range(2)):
    loss = 1.0
    flor.log('loss', loss)   # already here
"""
    new = """\
import florwb as flor
for epoch in flor.loop("epoch", range(2)):
    lr = 0.1
    flor.log("lr", lr)
    loss = 1.0
    flor.log("loss", loss)
"""
    result = propagate(new, old)
    by_name = {p.name: p for p in result.placements}
    assert by_name["loss"] == Placement("loss", 6, 4, "present", None, ("epoch",))
    # lr reads a variable the old version does not have
    assert by_name["lr"].status == "unplaced"
    assert "`lr`" in by_name["lr"].reason
    assert result.code == old


def test_names_filter_and_unknown_names() -> None:
    result = propagate(NEW, OLD, names=["grad", "avg"])
    assert [p.name for p in result.placements] == ["grad", "avg"]
    assert '"loss"' not in result.code and '"grad"' in result.code
    with pytest.raises(PropagationError, match="nope"):
        propagate(NEW, OLD, names=["nope"])


def test_unparsable_sources_raise_one_line_errors() -> None:
    with pytest.raises(PropagationError) as info:
        propagate("import florwb as flor\nfor x in y\n    pass\n", OLD)
    message = str(info.value)
    assert "\n" not in message and "new version" in message and "line 2" in message
    with pytest.raises(PropagationError, match="old version does not parse: line 3"):
        propagate(NEW, "x = 1\ny = 2\ndef (:\n")


def test_renamed_variables_are_mapped_or_refused() -> None:
    new = """\
import florwb as flor
net = build(depth=18)
opt = make_opt(net.parameters())
for x in flor.loop("step", data):
    opt.step()
    flor.log("w", net.weight.norm().item())
    flor.log("extra", extra_metric(x))
"""
    old = """\
import florwb as flor
model = build(depth=18)
opt = make_opt(model.parameters())
for x in flor.loop("step", data):
    opt.step()
"""
    result = propagate(new, old)
    by_name = {p.name: p for p in result.placements}
    assert by_name["w"].status == "inserted"
    assert '    flor.log("w", model.weight.norm().item())\n' in result.code
    assert by_name["extra"].status == "unplaced" and "extra_metric" in by_name["extra"].reason
    ast.parse(result.code)


def test_ambiguous_match_is_reported_not_guessed() -> None:
    body = "    for x in data:\n        loss = step(x)\n        report(loss)\n"
    new = "import florwb as flor\n\n\ndef run(data):\n" + body + '        flor.log("l", loss)\n'
    old = "import florwb as flor\n\n\ndef a(data):\n" + body + "\n\ndef b(data):\n" + body
    [placement] = propagate(new, old).placements
    assert placement.status == "unplaced" and "several" in placement.reason


def test_old_version_without_florwb_gets_the_import() -> None:
    new = 'import florwb as flor\nimport math\nx = math.pi\nflor.log("x", x)\n'
    old = '"""Doc."""\nimport math\n\nx = math.pi\nprint(x)\n'
    result = propagate(new, old)
    assert result.code == (
        '"""Doc."""\nimport math\nimport florwb as flor\n\nx = math.pi\nflor.log("x", x)\n'
        "print(x)\n"
    )
    assert result.placements[0].old_line == 6


def test_old_alias_is_used() -> None:
    new = 'from florwb import log\nx = 1\nlog("x", x)\n'
    old = "import flordb as fdb\nx = 2\n"
    result = propagate(new, old)
    assert result.code == 'import flordb as fdb\nx = 2\nfdb.log("x", x)\n'


def test_a_logged_call_is_not_run_twice() -> None:
    header = "import florwb as flor\nfrom lib import model, sched, train_one_epoch\n"
    loop = 'for epoch in flor.loop("epoch", range(3)):\n'
    new = (
        header
        + loop
        + '    flor.log("train_loss", train_one_epoch(model))\n'
        + '    flor.log("lr", sched.get_last_lr()[0])\n'
    )
    old = header + loop + "    train_one_epoch(model)\n    print(sched.get_last_lr()[0])\n"
    result = propagate(new, old)
    # train_one_epoch() runs once: its old call is wrapped; get_last_lr() only reads
    assert result.code == (
        header
        + loop
        + '    flor.log("train_loss", train_one_epoch(model))\n'
        + '    flor.log("lr", sched.get_last_lr()[0])\n'
        + "    print(sched.get_last_lr()[0])\n"
    )
    assert [p.old_line for p in result.placements] == [4, 5]


def test_nested_log_calls_travel_with_their_statement() -> None:
    new = 'import florwb as flor\nx = 1\nflor.log("a", flor.log("b", x) + 1)\n'
    result = propagate(new, "import florwb as flor\nx = 2\n")
    assert result.code.endswith('flor.log("a", flor.log("b", x) + 1)\n')
    assert [(p.name, p.status, p.old_line) for p in result.placements] == [
        ("a", "inserted", 3),
        ("b", "inserted", 3),
    ]


def test_never_inserted_after_return() -> None:
    new = 'import florwb as flor\ndef f(x):\n    y = x + 1\n    flor.log("y", y)\n    return y\n'
    old = "import florwb as flor\ndef f(x):\n    return x\n    y = x + 1\n"
    [placement] = propagate(new, old).placements
    assert placement.status == "unplaced" and "never run" in placement.reason


def test_one_line_blocks_are_not_split() -> None:
    new = 'import florwb as flor\nfor i in range(3): y = i; flor.log("y", y)\n'
    old = "import florwb as flor\nfor i in range(3): y = i\n"
    [placement] = propagate(new, old).placements
    assert placement.status == "unplaced" and "one-line" in placement.reason


def test_to_json_has_stable_keys() -> None:
    result = propagate(NEW, OLD)
    assert isinstance(result, PropagationResult)
    data = result.to_json()
    assert list(data) == ["statements"]
    for row in data["statements"]:
        assert list(row) == [
            "name",
            "line_new",
            "line_old",
            "status",
            "reason",
            "loop_path",
            "anchor",
        ]
        assert isinstance(row["loop_path"], list)
    json.dumps(data)
    assert data["statements"][0]["loop_path"] == ["epoch", "step"]


def test_output_always_parses_across_unrelated_versions() -> None:
    cases = sorted(p for p in CORPUS.iterdir() if p.is_dir())[::3]
    for a in cases:
        for b in cases:
            new = (a / "new.py").read_text()
            old = (b / "old.py").read_text()
            result = propagate(new, old)
            ast.parse(result.code)
            if not any(p.status == "inserted" for p in result.placements):
                assert result.code == old


# -- the statement matrix --------------------------------------------------------------------

V1 = """\
import florwb as flor
for epoch in flor.loop("epoch", range(3)):
    loss = 1.0 / (epoch + 1)
"""
V2 = """\
import florwb as flor
for epoch in flor.loop("epoch", range(3)):
    loss = 1.0 / (epoch + 1)
    flor.log("loss", loss)
    old_only = loss * 2
    flor.log("old_only", old_only)
"""
V3 = """\
import florwb as flor
for epoch in flor.loop("epoch", range(3)):
    loss = 1.0 / (epoch + 1)
    flor.log("loss", loss)
    acc = 1 - loss
    flor.log("acc", acc)
"""


def test_statement_matrix() -> None:
    matrix = statement_matrix({"v1": V1, "v2": V2, "v3": V3}, reference="v3")
    assert matrix.names == ("loss", "acc", "old_only")
    assert matrix.versions == ("v1", "v2", "v3")
    assert matrix.cell("loss", "v3").status == "present" and matrix.cell("loss", "v3").line == 4
    assert matrix.cell("loss", "v2").status == "present"
    loss_v1 = matrix.cell("loss", "v1")
    assert (loss_v1.status, loss_v1.line) == ("propagatable", 4)
    acc_v1 = matrix.cell("acc", "v1")
    assert acc_v1.status == "cannot place" and "`acc`" in acc_v1.reason
    # old_only only exists in v2; v3 has everything it reads, v1 does not
    assert matrix.cell("old_only", "v2").status == "present"
    assert matrix.cell("old_only", "v3").status == "cannot place"
    data = matrix.to_json()
    assert data["cells"]["acc"]["v3"] == {"status": "present", "line": 6, "reason": None}
    json.dumps(data)


def test_statement_matrix_bad_inputs() -> None:
    with pytest.raises(ValueError):
        statement_matrix({"v1": V1}, reference="v9")
    matrix = statement_matrix({"v1": "def broken(:\n", "v3": V3}, reference="v3")
    cell = matrix.cell("loss", "v1")
    assert cell.status == "cannot place" and "does not parse" in cell.reason


# -- scale -----------------------------------------------------------------------------------


def _bench_module():
    spec = importlib.util.spec_from_file_location(
        "bench_propagate", ROOT / "benchmarks" / "bench_propagate.py"
    )
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_thousand_line_script_with_twenty_statements() -> None:
    from florwb_engine.propagate import finder

    new, old = _bench_module().make_sources()
    assert len(old.splitlines()) >= 1000
    finder.analysis_of.cache_clear()
    start = time.perf_counter()
    result = propagate(new, old)
    elapsed = time.perf_counter() - start
    print(f"\npropagate: 20 statements into {len(old.splitlines())} lines in {elapsed:.3f} s")
    assert len(result.placements) == 20
    assert all(p.status == "inserted" for p in result.placements)
    assert len(_added_lines(old, result.code)) == 20
    assert _removed_lines(old, result.code) == []
    ast.parse(result.code)


def test_engine_does_not_import_the_ui() -> None:
    for path in (ROOT / "engine" / "propagate").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in ("textual", "florwb"), (path, name)


def test_cli_reports_how_each_placement_was_anchored() -> None:
    """`florwb propagate` says per statement how sure its place is, in text and JSON."""
    import subprocess
    import sys

    case = ROOT / "tests" / "propagation_corpus" / "55_positional_fallback"
    cli = [sys.executable, "-m", "florwb.cli", "propagate", str(case / "new.py")]
    text = subprocess.run([*cli, str(case / "old.py")], capture_output=True, text=True, check=True)
    assert text.stdout == (case / "expected.py").read_text()
    assert "n_metrics (line 10) inserted at line 9, anchored positional" in text.stderr
    assert "placed by position" in text.stderr
    report = subprocess.run(
        [*cli, str(case / "old.py"), "--json"], capture_output=True, text=True, check=True
    )
    (row,) = json.loads(report.stdout)["statements"]
    assert row["anchor"] == "positional" and row["status"] == "inserted"
    exact = ROOT / "tests" / "propagation_corpus" / "50_moved_siblings_nearest"
    report = subprocess.run(
        [*cli[:-1], str(exact / "new.py"), str(exact / "old.py"), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert [r["anchor"] for r in json.loads(report.stdout)["statements"]] == ["exact"]


def test_results_and_parsed_versions_are_reused_across_calls() -> None:
    """The planner and the matrix ask for the same pairs again: nothing is parsed twice."""
    from florwb_engine.propagate import finder

    new, old = "".join(NEW), "".join(OLD)  # equal text, other string objects
    first = propagate(NEW, OLD)
    assert propagate(new, old) is first
    assert propagate(NEW, OLD, names=["grad"]) is propagate(new, old, names=("grad",))
    assert finder.analyze(old) is finder.analyze(OLD)
    assert finder.analyze(OLD).bindings is finder.analyze(old).bindings
    before = finder.analysis_of.cache_info().misses
    propagate(NEW, OLD, names=["avg"])  # another statement into the same version
    assert finder.analysis_of.cache_info().misses == before


def _one(new: str, old: str):
    result = propagate(new, old)
    ast.parse(result.code)
    (placement,) = result.placements
    return result, placement


def test_name_bound_in_try_body_is_unbound_after_a_handler_that_goes_on() -> None:
    head = "import florwb as flor\n\ndef f(load):\n"
    new = head + (
        "    try:\n        data = load()\n    except OSError:\n        data = None\n"
        '    flor.log("n", len(data))\n    return data\n'
    )
    old_pass = head + (
        "    try:\n        data = load()\n    except OSError:\n        print('no data')\n"
        "    return data\n"
    )
    result, placement = _one(new, old_pass)
    assert placement.status == "unplaced" and "may be unbound" in placement.reason
    assert result.code == old_pass
    old_exit = old_pass.replace("print('no data')", "sys.exit(1)")
    result, placement = _one(new, old_exit)
    assert placement.status == "inserted" and placement.anchor in ("exact", "similar")
    assert '    flor.log("n", len(data))\n    return data\n' in result.code


def test_no_placement_after_if_elif_else_that_all_end_or_endless_while() -> None:
    new = (
        "import florwb as flor\n\ndef f(x):\n    if x > 1:\n        y = 1\n"
        "    elif x < 0:\n        y = 2\n    else:\n        y = 3\n"
        '    flor.log("y", y)\n    return y\n'
    )
    old = (
        "import florwb as flor\n\ndef f(x):\n    if x > 1:\n        y = 1\n        return y\n"
        "    elif x < 0:\n        raise ValueError(x)\n    else:\n        y = 3\n"
        "        return y\n"
    )
    result, placement = _one(new, old)
    assert placement.status == "unplaced" and "never run" in placement.reason
    assert result.code == old
    new = (
        "import florwb as flor\n\ndef serve(q):\n    while True:\n        q.get()\n"
        '    flor.log("done", 1)\n'
    )
    old = "import florwb as flor\n\ndef serve(q):\n    while True:\n        q.get()\n"
    assert _one(new, old)[1].status == "unplaced"
    with_break = old.replace("q.get()\n", "if q.get() is None:\n            break\n")
    new_break = new.replace("q.get()\n", "if q.get() is None:\n            break\n")
    assert _one(new_break, with_break)[1].status == "inserted"


def test_trailing_lines_of_nested_blocks_move_below_the_inserted_statement() -> None:
    old = (
        "import florwb as flor\n\nfor epoch in flor.loop('epoch', range(3)):\n"
        "    if epoch:\n        for step in range(2):\n            s = step\n\n"
        "            # inner note\n        # middle note\n\n"
        "print('done')\n"
    )
    new = (
        "import florwb as flor\n\nfor epoch in flor.loop('epoch', range(3)):\n"
        "    if epoch:\n        for step in range(2):\n            s = step\n"
        '    flor.log("e", epoch)\n'
        "print('done')\n"
    )
    result, placement = _one(new, old)
    assert placement.status == "inserted" and placement.old_line == 7
    assert result.code == old.replace("s = step\n\n", 's = step\n    flor.log("e", epoch)\n\n')
