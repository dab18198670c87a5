"""Expected failures are one FlorwbError (a one-line message, a title, an exit status), and
the CLI has one place that turns them into `florwb: <message>` and its exit status; an
unexpected failure's traceback is kept in a bounded log under `.florwb/logs/`."""

from __future__ import annotations

from pathlib import Path

import pytest

from florwb.cli import main
from florwb_engine import errors
from florwb_engine.errors import FlorwbError
from florwb_engine.instrument import InstrumentError
from florwb_engine.record.pull import CheckpointError
from florwb_engine.replay import PlanError
from florwb_engine.replay.contain import ContainmentError
from florwb_engine.store import StoreBusy, StoreError


def test_expected_failures_share_one_base_with_a_title_and_an_exit_status():
    for cls in (PlanError, ContainmentError, StoreError, StoreBusy, InstrumentError):
        assert issubclass(cls, FlorwbError), cls
    assert issubclass(CheckpointError, LookupError)  # callers that caught it still do
    assert PlanError("no runs match").title == "Cannot plan the replay"
    usage = FlorwbError("--x goes with --y\nmore", title="Misused", exit_code=2)
    assert (usage.title, usage.exit_code, usage.one_line()) == ("Misused", 2, "--x goes with --y")
    assert FlorwbError("plain").title == ""  # the workbench names what it was doing


def _cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.err


@pytest.mark.parametrize(
    ("argv", "code", "line"),
    [
        (("replay", "loss", "--workers", "0"), 1, "florwb: --workers must be at least 1"),
        (("io", "abc", "--dry-run"), 2, "florwb: --dry-run goes with --extract"),
        (("checkpoints", "20260101-000000-aaaaaa"), 1, "florwb: run 20260101-000000-aaaaaa has"),
        (("checkpoints", "nosuchrun"), 1, "florwb: "),
        (("propagate", "new.py", "old.py"), 1, "florwb: cannot read new.py: No such file"),
        (("instrument", "broken.py"), 1, "florwb: broken.py: "),
        (("runs",), 1, "florwb: no florwb project in "),
    ],
)
def test_cli_failures_are_one_line_with_their_exit_status(
    tmp_path: Path, monkeypatch, capsys, argv, code, line
):
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)  # found as the project; no .florwb/ unless made
    if argv[0] == "checkpoints":
        (project / ".florwb" / "checkpoints" / "20260101-000000-aaaaaa").mkdir(parents=True)
    (project / "broken.py").write_text("def f(:\n")
    monkeypatch.chdir(project)
    monkeypatch.delenv("FLORWB_PROJECT", raising=False)
    got, err = _cli(capsys, *argv)
    assert (got, err.count("\n")) == (code, 1), err
    assert err.startswith(line), err


def test_the_error_log_keeps_tracebacks_and_stays_bounded(tmp_path: Path, monkeypatch):
    store = tmp_path / ".florwb"
    with pytest.raises(FileNotFoundError):  # readers create no .florwb/ folder
        errors.log_exception(store, "loading", RuntimeError("x"))
    store.mkdir()

    def deep() -> None:
        raise KeyError("the cause")

    try:
        try:
            deep()
        except KeyError as inner:
            raise RuntimeError("it broke") from inner
    except RuntimeError as exc:
        path = errors.log_exception(store, "loading the history", exc)
    assert path == tmp_path / ".florwb" / "logs" / "errors.log"
    text = path.read_text()
    assert ": loading the history\n" in text
    assert "Traceback (most recent call last)" in text and "in deep" in text
    assert "KeyError: 'the cause'" in text and "RuntimeError: it broke" in text

    monkeypatch.setattr(errors, "LOG_MAX_BYTES", len(text) - 1)
    errors.log_exception(store, "the second", RuntimeError("again"))
    older = path.with_name("errors.log.1")
    assert older.read_text() == text
    assert "the second" in path.read_text() and "loading the history" not in path.read_text()
