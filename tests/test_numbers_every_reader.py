"""Every number logged comes back as logged, through every reader: the dataframe (its JSON
and CSV, and flor.dataframe), user SQL (JSON and CSV) and the workbench's own reads (the
history's last value, the run detail's metrics). Ints of any size, floats to the bit, NaN,
both infinities and -0.0; one name per value, so each reader is asked for each alone.
"""

from __future__ import annotations

import csv
import io
import json
import math
import numbers
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import florwb, recorded_project

from florwb.ui import format as fmt
from florwb_engine.store import Store
from florwb_engine.store.history_values import load_series_values
from florwb_engine.store.queries import load_run_detail

VALUES = [2**53 + 1, 12345678901234567890, -(2**63), 2**64 + 7, 10**40, 3, 0, -7]
VALUES += [0.1 + 0.2, -0.0, float("nan"), float("inf"), float("-inf"), 5e-324]
VALUES += [1.7976931348623157e308, 2.0**60, 1e-310]
NAMES = [f"n{i}" for i in range(len(VALUES))]
SCRIPT = f"""
import florwb as flor
for name, value in zip({NAMES!r}, {VALUES!r}):
    flor.log(name, value)
""".replace("nan", 'float("nan")').replace("inf", 'float("inf")')


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return recorded_project(tmp_path_factory.mktemp("numbers"), SCRIPT)


def _same(got: object, want: int | float) -> bool:
    """Bit for bit: an int's digits (not a float that equals it), a float's bits."""
    if isinstance(want, int):  # a pandas Int64 column gives numpy ints
        return isinstance(got, numbers.Integral) and not isinstance(got, bool) and got == want
    return isinstance(got, float) and struct.pack("<d", got) == struct.pack("<d", want)


def _shown_same(got: object, want: int | float) -> bool:
    """The workbench holds an int a float holds exactly as that float: the same number,
    drawn the same."""
    if _same(got, want):
        return True
    return isinstance(want, int) and got == want and fmt.number(got) == fmt.number(want)


def _number(text: object) -> object:
    """A value a text format carries (CSV, or JSON's strings for what JSON cannot hold)."""
    if not isinstance(text, str):
        return text
    try:
        return int(text)
    except ValueError:
        return float(text)


def _dataframe_json(project: Path) -> dict:
    (row,) = json.loads(florwb(project, "dataframe", *NAMES, "--format", "json").stdout)
    return {name: _number(row[name]) for name in NAMES}


def _dataframe_csv(project: Path) -> dict:
    text = florwb(project, "dataframe", *NAMES, "--format", "csv").stdout
    (row,) = csv.DictReader(io.StringIO(text))
    return {name: _number(row[name]) for name in NAMES}


def _flor_dataframe(project: Path) -> dict:
    frame = Store(project).dataframe(*NAMES)
    return {name: _number(frame[name].iloc[0]) for name in NAMES}


# SQL's typed columns: `value` (a DOUBLE), the exact digits of an int it would round in
# `text`, and `vtype` saying which type was logged.
_SQL = "SELECT name, value, text, vtype FROM logs"


def _sql_value(value: object, text: str | None, vtype: str) -> object:
    if text:
        return int(text)
    number = _number(value)
    return int(number) if vtype == "int" else number  # type: ignore[call-overload]


def _sql_json(project: Path) -> dict:
    rows = json.loads(florwb(project, "query", _SQL, "--format", "json").stdout)
    return {r["name"]: _sql_value(r["value"], r["text"], r["vtype"]) for r in rows}


def _sql_csv(project: Path) -> dict:
    text = florwb(project, "query", _SQL, "--format", "csv").stdout
    rows = csv.DictReader(io.StringIO(text))
    return {r["name"]: _sql_value(r["value"], r["text"], r["vtype"]) for r in rows}


def _workbench_history(project: Path) -> dict:
    store = Store(project)
    return {name: next(iter(load_series_values(store, name).last.values())) for name in NAMES}


def _workbench_detail(project: Path) -> dict:
    store = Store(project)
    (run,) = store.runs()
    return {m.name: m.last for m in load_run_detail(store, run["run_id"]).metrics}


READERS: dict[str, Callable[[Path], dict]] = {
    "dataframe-json": _dataframe_json,
    "dataframe-csv": _dataframe_csv,
    "flor.dataframe": _flor_dataframe,
    "sql-json": _sql_json,
    "sql-csv": _sql_csv,
    "workbench-history": _workbench_history,
    "workbench-run-detail": _workbench_detail,
}


@pytest.mark.parametrize("reader", READERS)
def test_every_number_comes_back_as_logged(project: Path, reader: str) -> None:
    got = READERS[reader](project)
    same = _shown_same if reader.startswith("workbench") else _same
    wrong = {
        name: (got.get(name), want)
        for name, want in zip(NAMES, VALUES, strict=True)
        if not same(_number(got.get(name)), want)
    }
    assert not wrong, wrong
    assert math.isnan(_number(got["n10"]))  # type: ignore[arg-type]


def test_a_logged_nan_and_a_missing_value_read_apart(tmp_path: Path) -> None:
    """pandas holds both as NaN: CSV wrote a logged NaN as an empty cell (missing) and
    JSON a missing value as "NaN" (logged)."""
    script = (
        "import florwb as flor\n"
        'for i in flor.loop("i", range(3)):\n'
        "    if i < 2:\n"
        '        flor.log("b", float("nan") if i == 0 else 1.5)\n'
        '    flor.log("c", i)\n'
    )
    project = recorded_project(tmp_path, script)
    rows = json.loads(florwb(project, "dataframe", "b", "--format", "json").stdout)
    assert [row["b"] for row in rows] == ["NaN", 1.5]
    rows = json.loads(florwb(project, "dataframe", "b", "c", "--format", "json").stdout)
    assert [row["b"] for row in rows] == ["NaN", 1.5, None]
    text = florwb(project, "dataframe", "b", "c", "--format", "csv").stdout
    assert [row["b"] for row in csv.DictReader(io.StringIO(text))] == ["nan", "1.5", ""]
    frame = Store(project).dataframe("b", "c")  # flor.dataframe: pandas' NaN for both
    assert frame["b"].isna().tolist() == [True, False, True]
