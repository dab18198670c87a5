"""One typed table of FLORWB_ variables (engine/settings.py): every variable the code reads
is in it, the README's table is generated from it, values are read when asked (a test that
sets one sees it), and a wrong value is said once or refused; the user's keymap file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from florwb.ui import keys
from florwb_engine import settings
from florwb_engine.errors import FlorwbError

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [*ROOT.glob("engine/**/*.py"), *ROOT.glob("florwb/**/*.py")]


def test_every_variable_the_code_names_is_in_the_table_and_read_only_there():
    listed = {var.name for var in settings.VARIABLES}
    named: set[str] = set()
    for path in SOURCES:
        text = path.read_text()
        named |= set(re.findall(r"\bFLORWB_[A-Z_]*[A-Z]\b", text))
        if path.name != "settings.py":
            reads = re.findall(r"environ(?:\.get\(|\[)\s*\"(FLORWB_\w+|FLOR_\w+)\"", text)
            assert not reads, f"{path.relative_to(ROOT)} reads {reads} itself"
    assert named - listed == set()
    assert len(listed) == len(settings.VARIABLES)  # no name twice


def test_the_readme_table_is_the_generated_one():
    readme = (ROOT / "README.md").read_text()
    start = readme.index("<!-- settings table")
    start = readme.index("\n", start) + 1
    end = readme.index("<!-- end of settings table -->")
    assert readme[start:end] == settings.markdown_table()


def test_values_are_read_when_asked(monkeypatch):
    monkeypatch.setenv("FLORWB_LOCK_WAIT_S", "7.5")
    assert settings.read(settings.LOCK_WAIT_S) == 7.5
    monkeypatch.setenv("FLORWB_LOCK_WAIT_S", " ")
    assert settings.read(settings.LOCK_WAIT_S) == settings.LOCK_WAIT_S.default
    monkeypatch.delenv("FLORWB_ECHO", raising=False)
    assert settings.read(settings.ECHO) is None
    assert settings.read(settings.ECHO, {"FLORWB_ECHO": "yes"}) == 1.0
    assert settings.read(settings.ECHO, {"FLORWB_ECHO": "2.5"}) == 2.5
    assert settings.read(settings.MIRROR_SAVES, {"FLORWB_MIRROR_SAVES": "0"}) is False
    assert settings.read(settings.CAPTURE, {"FLORWB_CAPTURE": "Off"}) is False
    assert settings.read(settings.FORKSERVER_IDLE_S, {"FLORWB_FORKSERVER_IDLE_S": "-3"}) == 0.0
    assert settings.read(settings.REPLAY_THREADS, {"FLORWB_REPLAY_THREADS": "0"}) is None


def test_a_wrong_value_is_said_once_and_the_default_used(capsys):
    environ = {"FLORWB_CKPT_BUDGET": "lots"}
    assert settings.read(settings.CKPT_BUDGET, environ) == 0.02
    assert settings.read(settings.CKPT_BUDGET, environ) == 0.02
    err = capsys.readouterr().err
    assert err == "florwb: FLORWB_CKPT_BUDGET='lots' is not a number; using 0.02\n"


def test_a_wrong_value_of_a_strict_variable_is_refused_in_one_line():
    with pytest.raises(settings.SettingError) as caught:
        settings.read(settings.REPLAY_COPY_MAX, {"FLORWB_REPLAY_COPY_MAX": "1G"})
    assert isinstance(caught.value, FlorwbError) and caught.value.exit_code == 1
    assert str(caught.value) == "FLORWB_REPLAY_COPY_MAX must be a number of bytes, not '1G'"


def test_a_keymap_file_rebinds_keys_by_id(tmp_path: Path, monkeypatch):
    config = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    assert keys.keymap_path() == config / "florwb" / "keymap.toml"
    assert keys.load_keymap() == ({}, None)  # no file: no keymap, nothing said
    keys.keymap_path().parent.mkdir(parents=True)
    keys.keymap_path().write_text(
        'history.filter = "f"\n"app.quit" = ["q", "ctrl+q"]\n[chart]\nlog = " L "\n'
    )
    assert keys.load_keymap() == (
        {"history.filter": "f", "app.quit": "q,ctrl+q", "chart.log": "L"},
        None,
    )


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('history.filter = "f\n', "ignored (Illegal character"),
        ('history.flter = "f"\n', "ignored (no key 'history.flter'"),
        ("history.filter = 3\n", "ignored (history.filter: expected a key name"),
        ('history.filter = ""\n', "ignored (history.filter: expected a key name"),
    ],
)
def test_a_bad_keymap_file_is_ignored_whole_with_one_line(tmp_path: Path, text: str, why: str):
    path = tmp_path / "keymap.toml"
    path.write_text('app.quit = "x"\n' + text)
    keymap, warning = keys.load_keymap(path)
    assert keymap == {}
    assert warning is not None and "\n" not in warning
    assert warning.startswith(f"{path}: {why}"), warning
    assert warning.endswith("the default keys are in force")
