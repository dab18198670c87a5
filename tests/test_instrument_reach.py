"""What `florwb instrument` adds so a hands-free run can be checked by replay: the loss
logged after each backward call when the script logs nothing, models bound in an if/else
registered, and loops named the way the README says."""

from __future__ import annotations

import textwrap

from florwb_engine.instrument import INSTRUMENTED, PARTIAL, UNCHANGED, instrument


def _code(text: str) -> str:
    return textwrap.dedent(text).lstrip()


def _not_done(result) -> list[str]:
    return [n.text for n in result.notes if not n.done]


GAN = _code(
    """
    import torch

    netG, netD = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
    optG = torch.optim.Adam(netG.parameters())
    optD = torch.optim.Adam(netD.parameters())
    scaler = torch.amp.GradScaler("cpu")
    for epoch in range(2):
        for real in torch.randn(3, 4, 2):
            errD_real = netD(real).mean()
            errD_real.backward(retain_graph=True)
            errD_real.backward()
            errD_fake = netD(netG(real)).mean()
            scaler.scale(errD_fake).backward()
            optD.step()
            errG = -netD(netG(real)).mean()
            torch.autograd.backward(errG)
            optG.step()
    """
)


def test_each_backward_logs_its_own_variable_once_right_after_it() -> None:
    result = instrument(GAN)
    assert result.status == INSTRUMENTED, result.report("gan.py")
    lines = result.code.splitlines()

    def after(statement: str) -> str:
        return lines[lines.index(statement) + 1].strip()

    assert after("            errD_real.backward(retain_graph=True)") == (
        'flor.log("errD_real", errD_real)'
    )
    assert after("            errD_real.backward()") == "errD_fake = netD(netG(real)).mean()"
    assert after("            scaler.scale(errD_fake).backward()") == (
        'flor.log("errD_fake", errD_fake)'
    )
    assert after("            torch.autograd.backward(errG)") == 'flor.log("errG", errG)'
    assert result.code.count("flor.log(") == 3
    added = [n.text for n in result.notes if "added after the backward call" in n.text]
    assert len(added) == 3
    assert instrument(result.code).status == UNCHANGED  # it logs now: nothing more to add


def test_a_loss_expression_or_a_one_line_suite_gets_no_log_and_a_reason() -> None:
    source = _code(
        """
        import torch

        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            for x in torch.randn(3, 4, 2):
                a, b = model(x).sum(), model(x).mean()
                (a + b).backward()
                if epoch: b.backward()
                opt.step()
        """
    )
    result = instrument(source)
    assert result.status == PARTIAL
    assert "flor.log(" not in result.code
    notes = _not_done(result)
    assert any("`(a + b)`, an expression, not a variable" in n for n in notes), notes
    assert any("no flor.log of `b` added" in n and "line of its own" in n for n in notes), notes


def test_a_script_that_logs_already_gets_no_loss_log() -> None:
    source = _code(
        """
        import torch
        import florwb as flor

        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            flor.log("epoch_seen", epoch)
            for x in torch.randn(3, 4, 2):
                loss = model(x).sum()
                loss.backward()
                opt.step()
        """
    )
    result = instrument(source)
    assert result.status == INSTRUMENTED
    assert result.code.count(".log(") == 1


def test_a_backward_outside_the_training_loop_is_not_logged() -> None:
    source = _code(
        """
        import torch

        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        warm = model(torch.ones(1, 2)).sum()
        warm.backward()
        for epoch in range(2):
            for x in torch.randn(3, 4, 2):
                loss = model(x).sum()
                loss.backward()
                opt.step()
        """
    )
    result = instrument(source)
    assert 'flor.log("loss", loss)' in result.code
    assert 'flor.log("warm"' not in result.code


# The shape of pytorch/examples word_language_model: `import model`, then the name `model`
# rebound to one of two classes of that module depending on a flag.
WORD_LM = """
import argparse
import torch
import model

parser = argparse.ArgumentParser()
parser.add_argument("--model", default="LSTM")
args = parser.parse_args()
{choice}
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)


def train():
    model.train()
    for batch, i in enumerate(range(0, 20, 5)):
        loss = model(i).sum()
        loss.backward()
        optimizer.step()


for epoch in range(1, 3):
    train()
"""

