"""Faults a recording must survive: kills, concurrency, odd repositories, torn journals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import git, repo_state, run_py, write

from florwb_engine import journal, processes
from florwb_engine.store import Store

TICKER = """
import time
import florwb as flor
for i in flor.loop("tick", range(100000)):
    now = flor.log("t", time.time())
    flor.log("i", i)
    print(i, now, flush=True)  # ground truth: what was logged, and when
    time.sleep(0.005)
"""


def test_sigkill_keeps_everything_logged_200ms_before(repo):
    write(repo / "ticker.py", TICKER)
    proc = subprocess.Popen(
        [sys.executable, "ticker.py"], cwd=repo, stdout=subprocess.PIPE, text=True
    )
    seen = []  # kill once the run has logged a few hundred values, however fast it goes
    while len(seen) < 300 and (line := proc.stdout.readline()):
        seen.append(line)
    killed_at = time.time()
    proc.send_signal(signal.SIGKILL)
    printed = [line.split() for line in ("".join(seen) + proc.communicate()[0]).splitlines()]
    logged_before = [int(i) for i, t in printed if float(t) < killed_at - 0.2]
    store = Store(repo)
    (run,) = store.runs()
    assert run["status"] == "killed"
    frame = store.dataframe("i", "t")
    assert list(frame.i) == list(range(len(frame)))  # no gaps, no duplicates
    assert len(logged_before) > 50
    assert set(logged_before) <= set(frame.i)
    Store(repo).ingest()  # ingesting again adds nothing
    assert len(Store(repo).dataframe("i")) == len(frame)
    assert store.query("SELECT count(*) AS n FROM logs").n[0] == 2 * len(frame)


def test_four_concurrent_runs_and_a_reader(repo):
    write(
        repo / "worker.py",
        """
        import sys
        import time
        import florwb as flor
        k = flor.arg("k", 0)
        for epoch in flor.loop("epoch", range(20)):
            for step in flor.loop("step", range(50)):
                flor.log("v", k * 1000 + epoch * 50 + step)
            time.sleep(0.02)
        """,
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "worker.py", "--kwargs", f"k={k}"],
            cwd=repo,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in range(4)
    ]
    reader_errors: list[str] = []
    done = threading.Event()

    def read_repeatedly():
        while not done.is_set():
            try:
                Store(repo).query("SELECT count(*) FROM logs")
            except Exception as exc:  # the test fails below if the reader ever errs
                reader_errors.append(repr(exc))

    # readers never create a project: they start once the first run has made `.florwb/`
    deadline = time.monotonic() + 60
    while not (repo / ".florwb").is_dir() and time.monotonic() < deadline:
        time.sleep(0.01)
    reader = threading.Thread(target=read_repeatedly)
    reader.start()
    results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
    done.set()
    reader.join()
    assert [code for code, _ in results] == [0, 0, 0, 0]
    assert all("lock" not in err.lower() for _, err in results), results
    assert reader_errors == []
    frame = Store(repo).dataframe("v", "k")
    assert len(frame) == 4 * 20 * 50
    assert sorted(frame.v) == sorted(k * 1000 + i for k in range(4) for i in range(1000))
    assert {r["status"] for r in Store(repo).runs()} == {"finished"}


SMALL = """
import florwb as flor
for epoch in flor.loop("epoch", range(2)):
    flor.log("x", epoch)
