"""A full disk while a script's own torch.save is mirrored: the user's file and training are
untouched, what was not mirrored is counted, and nothing partial stays on the full disk.

Before, a failed copy left `.epoch-000001.save0.pt.tmp` (half the model) behind for good
(its name had no process id, so no reader removed it), and every later save on the full
disk left another. The mirror's files are now written to temp files named after the process,
synced, renamed, and removed again when any step of the mirror fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import florwb, git, write
from test_disk_full import _can_mount

SCRIPT = """
import florwb as flor, torch
model = torch.nn.Linear(300, 300)  # a 360 KB state
for epoch in flor.loop("epoch", range(4)):
    flor.log("x", epoch)
    torch.save(model.state_dict(), "ckpt.pt")
    assert torch.load("ckpt.pt", weights_only=True)["weight"].shape == (300, 300)
print("done")
"""


@pytest.mark.skipif(not _can_mount(), reason="needs root to mount a small tmpfs")
def test_mirrored_saves_on_a_full_disk(tmp_path):
    write(tmp_path / "train.py", SCRIPT)
    write(tmp_path / ".gitignore", "ckpt.pt\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "init")
    folder = tmp_path / ".florwb" / "checkpoints"
    folder.mkdir(parents=True)
    # room for the first iteration's copy and RNG state, not for a second copy
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(folder)], check=True)
    try:
        proc = subprocess.run(
            [sys.executable, "train.py"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={**os.environ, "FLORWB_CKPT_BUDGET": "100"},
            timeout=120,
        )
        assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr
        said = [line for line in proc.stderr.splitlines() if "mirror" in line]
        assert len(said) == 1 and "No space left" in said[0], proc.stderr
        assert "Traceback" not in proc.stderr
        (run_folder,) = folder.iterdir()
        names = sorted(p.name for p in run_folder.iterdir())
        assert not [n for n in names if n.startswith(".")], names  # nothing partial
        referenced = set()
        for manifest in run_folder.glob("*.saves.json"):
            data = json.loads(manifest.read_text())
            referenced |= {s["file"] for s in data["saves"]} | {data["rng"]}
        assert {n for n in names if n.endswith(".pt")} == referenced  # no orphan copy
        (run,) = json.loads(florwb(tmp_path, "runs", "--json").stdout)
        assert run["status"] == "finished" and run["n_logs"] == 4
        assert sum(i["n"] for i in run["issues"] if i["kind"] == "mirror") == 3
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)
