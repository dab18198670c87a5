"""The instrumenter's decisions on small scripts, in process: what it finds, what it
refuses and why, and the bytes it keeps."""

from __future__ import annotations

import textwrap

import pytest

from florwb_engine.instrument import (
    INSTRUMENTED,
    PARTIAL,
    REFUSED,
    UNCHANGED,
    InstrumentError,
    instrument,
    unified_diff,
)


def _code(text: str) -> str:
    return textwrap.dedent(text).lstrip()


STEP = """\
loss = model(x).sum()
opt.zero_grad()
loss.backward()
opt.step()
"""


def _train(body: str = STEP, indent: str = "        ") -> str:
    return textwrap.indent(body, indent)


def test_loop_in_a_function_registers_its_parameters_traced_to_the_call_site() -> None:
    source = _code(
        """
        import torch

        def fit(net, optimizer, sched, data, epochs):
            for epoch in range(epochs):
                for x in data:
                    loss = net(x).sum()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                sched.step()

        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        fit(model, opt, torch.optim.lr_scheduler.StepLR(opt, 1), torch.randn(3, 4, 2), epochs=2)
        """
    )
    result = instrument(source)
    assert result.status == INSTRUMENTED
    assert result.checkpointed == {"model": "net", "optimizer": "optimizer", "scheduler": "sched"}
    assert "    with flor.checkpointing(model=net, optimizer=optimizer, scheduler=sched):\n" in (
        result.code
    )


def test_state_bound_only_under_an_if_is_not_registered_and_is_reported() -> None:
    source = _code(
        """
        import torch

        use_amp = False
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        if use_amp:
            scaler = torch.amp.GradScaler("cpu")
        for epoch in range(2):
            for x in torch.randn(3, 4, 2):
                loss = model(x).sum()
                opt.zero_grad()
                loss.backward()
                opt.step()
                if use_amp:
                    scaler.step(opt)
        """
    )
    result = instrument(source)
    assert result.status == PARTIAL
    assert result.checkpointed == {"model": "model", "optimizer": "opt"}
    (note,) = [n for n in result.notes if not n.done]
    assert note.line == 15 and "`scaler.step()`" in note.text


def test_optimizer_from_an_unknown_factory_is_found_by_how_the_loop_uses_it() -> None:
    source = _code(
        """
        from mylib import build_model, make_optimizer

        model = build_model()
        opt = make_optimizer(model)
        for epoch in range(3):
        """
    ) + _train(STEP.replace("model(x)", "model(epoch)"), "    ")
    result = instrument(source)
    assert result.checkpointed == {"model": "model", "optimizer": "opt"}


def test_no_optimizer_means_loops_and_args_but_no_checkpointing() -> None:
    source = (
        _code(
            """
        import torch

        model = torch.nn.Linear(2, 1)
        for epoch in range(3):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in torch.randn(3, 4, 2):
        """
        )
        + _train()
    )
    result = instrument(source)
    assert result.status == PARTIAL
    assert "checkpointing" not in result.code and 'flor.loop("epoch"' in result.code
    reasons = " ".join(n.text for n in result.notes if not n.done)
    assert "no optimizer bound before the epoch loop" in reasons


@pytest.mark.parametrize(
    "source, reason",
    [
        (
            "import flordb as flor\nfor e in flor.loop('e', range(2)):\n    loss.backward()\n",
            "change it to `import florwb as flor`",
        ),
        (  # the 2021 package: recognised like flordb (florwb_engine.flor_calls)
            "import flor\nfor e in flor.loop('e', range(2)):\n    loss.backward()\n",
            "the script imports flor as `flor`",
        ),
        (
            "flor = 3\nfor e in range(2):\n    loss.backward()\n",
            "the name `flor` is already used at line 1",
        ),
        (
            "class T:\n    def fit(self):\n        for e in range(2):\n"
            "            self.l.backward()\n",
            "in a method of class T",
        ),
        (
            "def train():\n    for e in range(2):\n        loss.backward()\n",
            "in train(), which the script never calls",
        ),
        (
            "for a in range(2):\n    loss.backward()\nfor b in range(2):\n    loss.backward()\n",
            "2 separate training loops (lines 1, 3)",
        ),
        ("loss.backward()\n", "`.backward()` at line 1 is not inside a `for` loop"),
        (
            "import torch\nfor e in range(2):\n    while True:\n        loss.backward()\n"
            "while True:\n    loss.backward()\n",
            "2 separate training loops",
        ),
    ],
)
def test_refusals_name_the_reason_and_change_nothing(source: str, reason: str) -> None:
    result = instrument(source)
    assert result.status == REFUSED
    assert reason in result.reason, result.reason
    assert result.code == source


