"""`--kwargs =3` (no name) is said once as such; before, the run ended with
"--kwargs not used by any flor.arg: " followed by nothing."""

from __future__ import annotations

from conftest import git, run_py, write


def test_a_kwarg_without_a_name_is_said_once(tmp_path):
    write(tmp_path / "train.py", 'import florwb as flor\nprint(flor.arg("n", 1))\n')
    git(tmp_path, "init", "-q")
    proc = run_py(tmp_path, "train.py", "--kwargs", "=3", "n=2")
    assert proc.stdout.strip() == "2"
    assert proc.stderr.strip().splitlines() == ["florwb: --kwargs =3: no name before '='"]