"""


def test_detached_head_no_commits_dirty_tree_and_big_untracked_file(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    write(empty / "train.py", SMALL)
    before = repo_state(empty)
    run_py(empty, "train.py")
    assert repo_state(empty) == before
    (run,) = Store(empty).runs()
    assert run["version"] and run["git_head"] is None and run["status"] == "finished"

    repo = tmp_path / "detached"
    repo.mkdir()
    git(repo, "init", "-q")
    write(repo / "train.py", SMALL)
    git(repo, "add", "train.py")
    git(repo, "commit", "-q", "-m", "one")
    write(repo / "train.py", SMALL + "\n# two\n")
    git(repo, "commit", "-q", "-am", "two")
    git(repo, "checkout", "-q", "--detach", "HEAD~1")
    write(repo / "notes.txt", "dirty\n")
    with open(repo / "big.bin", "wb") as f:
        f.truncate(500 * 2**20)  # sparse: 500 MB on paper, instant to create
    before = repo_state(repo)
    first = run_py(repo, "train.py")
    second = run_py(repo, "train.py")
    assert repo_state(repo) == before
    assert "big.bin" in first.stderr and "not in the code snapshot" in first.stderr
    assert "big.bin" not in second.stderr  # said once
    runs = Store(repo).runs()
    assert runs[0]["git_branch"] is None and runs[0]["git_dirty"] is True
    assert runs[0]["version"] == runs[1]["version"]
    from florwb_engine.versions import list_files

    files = list_files(repo / ".florwb", runs[0]["version"])
    assert "train.py" in files and "notes.txt" in files and "big.bin" not in files


def test_outside_a_git_repository(tmp_path):
    folder = tmp_path / "plain"
    write(folder / "train.py", SMALL)
    run_py(folder, "train.py")
    assert not (folder / ".git").exists()
    (run,) = Store(folder).runs()
    assert run["status"] == "finished" and run["version"] and run["git_head"] is None
    assert list(Store(folder).dataframe("x").x) == [0, 1]


def test_torn_journal_tail_is_left_for_later_and_never_duplicated(tmp_path):
    """A live writer's half-written chunk is skipped until it is complete, then read once."""
    folder = tmp_path / "p"
    (folder / ".florwb" / "journal").mkdir(parents=True)
    path = folder / ".florwb" / "journal" / "r1.journal"
    start = {
        "kind": "start",
        "run_id": "r1",
        "time": time.time(),
        "pid": os.getpid(),
        "host": __import__("socket").gethostname(),
        "pid_ticks": processes.start_ticks(os.getpid()),
    }
    head = b"".join(journal.encode_chunk((journal.pack_logs(["x", 1.0, 0]), None, [start])))
    tail = b"".join(journal.encode_chunk((journal.pack_logs(["late", 2.0, 0]), None, []), 1))
    path.write_bytes(head + tail[: len(tail) // 2])
    store = Store(folder)
    assert store.names() == ["x"]
    assert store.runs()[0]["status"] == "running"
    path.write_bytes(head + tail)
    assert store.names() == ["late", "x"]
    store.ingest()
    assert store.query("SELECT count(*) AS n FROM logs").n[0] == 2


def test_journal_chunks_are_read_back_exactly(tmp_path):
    path = tmp_path / "j.journal"
    writer = journal.JournalWriter(path)
    logs = ["a", 1.5, 0, "b", 2, 5, "c", "s", 7, "d", None, 0]
    writer.append((journal.pack_logs(logs), journal.pack_timings([5, 0.1, 0.2]), [{"k": 1}]))
    first_end = path.stat().st_size
    writer.append((None, None, [{"k": 2}]))
    writer.close()
    batch = journal.read_from(path, 0)
    assert batch.end_offset == path.stat().st_size
    assert [e["k"] for e in batch.events] == [1, 2]
    names, values, ctxs = journal.unpack_logs(batch.logs[0])
    assert names == ["a", "b", "c", "d"] and values == [1.5, 2, "s", None]
    assert ctxs == [0, 5, 7, 0]
    assert journal.read_from(path, first_end).events == [{"k": 2}]
    with open(path, "ab") as f:
        f.write(b"\x10\x00\x00\x00garbage")
    assert journal.read_from(path, 0).end_offset == batch.end_offset


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork-only behaviour")
def test_forked_children_do_not_write_into_the_run(tmp_path):
    folder = tmp_path / "f"
    write(
        folder / "train.py",
        """
        import os
        import florwb as flor
        flor.log("parent", 1)
        pid = os.fork()
        if pid == 0:
            flor.log("child", 2)
            os._exit(0)
        os.waitpid(pid, 0)
        flor.log("parent", 3)
        """,
    )
    run_py(folder, "train.py")
    store = Store(folder)
    assert store.names() == ["parent"]
    assert len(store.runs()) == 1


def test_store_path_is_project_root_from_subfolder(repo):
    write(repo / "src" / "train.py", SMALL)
    run_py(repo / "src", "train.py")
    assert (repo / ".florwb").is_dir() and not (repo / "src" / ".florwb").exists()
    assert Path(Store(repo).runs()[0]["script"]) == Path("src/train.py")


def test_spawned_workers_do_not_start_runs(tmp_path):
    folder = tmp_path / "s"
    write(
        folder / "train.py",
        """
        import multiprocessing as mp
        import florwb as flor

        width = flor.arg("width", 2)  # module level: a spawned child runs this line too


        def square(x):
            return x * x * width


        if __name__ == "__main__":
            with mp.get_context("spawn").Pool(2) as pool:
                flor.log("total", sum(pool.map(square, range(4))))
        """,
    )
    run_py(folder, "train.py", "--kwargs", "width=3")
    store = Store(folder)
    assert len(store.runs()) == 1
    assert list(store.dataframe("total").total) == [42]