def test_crlf_tabs_and_comments_survive_byte_for_byte() -> None:
    source = (
        "import torch\r\n"
        "# keep me\r\n"
        "model = torch.nn.Linear(2, 1)  # trailing\r\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\r\n"
        "for epoch in range(2):  # epochs\r\n"
        "\tfor x in torch.randn(3, 4, 2):\r\n"
        "\t\tloss = model(x).sum(\r\n"
        "\t\t\t)  # odd\r\n"
        '\t\tnote = """text\r\n'
        '  inside a string"""\r\n'
        "\t\topt.zero_grad(); loss.backward(); opt.step()\r\n"
    )
    result = instrument(source)
    assert result.status == INSTRUMENTED
    assert result.code == (
        "import torch\r\n"
        "import florwb as flor\r\n"
        "# keep me\r\n"
        "model = torch.nn.Linear(2, 1)  # trailing\r\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\r\n"
        "with flor.checkpointing(model=model, optimizer=opt):\r\n"
        '\tfor epoch in flor.loop("epoch", range(2)):  # epochs\r\n'
        '\t\tfor x in flor.loop("step", torch.randn(3, 4, 2)):\r\n'
        "\t\t\tloss = model(x).sum(\r\n"
        "\t\t\t\t)  # odd\r\n"
        '\t\t\tnote = """text\r\n'
        '  inside a string"""\r\n'
        "\t\t\topt.zero_grad(); loss.backward(); opt.step()\r\n"
        '\t\t\tflor.log("loss", loss)\r\n'
    )


def test_a_long_with_line_is_split_like_a_formatter_would() -> None:
    source = _code(
        """
        import torch

        def main():
            generator_network = torch.nn.Linear(2, 2)
            discriminator_network = torch.nn.Linear(2, 1)
            generator_optimizer = torch.optim.Adam(generator_network.parameters())
            discriminator_optimizer = torch.optim.Adam(discriminator_network.parameters())
            for epoch in range(2):
                for x in range(3):
                    generator_network(x).sum().backward()

        main()
        """
    )
    code = instrument(source).code
    assert (
        "    with flor.checkpointing(\n"
        "        generator_network=generator_network,\n"
        "        discriminator_network=discriminator_network,\n"
        "        generator_optimizer=generator_optimizer,\n"
        "        discriminator_optimizer=discriminator_optimizer,\n"
        "    ):\n"
        '        for epoch in flor.loop("epoch", range(2)):\n'
    ) in code


def test_hyperparameter_rules() -> None:
    source = _code(
        """
        '''Docstring.'''
        from __future__ import annotations
        lr: float = -1e-3
        name = 'run'
        path = b"raw"
        fmt = f"{name}"
        nothing = None
        pair = (1, 2)
        count = 0
        count += 1
        __version__ = "1.0"
        if __name__ == "__main__":
            BATCH = 8
            for epoch in range(2):
                loss.backward()
        """
    )
    result = instrument(source)
    assert result.args == ["lr", "name", "BATCH"]
    assert result.code.startswith(
        "'''Docstring.'''\nfrom __future__ import annotations\nimport florwb as flor\n"
        'lr: float = flor.arg("lr", -1e-3)\nname = flor.arg("name", \'run\')\n'
    )
    assert '    BATCH = flor.arg("BATCH", 8)\n' in result.code  # the main guard runs too
    assert "count = 0\n" in result.code


def test_argparse_variants_parse_known_args_groups_and_positionals() -> None:
    source = _code(
        """
        import argparse
        import torch

        parser = argparse.ArgumentParser()
        parser.add_argument("data")
        group = parser.add_argument_group("optim")
        group.add_argument("--learning-rate", "-l", type=float, default=0.1)
        parser.add_argument(*["--computed"])
        args, rest = parser.parse_known_args()
        for epoch in range(2):
            loss.backward()
        """
    )
    result = instrument(source)
    assert result.status == PARTIAL
    assert (
        "args, rest = parser.parse_known_args()\n"
        'args.data = flor.arg("data", args.data)\n'
        'args.learning_rate = flor.arg("learning_rate", args.learning_rate)\n'
    ) in result.code
    (note,) = [n for n in result.notes if not n.done and "computed" in n.text]
    assert note.line == 8


def test_argparse_subcommands_are_left_alone() -> None:
    source = _code(
        """
        import argparse
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        parser.add_argument("--lr", default=0.1)
        args = parser.parse_args()
        for epoch in range(2):
            loss.backward()
        """
    )
    result = instrument(source)
    assert "flor.arg" not in result.code
    assert any("subcommands" in n.text for n in result.notes if not n.done)


def test_import_goes_to_the_top_when_there_are_no_imports() -> None:
    result = instrument("# header\nfor epoch in range(2):\n    loss.backward()\n")
    assert result.code == (
        "# header\nimport florwb as flor\n"
        'for epoch in flor.loop("epoch", range(2)):\n    loss.backward()\n'
        '    flor.log("loss", loss)\n'
    )


def test_already_instrumented_is_unchanged_and_syntax_errors_raise() -> None:
    done = _code(
        """
        import florwb as fl
        import torch

        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=fl.arg("lr", 0.1))
        with fl.checkpointing(model=model, optimizer=opt):
            for epoch in fl.loop("epoch", range(2)):
                for x in enumerate(fl.loop("step", range(3))):
                    model(x).sum().backward()
        """
    )
    result = instrument(done)
    assert result.status == UNCHANGED and result.code == done
    assert result.outer_loop == "epoch" and result.inner_loops == ["step"]
    with pytest.raises(InstrumentError, match="does not parse: line 1"):
        instrument("for x in\n")


def test_unified_diff_marks_a_missing_final_newline() -> None:
    diff = unified_diff("a = 1\nb = 2", "a = 1\nb = 3", "t.py")
    assert diff.endswith(
        "-b = 2\n\\ No newline at end of file\n+b = 3\n\\ No newline at end of file\n"
    )
