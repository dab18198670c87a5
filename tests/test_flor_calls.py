"""One recogniser of flor calls: propagation, the instrumenter and replay planning agree on
which calls are flor's, through whatever name the script imports florwb, flordb or flor as."""

from __future__ import annotations

import pytest

from florwb_engine.analysis.loop_state import loop_state
from florwb_engine.analysis.nodes import walk
from florwb_engine.flor_calls import imports_from_nodes, top_level_imports
from florwb_engine.instrument import instrument
from florwb_engine.propagate import find_log_statements, propagate
from florwb_engine.replay.mode import replay_mode

BODY = """
for epoch in {loop}("epoch", range(3)):
    for step in {loop}("step", range(4)):
        loss = step * 0.5
    other.loop("not_flor", [])
    {log}("loss", loss)
"""


@pytest.mark.parametrize(
    "header, loop, log",
    [
        ("import florwb as flor", "flor.loop", "flor.log"),
        ("import florwb as fw", "fw.loop", "fw.log"),
        ("import flordb as flor", "flor.loop", "flor.log"),
        ("import flor", "flor.loop", "flor.log"),  # the 2021 package
        ("from florwb import log as L, loop", "loop", "L"),
    ],
)
def test_every_import_form_is_seen_alike_by_propagation_and_planning(header, loop, log):
    import libcst

    new = header + "\n" + BODY.format(loop=loop, log=log)
    old = new.replace(f'    {log}("loss", loss)\n', "")
    (statement,) = find_log_statements(new)
    assert statement.name == "loss" and statement.loop_path == ("epoch",)

    result = propagate(new, old, ["loss"])
    (placement,) = result.placements
    assert placement.status == "inserted" and placement.loop_path == ("epoch",)
    found = loop_state(result.code, "epoch")
    assert found.found and found.lines == (3, 7)
    # the step loop is its one inner loop (`other.loop(...)` is not a flor loop), with
    # lines after it
    assert [first for first, *_ in found.inner_leaves] == [4] and found.tail
    # the epoch body reads `loss`, which the step loop sets: skipping it would be wrong
    assert replay_mode({"loss": placement}, "epoch", found) == (
        "inner",
        "the epoch body reads loss after the inner loop sets it, so inner loops are re-executed",
    )
    module = libcst.parse_module(new)
    assert imports_from_nodes(walk(module)).bound_names == top_level_imports(module).bound_names


def test_another_librarys_loop_is_not_taken_for_the_main_loop():
    """`tracker.loop("epoch", ...)` of another library is not flor's main loop: a statement
    between it and the real flor loop runs before the main loop (PREFIX), not after it."""
    new = (
        "import florwb as fw\n"
        "for epoch in tracker.loop('epoch', range(2)):\n"
        "    pass\n"
        "fw.log('early', 1)\n"
        "for epoch in fw.loop('epoch', range(2)):\n"
        "    x = epoch\n"
    )
    old = new.replace("fw.log('early', 1)\n", "")
    result = propagate(new, old, ["early"])
    (placement,) = result.placements
    assert placement.loop_path == () and placement.old_line == 4
    found = loop_state(result.code, "epoch")
    assert found.lines == (5, 6)
    assert replay_mode({"early": placement}, "epoch", found) == ("prefix", None)
    late = new.replace("fw.log('early', 1)\n", "") + "fw.log('late', x)\n"
    result = propagate(late, old, ["late"])
    found = loop_state(result.code, "epoch")
    mode, reason = replay_mode({"late": result.placements[0]}, "epoch", found)
    assert mode is None
    assert reason == (  # the whole reason (its second half used to be a dropped statement)
        "late runs after the main loop; only statements before or inside it can be replayed"
    )


def test_statement_before_the_main_loop_is_prefix_and_in_its_body_outer():
    new = (
        "import florwb as flor\n"
        "lr = flor.log('lr', 0.1)\n"
        "for epoch in flor.loop('epoch', range(2)):\n"
        "    for step in flor.loop('step', range(2)):\n"
        "        w = step\n"
        "    flor.log('epoch_seen', epoch)\n"
    )
    old = new.replace("    flor.log('epoch_seen', epoch)\n", "").replace(
        "lr = flor.log('lr', 0.1)", "lr = 0.1"
    )
    result = propagate(new, old)
    placed = {p.name: p for p in result.placements}
    found = loop_state(result.code, "epoch")
    assert replay_mode({"lr": placed["lr"]}, "epoch", found) == ("prefix", None)
    assert replay_mode({"epoch_seen": placed["epoch_seen"]}, "epoch", found) == ("outer", None)


def test_the_mode_names_only_what_a_skipped_inner_loop_leaves_for_the_code_after_it():
    """The step loop sets `loss`, `inputs` and `targets`; the epoch body reads all three
    after it, but binds `inputs` and `targets` again (the test loop) before reading them:
    only `loss` makes the inner loops re-execute. The step loop sits in a plain loop over
    phases, which the replay does not skip."""
    new = (
        "import florwb as flor\n"
        "for epoch in flor.loop('epoch', range(2)):\n"
        "    for phase in ('train', 'val'):\n"
        "        for inputs, targets in flor.loop('step', loader):\n"
        "            loss = f(inputs, targets)\n"
        "        print(phase, loss)\n"
        "    for inputs, targets in testloader:\n"
        "        acc = g(inputs, targets)\n"
        "    flor.log('acc', acc)\n"
    )
    old = new.replace("    flor.log('acc', acc)\n", "")
    result = propagate(new, old, ["acc"])
    (placement,) = result.placements
    assert placement.loop_path == ("epoch",)
    found = loop_state(result.code, "epoch")
    assert replay_mode({"acc": placement}, "epoch", found) == (
        "inner",
        "the epoch body reads loss after the inner loop sets it, so inner loops are re-executed",
    )
    assert replay_mode({"acc": placement}, "epoch", found, frozenset({"loss"})) == (
        "outer",
        None,
    )


def test_instrumenter_uses_the_same_recogniser_for_the_scripts_import():
    script = "import florwb as fw\nfor e in range(2):\n    loss.backward()\n"
    result = instrument(script)
    assert 'fw.loop("' in result.code and "import florwb as flor" not in result.code


def test_no_flor_import_means_no_flor_loops():
    assert not loop_state("for e in flor.loop('e', range(2)):\n    pass\n", "e").found


SAVE_IN_LOOP = """
import torch
{header}
net = None
for epoch in tracker.loop("epoch", range(2)):
    torch.save(net, "a.pt")
for epoch in {loop}("epoch", range(2)):
    torch.save(net.state_dict(), "b.pt")
"""


@pytest.mark.parametrize(
    "header, loop",
    [("import florwb as fw", "fw.loop"), ("from flordb import loop as each", "each")],
)
def test_the_own_save_planner_finds_the_main_loop_through_the_flor_import(header, loop):
    """replay/saved_state maps a torch.save inside the main loop only: the loop is flor's
    (through the script's own import of it), not another library's `.loop("epoch")`."""
    from florwb_engine.replay.saved_state import map_save

    source = SAVE_IN_LOOP.format(header=header, loop=loop)
    other = map_save(source, 6, "epoch")  # inside tracker.loop: not the main loop
    assert other.problem == "it is not in the body of the main loop 'epoch'"
    own = map_save(source, 8, "epoch")
    assert own.problem is None and own.targets == [[[], "net", True]]
    unimported = SAVE_IN_LOOP.format(header="", loop="flor.loop")
    assert map_save(unimported, 8, "epoch").problem == (
        "it is not in the body of the main loop 'epoch'"
    )  # `flor` bound to nothing florwb knows: no flor loop at all
