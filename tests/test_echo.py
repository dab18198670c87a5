"""The opt-in echo of logged values (FLORWB_ECHO): one summary line per outer iteration."""

from __future__ import annotations

from pathlib import Path

from conftest import run_py, write

from florwb_engine.store import Store

TRAIN = """
import florwb as flor

for epoch in flor.loop("epoch", range(4)):
    for step in flor.loop("step", range(3)):
        flor.log("loss", 1.0 / (1 + epoch * 3 + step))
    flor.log("acc", epoch / 4)
    flor.log("note", "epoch done")
"""


def _echoed(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("florwb: epoch")]


def test_echo_prints_the_last_values_of_each_epoch_and_logs_as_usual(tmp_path: Path):
    write(tmp_path / "train.py", TRAIN)
    proc = run_py(tmp_path, "train.py", env={"FLORWB_ECHO": "0.000001"})
    lines = _echoed(proc.stderr)
    assert lines == [
        f"florwb: epoch {e + 1}/4 · loss {1.0 / (1 + e * 3 + 2):.4g} · acc {e / 4:.4g}"
        f" · note epoch done"
        for e in range(4)
    ]
    logged = Store(tmp_path).query("SELECT count(*) AS n FROM logs WHERE name = 'loss'")
    assert logged["n"][0] == 12  # the values are recorded as without echo


def test_echo_is_rate_limited_and_always_says_the_last_epoch(tmp_path: Path):
    write(tmp_path / "train.py", TRAIN)
    lines = _echoed(run_py(tmp_path, "train.py", env={"FLORWB_ECHO": "3600"}).stderr)
    assert [line.split(" · ")[0] for line in lines] == ["florwb: epoch 1/4", "florwb: epoch 4/4"]


def test_no_echo_unless_asked(tmp_path: Path):
    write(tmp_path / "train.py", TRAIN)
    proc = run_py(tmp_path, "train.py", env={"FLORWB_ECHO": ""})
    assert _echoed(proc.stderr) == []
    bad = run_py(tmp_path, "train.py", env={"FLORWB_ECHO": "often"})
    assert "FLORWB_ECHO='often' is not a number of seconds; echo is off" in bad.stderr
    assert _echoed(bad.stderr) == []
