"""The wheel as a user installs it: florwb must import next to the user's own `engine`.

Training code often has an engine.py (or an engine/ package) beside the script; a wheel that
installed a top-level `engine` made `import florwb` fail there, or mixed the two silently.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from conftest import write

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built from a copy of the sources, so the checkout gets no build/ or egg-info."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for folder in ("florwb", "engine"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(src),
        ],
        check=True,
        capture_output=True,
    )
    (found,) = out.glob("florwb-*.whl")
    return found


def _packages_in(folder: Path, name: str) -> set[str]:
    return {
        ".".join([name, *p.parent.relative_to(folder).parts])
        for p in folder.rglob("__init__.py")
        if "__pycache__" not in p.parts
    }


def test_wheel_installs_only_its_own_top_level_names(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"florwb", "florwb_engine"}
    packaged = {n.rsplit("/", 1)[0].replace("/", ".") for n in names if n.endswith("__init__.py")}
    expected = _packages_in(ROOT / "florwb", "florwb") | _packages_in(
        ROOT / "engine", "florwb_engine"
    )
    assert packaged == expected  # a new subpackage missing from pyproject's list fails here


def test_training_script_next_to_its_own_engine(wheel: Path, tmp_path: Path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # florwb's dependencies come from the test environment's site-packages as a plain path
    # entry: its .pth files (the editable florwb) are not processed from there.
    deps = [p for p in sys.path if p.endswith("site-packages")]
    (site / "deps.pth").write_text("\n".join(deps) + "\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    project = tmp_path / "project"
    write(project / "engine.py", "WHO = 'user module'\n")
    write(project / "engine" / "__init__.py", "WHO = 'user package'\n")
    write(project / "engine" / "trainer.py", "def step(i):\n    return 1.0 / (i + 1)\n")
    write(
        project / "train.py",
        """
        import florwb as flor
        import engine
        from engine.trainer import step

        assert engine.WHO == "user package", engine.WHO
        for epoch in flor.loop("epoch", range(3)):
            flor.log("loss", step(epoch))
        flor.commit()
        print("trained with", engine.__file__)
        print("florwb from", flor.__file__)
        """,
    )
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    done = subprocess.run(
        [python, "train.py"], cwd=project, capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert f"trained with {project / 'engine' / '__init__.py'}" in done.stdout
    assert f"florwb from {site / 'florwb' / '__init__.py'}" in done.stdout
    listed = subprocess.run(
        [
            env_dir / "bin" / "florwb",
            "query",
            "SELECT name, count(*) AS n FROM logs GROUP BY 1",
            "--format",
            "csv",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert "loss,3" in listed.stdout
