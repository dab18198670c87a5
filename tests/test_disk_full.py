"""A journal that cannot be written (full disk, file size limit, read-only `.florwb/`).

Real mechanisms, no mocks: a small tmpfs filled up (ENOSPC) where this process may mount
one (root with CAP_SYS_ADMIN), and always RLIMIT_FSIZE set on the training process and
lifted from outside with prlimit (EFBIG, with a short write first: a partial chunk). The
read-only case is a read-only bind mount where mounting works (chmod does not stop root),
else a folder without write permission.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import florwb, write

from florwb_engine.store import Store

TRAIN = """
import sys, time
import florwb as flor
n = int(sys.argv[1])
for i in flor.loop("step", range(n)):
    flor.log("i", i)
    if i % 100 == 0:
        print(i, flush=True)
    time.sleep(0.0005)
print("done", flush=True)
"""


def _can_mount() -> bool:
    if os.geteuid() != 0:
        return False
    probe = Path(f"/tmp/florwb-mount-probe-{uuid.uuid4().hex[:8]}")
    probe.mkdir()
    try:
        ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)])
        if ok.returncode != 0:
            return False
        subprocess.run(["umount", str(probe)], check=True)
        return True
    except OSError:
        return False
    finally:
        probe.rmdir()


MOUNT = _can_mount()
MECHANISMS = ["rlimit", *(["tmpfs"] if MOUNT else [])]


class FullDisk:
    """Makes the project's journal folder unwritable, then gives the space back."""

    def __init__(self, project: Path, mechanism: str) -> None:
        self.mechanism = mechanism
        self.folder = project / ".florwb" / "journal"
        self.folder.mkdir(parents=True)
        self.filler = self.folder / "filler"
        self.mounted = False
        self.pid: int | None = None

    def __enter__(self) -> FullDisk:
        if self.mechanism == "tmpfs":
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(self.folder)], check=True
            )
            self.mounted = True
            fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT)
            try:
                while True:
                    os.write(fd, b"x" * 4096)
            except OSError as exc:
                assert exc.errno == 28  # ENOSPC: the disk is full now
            finally:
                os.close(fd)
        return self

    def preexec(self) -> Callable[[], None] | None:
        if self.mechanism != "rlimit":
            return None
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (200, hard))

    def free(self) -> None:
        if self.mechanism == "tmpfs":
            self.filler.unlink()
        else:
            assert self.pid is not None
            unlimited = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
            resource.prlimit(self.pid, resource.RLIMIT_FSIZE, unlimited)

    def __exit__(self, *exc) -> None:
        if self.mounted:
            subprocess.run(["umount", "-l", str(self.folder)], check=True)


def _train(project: Path, disk: FullDisk, n: int, free_after: int | None, env=None) -> tuple:
    """Run the script with the disk full; free it once `free_after` values were logged."""
    err = project.parent / f"stderr-{uuid.uuid4().hex[:6]}.txt"
    with open(err, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "train.py", str(n)],
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            preexec_fn=disk.preexec(),
            env={**os.environ, "FLORWB_FINAL_RETRY_S": "0.5", **(env or {})},
        )
        disk.pid = proc.pid
        printed = []
        deadline = time.monotonic() + 60
        assert proc.stdout is not None
        for line in proc.stdout:
            printed.append(line.strip())
            if free_after is not None and line.strip() == str(free_after):
                while "cannot write" not in err.read_text():  # the failure was met first
                    assert time.monotonic() < deadline, err.read_text()
                    time.sleep(0.02)
                disk.free()
                free_after = None
        assert proc.wait(timeout=60) == 0
    return printed, err.read_text()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_space_back_before_the_buffer_fills_loses_nothing(tmp_path, mechanism):
    project = tmp_path / "p"
    write(project / "train.py", TRAIN)
    with FullDisk(project, mechanism) as disk:
        printed, err = _train(project, disk, 3000, free_after=1000)
        assert printed[-1] == "done"
        assert "Traceback" not in err
        assert err.count("cannot write the run's journal") == 1  # said once
        assert "journal written again; nothing lost" in err
        (run,) = Store(project).runs()
        assert run["status"] == "finished"
        assert run["issues"] == []  # no partial chunk left behind, nothing lost
        frame = Store(project).dataframe("i")
        assert list(frame.i) == list(range(3000))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_disk_full_for_the_whole_run_ends_quietly(tmp_path, mechanism):
    project = tmp_path / "p"
    write(project / "train.py", TRAIN)
    with FullDisk(project, mechanism) as disk:
        printed, err = _train(project, disk, 500, free_after=None)
    assert printed[-1] == "done"
    assert "Traceback" not in err
    assert "ended without its journal written: 500 values lost" in err
    assert len(err.strip().splitlines()) == 2  # the warning, then what was lost


def test_a_full_buffer_counts_what_was_lost(tmp_path):
    project = tmp_path / "p"
    write(project / "train.py", TRAIN)
    with FullDisk(project, "rlimit") as disk:
        printed, err = _train(project, disk, 3000, 2000, env={"FLORWB_BUFFER_MB": "0.002"})
    assert "Traceback" not in err
    (run,) = Store(project).runs()
    stored = len(Store(project).dataframe("i"))
    lost = sum(i["n"] for i in run["issues"] if i["kind"] == "lost")
    assert run["status"] == "finished"
    assert lost > 0 and stored + lost == 3000  # every value is either stored or counted
    assert "values were lost meanwhile" in err
    out = florwb(project, "runs").stdout
    assert f"finished, {lost} lost !" in out
    assert f"{lost} values lost (journal could not be written" in out


def _read_only(folder: Path):
    """A folder that cannot be written, even by root: a read-only bind mount."""
    if MOUNT:
        subprocess.run(["mount", "--bind", "-o", "ro", str(folder), str(folder)], check=True)
        return lambda: subprocess.run(["umount", str(folder)], check=True)
    folder.chmod(0o555)
    return lambda: folder.chmod(0o755)


def test_a_read_only_store_folder_never_stops_training(tmp_path):
    project = tmp_path / "p"
    write(
        project / "train.py",
        """
        import torch
        import florwb as flor
        net = torch.nn.Linear(2, 2)
        with flor.checkpointing(model=net):
            for e in flor.loop("epoch", range(3)):
                flor.log("loss", float(e))
        flor.log("t", torch.eye(3).to_sparse())
        print("done", flush=True)
        """,
    )
    (project / ".florwb").mkdir()
    undo = _read_only(project / ".florwb")
    try:
        proc = subprocess.run(
            [sys.executable, "train.py"],
            cwd=project,
            capture_output=True,
            text=True,
            env={**os.environ, "FLORWB_FINAL_RETRY_S": "0.5"},
            timeout=120,
        )
    finally:
        undo()
    assert proc.returncode == 0 and proc.stdout.strip() == "done"
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("cannot write the run's journal") == 1
    assert "4 values lost" in proc.stderr
