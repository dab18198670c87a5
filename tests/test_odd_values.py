"""One unusual value, name or loop name never hides a run, stops its flusher or crashes training.

Each case is a real training process logging one odd thing between ordinary values; the run
must be finished with every ordinary value, the odd one kept as text with its type (or the
call counted as dropped), florwb saying so once on stderr, and `florwb runs` marking the run.
"""

from __future__ import annotations

import os
import socket

from conftest import florwb, run_py, write

from florwb_engine import journal, processes
from florwb_engine.store import Store

SCRIPT = """
import sys
import torch
import florwb as flor

class NoStr:
    def __str__(self):
        raise RuntimeError("no str for you")

ODD = {{
    "surrogate": lambda: flor.log("s", "\\ud800"),
    "huge_int": lambda: flor.log("b", 10**5000),
    "complex_tensor": lambda: flor.log("c", torch.tensor([1 + 2j])),
    "complex_number": lambda: flor.log("c", 1 + 2j),
    "sparse": lambda: flor.log("t", torch.eye(3).to_sparse()),
    "meta": lambda: flor.log("t", torch.empty(3, device="meta")),
    "meta_scalar": lambda: flor.log("t", torch.empty(1, device="meta")),
    "int_name": lambda: flor.log(5, 1.0),
    "none_name": lambda: flor.log(None, 1.0),
    "tuple_name": lambda: flor.log(("a", 1), 1.0),
    "surrogate_name": lambda: flor.log("n\\udcff", 1.0),
    "name_without_str": lambda: flor.log(NoStr(), 1.0),
    "empty_loop": lambda: [flor.log("x", i) for i in flor.loop("", range(2))],
    "loop_without_str": lambda: [flor.log("x", i) for i in flor.loop(NoStr(), range(2))],
    "arg_surrogate": lambda: flor.arg("a\\ud800", "v\\ud801"),
}}
for case in sys.argv[1:]:  # one run per case
    flor.log("before", 1.0)
    ODD[case]()
    for i in flor.loop("epoch", range(5)):
        flor.log("after", i)
    flor.commit()
print("done", flush=True)
"""

# case -> (log name, text stored, vtype), or None where the call was dropped
CASES = {
    "surrogate": ("s", "str: \\ud800", "object"),
    "huge_int": ("b", "1" + "0" * 5000, "int"),
    "complex_tensor": ("c", "tensor([1.+2.j])", "object"),
    "complex_number": ("c", "complex: (1+2j)", "object"),
    "sparse": ("t", None, "object"),
    "meta": ("t", "tensor(..., device='meta', size=(3,))", "object"),
    "meta_scalar": ("t", "tensor(..., device='meta', size=(1,))", "object"),
    "int_name": ("5", None, "float"),
    "none_name": ("None", None, "float"),
    "tuple_name": ("('a', 1)", None, "float"),
    "surrogate_name": ("n\\udcff", None, "float"),
    "name_without_str": None,
    "empty_loop": ("x", None, "int"),
    "loop_without_str": ("x", None, "int"),
    "arg_surrogate": None,
}
# cases florwb can store as they are (nothing replaced, nothing said)
EXACT = {"huge_int", "empty_loop"}
# cases the writer passes on as they are, and the reader that ingests them replaces and says
SAID_BY_READER = {"surrogate", "arg_surrogate"}


def test_one_odd_thing_never_hides_the_run(tmp_path):
    write(tmp_path / "odd.py", SCRIPT.format())
    cases = sorted(CASES)
    proc = run_py(tmp_path, "odd.py", *cases)
    assert proc.stdout.strip() == "done" and "Traceback" not in proc.stderr
    said = [line for line in proc.stderr.splitlines() if "cannot be stored as they are" in line]
    assert len(said) == len(set(cases) - EXACT - SAID_BY_READER)  # once per run that had one
    first = florwb(tmp_path, "runs")  # the first read ingests: what it replaces, it says once
    assert len(first.stderr.splitlines()) == len(SAID_BY_READER)
    assert all("kept as text" in line for line in first.stderr.splitlines())
    runs = Store(tmp_path).runs()
    assert len(runs) == len(cases) and {r["status"] for r in runs} == {"finished"}
    again = florwb(tmp_path, "runs")
    assert again.stderr == ""
    for case, run in zip(cases, runs):
        logs = Store(tmp_path).query(
            f"SELECT name, value, text, vtype FROM logs WHERE run_id = '{run['run_id']}' "
            "ORDER BY seq"
        )
        assert logs.name.tolist()[0] == "before", case
        after = logs[logs.name == "after"]
        assert after.value.tolist() == [0, 1, 2, 3, 4], case
        odd = logs[~logs.name.isin(["before", "after"])]
        expected = CASES[case]
        if expected is None:
            assert len(odd) == 0, case
        else:
            name, text, vtype = expected
            assert (odd.name.iloc[0], odd.vtype.iloc[0]) == (name, vtype), case
            if text is not None:
                assert odd.text.iloc[0] == text, case
            elif vtype == "object":
                assert odd.text.iloc[0].startswith("tensor(indices="), case
        marks = again.stdout.count(f"! run {run['run_id']}: ")
        if case in EXACT:
            assert run["issues"] == [] and marks == 0, case
        else:
            assert len(run["issues"]) == 1 and marks == 1, case
    args = Store(tmp_path).query("SELECT name, text FROM args").values.tolist()
    assert args == [["a\\ud800", "v\\ud801"]]


def test_values_from_a_journal_written_elsewhere_are_counted_and_said_once(tmp_path):
    """A journal holding what this florwb's writer never produces (complex, bytes, lists,
    odd names): ingestion keeps each as text with its type and says it once."""
    project = tmp_path / "p"
    folder = project / ".florwb" / "journal"
    folder.mkdir(parents=True)
    pid = os.getpid()
    start = {
        "kind": "start",
        "run_id": "crafted",
        "time": 1.0e9,
        "pid": pid,
        "host": socket.gethostname(),
        "pid_ticks": processes.start_ticks(pid),
    }
    logs = ["a", 1 + 2j, 0, "b", b"raw", 0, "c", [1, 2], 0, 7, 1.0, 0, "d", "\udc80", 0]
    logs += ["e", 10**5000, 0, "f", 2.5, 0]
    end = {"kind": "end", "status": "finished", "time": 1.0e9}
    data = b"".join(journal.encode_chunk((journal.pack_logs(logs), None, [start, end]), 0))
    (folder / "crafted.journal").write_bytes(data)
    first = florwb(project, "runs")
    assert first.returncode == 0 and "Traceback" not in first.stderr
    (said,) = first.stderr.splitlines()
    assert said.startswith("florwb: run crafted: 5 value(s) or name(s) kept as text")
    assert "complex value (1)" in said and "log name of type int (1)" in said
    assert florwb(project, "runs").stderr == ""  # once
    rows = Store(project).query("SELECT name, value, text, vtype FROM logs ORDER BY seq")
    assert rows.name.tolist() == ["a", "b", "c", "7", "d", "e", "f"]
    assert [t if isinstance(t, str) else None for t in rows.text[:5]] == [
        "complex: (1+2j)",
        "bytes: b'raw'",
        "list: [1, 2]",
        None,
        "str: \\udc80",
    ]
    assert rows.text[5] == "1" + "0" * 5000 and rows.vtype[5] == "int"
    assert rows.value[6] == 2.5
    (run,) = Store(project).runs()
    assert run["status"] == "finished"
    assert sum(i["n"] for i in run["issues"]) == 5
