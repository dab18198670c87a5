"""Notebook runs: a real Jupyter kernel (ipykernel started by jupyter_client) records a run
per flor.commit() and one ended by the kernel's shutdown, stores the executed cells as the
run's code, reads flor.dataframe inside the notebook, and the replay plan says in one line
that notebook runs are not replayed."""

from __future__ import annotations

from conftest import repo_state
from jupyter_client.manager import start_new_kernel

from florwb_engine import versions
from florwb_engine.project import store_dir
from florwb_engine.replay import plan_replay
from florwb_engine.store import Store
from florwb_engine.store.console import read_io

CELLS = [
    "import florwb as flor\nimport torch\ntorch.manual_seed(0)\nnet = torch.nn.Linear(2, 1)",
    (
        'for epoch in flor.loop("epoch", range(3)):\n'
        '    flor.log("loss", epoch / 2)\n    print("seen", epoch)'
    ),
    'df = flor.dataframe("loss")\nprint("rows", len(df), sorted(df["loss"].tolist()))',
    "flor.commit()",
    'for epoch in flor.loop("epoch", range(2)):\n    flor.log("acc", epoch)',
]


def _execute(client, code: str) -> str:
    out: list[str] = []

    def hook(msg: dict) -> None:
        kind = msg["msg_type"]
        if kind == "stream":
            out.append(msg["content"]["text"])
        elif kind == "error":
            out.append("ERROR " + msg["content"]["ename"] + ": " + msg["content"]["evalue"])

    reply = client.execute_interactive(code, timeout=120, output_hook=hook)
    assert reply["content"]["status"] == "ok", "".join(out)
    return "".join(out)


def test_a_kernel_session_records_runs_with_its_cells_as_code(repo):
    before = repo_state(repo)
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(repo))
    try:
        outputs = [_execute(client, cell) for cell in CELLS]
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=False)  # a clean shutdown ends the second run
    assert "rows 3 [0.0, 0.5, 1.0]" in outputs[2], outputs  # flor.dataframe in the notebook

    runs = sorted(Store(repo).runs(), key=lambda r: r["start_time"])
    assert [r["script"] for r in runs] == ["notebook.ipynb", "notebook.ipynb"]
    assert [r["status"] for r in runs] == ["finished", "finished"]
    first, second = runs
    code = versions.read_file(store_dir(repo), first["version"], "notebook.ipynb.py")
    assert code is not None
    text = code.decode()
    positions = [text.index(cell) for cell in CELLS[:4]]  # every cell so far, in order
    assert positions == sorted(positions)
    assert CELLS[4] not in text  # run afterwards: part of the second run's code
    later = versions.read_file(store_dir(repo), second["version"], "notebook.ipynb.py")
    assert later is not None and CELLS[4] in later.decode()
    assert versions.read_file(store_dir(repo), first["version"], "README.md") == b"# project\n"
    assert repo_state(repo) == before  # the user's repository is never written

    # the cells' printed lines are kept; the kernel's own messaging log (IPKernelApp's debug
    # records with message headers and session ids) is the host's, not the run's
    lines = read_io(Store(repo), first["run_id"])
    assert [t.strip() for t in lines["text"]] == [
        "seen 0",
        "seen 1",
        "seen 2",
        "rows 3 [0.0, 0.5, 1.0]",
    ]

    plan = plan_replay(repo, ["loss", "acc"])
    assert [r.status for r in plan.runs] == ["skip", "skip"]
    assert {r.reason for r in plan.runs} == {
        "recorded in a notebook: replaying notebook runs is not supported"
    }


def test_the_statement_matrix_shows_scripts_not_notebooks():
    from florwb_engine.statements import choose_script_and_versions

    runs = [("train.py", "v1"), ("notebook.ipynb", "v2")]  # the newest run is a notebook's
    assert choose_script_and_versions(runs, ["v1", "v2"]) == ("train.py", ["v1"], {"v1": 1})
    assert choose_script_and_versions([("notebook.ipynb", "v2")], ["v2"]) is None