IF_ELSE = """
if args.model == "Transformer":
    model = model.TransformerModel(10, 8).to("cpu")
else:
    model = model.RNNModel(args.model, 10, 8)
"""

IF_ELIF_RAISE = """
if args.model == "Transformer":
    model = model.TransformerModel(10, 8)
elif args.model in ("LSTM", "GRU"):
    model = model.RNNModel(args.model, 10, 8)
else:
    raise ValueError(args.model)
"""

IF_ONLY = """
if args.model == "Transformer":
    model = model.TransformerModel(10, 8)
"""


def test_a_model_bound_in_every_branch_of_an_if_else_is_registered() -> None:
    for choice in (IF_ELSE, IF_ELIF_RAISE):
        result = instrument(WORD_LM.format(choice=choice))
        assert result.status == INSTRUMENTED, result.report("main.py")
        assert result.checkpointed == {"model": "model", "optimizer": "optimizer"}
        assert "with flor.checkpointing(model=model, optimizer=optimizer):" in result.code


def test_a_model_bound_in_only_one_branch_is_not_registered() -> None:
    result = instrument(WORD_LM.format(choice=IF_ONLY))
    assert result.status == PARTIAL
    assert "flor.checkpointing(" not in result.code
    assert any("no model bound before the epoch loop" in n for n in _not_done(result))


IF_ELIF_EXIT = """
import sys
if args.model == "Transformer":
    model = model.TransformerModel(10, 8)
elif args.model in ("LSTM", "GRU"):
    model = model.RNNModel(args.model, 10, 8)
else:
    sys.exit(f"unknown model {args.model}")
"""

TRY_FALLBACK = """
try:
    model = model.TransformerModel(10, 8)
except ImportError:
    model = model.RNNModel(args.model, 10, 8)
"""

FOR_ONLY = """
for width in (10,):
    model = model.TransformerModel(width, 8)
"""


def test_a_model_bound_wherever_the_script_goes_on_is_registered() -> None:
    """The rules propagation uses (analysis/bindings.py): a branch that ends in
    `sys.exit()` never reaches the loop, and a `try` whose handler binds the model too
    binds it for sure; the instrumenter once counted only `raise` and no `try` at all."""
    for choice in (IF_ELIF_EXIT, TRY_FALLBACK):
        result = instrument(WORD_LM.format(choice=choice))
        assert result.status == INSTRUMENTED, result.report("main.py")
        assert result.checkpointed == {"model": "model", "optimizer": "optimizer"}
        assert "with flor.checkpointing(model=model, optimizer=optimizer):" in result.code


def test_a_model_bound_only_in_a_loop_body_is_not_registered() -> None:
    """Where the instrumenter and propagation choose apart: a loop may run zero times, and
    what the instrumenter writes runs in the user's training, so a name a loop body binds
    does not count after it (propagation, whose placements run in replays, assumes it ran)."""
    result = instrument(WORD_LM.format(choice=FOR_ONLY))
    assert result.status == PARTIAL
    assert "flor.checkpointing(" not in result.code


def test_an_optimizer_hyperparameter_is_never_taken_for_the_model() -> None:
    """`SGD(model.parameters(), lr=args.lr)` with `model` unknown: `args` is not a model."""
    result = instrument(WORD_LM.format(choice=IF_ONLY).replace("lr=0.1", "lr=args.lr"))
    assert "checkpointing(model=args" not in result.code
    assert result.checkpointed == {}


def _single_loop(header: str) -> str:
    return _code(
        f"""
        import torch

        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = [torch.randn(4, 2) for _ in range(3)]
        {header}
            loss = model(torch.randn(4, 2)).sum()
            loss.backward()
            opt.step()
        """
    )


def test_a_single_loop_is_named_after_its_variable_unless_it_is_generic() -> None:
    """The README: a single training loop is named after its variable, `step` when the
    name is under three characters, starts with `_` or is a generic batch/index name."""
    named = {
        "for iteration in range(5):": "iteration",
        "for update, x in enumerate(loader):": "update",
        "for i in range(5):": "step",
        "for _ in range(5):": "step",
        "for batch_idx, x in enumerate(loader):": "step",
        "for batch in loader:": "step",
        "for data in loader:": "step",
        "for x, y in loader:": "step",
    }
    for header, name in named.items():
        result = instrument(_single_loop(header))
        assert result.outer_loop == name, header
        assert f'flor.loop("{name}", ' in result.code
