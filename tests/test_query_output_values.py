"""`florwb query` writes what DuckDB returned: SQL NULL apart from NaN, LIST and BLOB
columns in every format.

Before, results went through pandas, where a NULL in a DOUBLE column and a NaN are the same
NaN: `SELECT NULL::double` wrote "NaN" in JSON (every text row's `value` in `logs` did),
and a real NaN (a diverged loss) wrote as an empty cell in CSV and tables; a LIST column
in JSON died with a ValueError traceback.
"""

from __future__ import annotations

import csv
import io
import json

import pytest
from conftest import florwb, recorded_project

SCRIPT = """
import florwb as flor
for epoch in flor.loop("epoch", range(2)):
    flor.log("loss", float("nan") if epoch else 0.5)
    flor.log("note", "text")
"""
SQL = (
    "SELECT NULL::double AS missing, 'nan'::double AS nan, 'inf'::double AS inf, "
    "[1, NULL] AS list, '\\x00\\xff'::blob AS blob, {'a': 1} AS st, NULL::varchar AS s"
)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return recorded_project(tmp_path_factory.mktemp("qout"), SCRIPT)


def test_json_keeps_null_apart_from_nan(project):
    (row,) = json.loads(florwb(project, "query", SQL, "--format", "json").stdout)
    assert row == {
        "missing": None,
        "nan": "NaN",
        "inf": "Infinity",
        "list": [1, None],
        "blob": "\\x00\\xFF",
        "st": {"a": 1},
        "s": None,
    }
    logged = "SELECT name, value FROM logs ORDER BY name, epoch"
    rows = json.loads(florwb(project, "query", logged, "--format", "json").stdout)
    assert [r["value"] for r in rows] == [0.5, "NaN", None, None]  # text logs: no value


def test_csv_and_table_show_nan(project):
    proc = florwb(project, "query", SQL, "--format", "csv")
    (row,) = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert row["missing"] == "" and row["nan"] == "nan" and row["inf"] == "inf"
    assert json.loads(row["list"]) == [1, None] and row["blob"] == "\\x00\\xFF"
    table = florwb(project, "query", "SELECT 'nan'::double AS loss, NULL::double AS gap")
    assert table.stdout.splitlines()[1].split() == ["nan"]


def test_time_zone_results_still_write(project):
    sql = "SELECT timestamptz '2020-01-01 00:00+00' AS t, [1, 2] AS l"
    (row,) = json.loads(florwb(project, "query", sql, "--format", "json").stdout)
    assert row == {"t": "2020-01-01T00:00:00+00:00", "l": [1, 2]}
