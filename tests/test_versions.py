"""florwb_engine.versions against real git repositories: snapshots never modify the user's repo."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from florwb_engine.versions import (
    Snapshot,
    VersionError,
    ensure_excluded,
    find_git_toplevel,
    list_files,
    materialize,
    read_file,
    snapshot,
)

ROOT = Path(__file__).resolve().parents[1]


def _env(read_only: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="T",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="T",
        GIT_COMMITTER_EMAIL="t@example.com",
    )
    if read_only:
        env["GIT_OPTIONAL_LOCKS"] = "0"  # so our own `git status` cannot refresh the index
    return env


def git(repo: Path, *args: str, read_only: bool = False) -> str:
    proc = subprocess.run(
        ["git", *args], cwd=repo, env=_env(read_only), capture_output=True, check=True
    )
    return proc.stdout.decode()


def make_repo(path: Path, files: dict[str, str | bytes], commit: bool = True) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    write(path, files)
    if commit:
        git(path, "add", "-A")
        git(path, "commit", "-q", "-m", "first")
    return path


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            content = content.encode()
        target.write_bytes(content)


def dot_git_files(repo: Path) -> dict[str, str]:
    """sha256 of every file under .git/ (so any write there, even a stray lock, shows)."""
    out = {}
    for dirpath, _dirs, names in os.walk(repo / ".git"):
        for name in names:
            p = Path(dirpath, name)
            out[p.relative_to(repo).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def repo_state(repo: Path) -> dict[str, object]:
    files = dot_git_files(repo)  # before running any git command ourselves
    return {
        "files": files,
        "index": hashlib.sha256((repo / ".git" / "index").read_bytes()).hexdigest(),
        "status": git(repo, "status", "--porcelain", "--untracked-files=all", read_only=True),
        "head": git(repo, "rev-parse", "HEAD", read_only=True),
        "branch": git(repo, "branch", read_only=True),
        "log": git(repo, "log", "--all", "--oneline", read_only=True),
        "refs": git(repo, "for-each-ref", read_only=True),
        "stash": git(repo, "stash", "list", read_only=True),
    }


@pytest.fixture
def dirty_repo(tmp_path: Path) -> Path:
    repo = make_repo(tmp_path / "proj", {"train.py": "print(1)\n", "lib/util.py": "X = 1\n"})
    write(repo, {"train.py": "print(2)\n"})
    git(repo, "commit", "-qam", "second")
    write(repo, {"train.py": "print(3)\n", "new.py": "y = 2\n", "staged.py": "z = 3\n"})
    git(repo, "add", "staged.py")
    git(repo, "status", "--porcelain")  # a fresh stat cache in the user's index...
    os.utime(repo / "lib" / "util.py", (1_000_000_000, 1_000_000_000))  # ...made stale again:
    return repo  # any index refresh (e.g. a plain `git status`) would now rewrite .git/index


def test_snapshot_and_ensure_excluded_leave_user_repo_untouched(dirty_repo: Path) -> None:
    repo, store = dirty_repo, dirty_repo / ".florwb"
    before = repo_state(repo)
    exclude = repo / ".git" / "info" / "exclude"
    exclude_before = exclude.read_bytes()

    ensure_excluded(repo)
    ensure_excluded(repo)  # the line must not be duplicated
    after_exclude = repo_state(repo)
    assert exclude.read_bytes() == exclude_before + b"/.florwb/\n"
    changed = {k for k in before["files"] if before["files"][k] != after_exclude["files"].get(k)}
    assert changed == {".git/info/exclude"}
    assert set(after_exclude["files"]) == set(before["files"])
    assert {k: v for k, v in after_exclude.items() if k != "files"} == {
        k: v for k, v in before.items() if k != "files"
    }

    snaps = [snapshot(repo, store) for _ in range(2)]  # second run uses the stat cache
    assert repo_state(repo) == after_exclude
    assert snaps[0] == snaps[1]
    snap = snaps[0]
    assert snap.in_git and snap.git_dirty is True and snap.git_branch == "main"
    assert snap.git_head == git(repo, "rev-parse", "HEAD").strip()
    assert list_files(store, snap.version) == ["lib/util.py", "new.py", "staged.py", "train.py"]
    assert read_file(store, snap.version, "train.py") == b"print(3)\n"
    assert "?? .florwb/" not in after_exclude["status"]


def test_snapshot_without_exclude_writes_nothing_under_dot_git(dirty_repo: Path) -> None:
    before = repo_state(dirty_repo)
    snapshot(dirty_repo, dirty_repo / ".florwb")
    after = repo_state(dirty_repo)
    assert after["files"] == before["files"]
    assert after["index"] == before["index"]
    # the only visible effect is the new, untracked store folder
    new_status = set(after["status"].splitlines()) - set(before["status"].splitlines())
    assert new_status and all(line.startswith("?? .florwb/") for line in new_status)
    for key in ("head", "branch", "log", "refs", "stash"):
        assert after[key] == before[key]


def test_clean_repo_version_is_head_tree_and_edits_round_trip(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "p", {"a.py": "a = 1\n", "b/c.py": "c = 2\n"})
    store = repo / ".florwb"
    first = snapshot(repo, store)
    assert first.version == git(repo, "rev-parse", "HEAD^{tree}").strip()
    assert first.git_dirty is False and first.n_files == 2 and first.n_bytes == 12

    write(repo, {"a.py": "a = 10\n"})
    edited = snapshot(repo, store)
    assert edited.version != first.version and edited.git_dirty is True

    write(repo, {"a.py": "a = 1\n"})
    reverted = snapshot(repo, store)
    assert reverted.version == first.version and reverted.git_dirty is False

    # identical trees in an unrelated project and store give the same id
    other = make_repo(tmp_path / "q", {"a.py": "a = 1\n", "b/c.py": "c = 2\n"})
    assert snapshot(other, tmp_path / "elsewhere").version == first.version


def test_touched_but_unchanged_file_is_not_dirty(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "p", {"a.py": "a = 1\n"})
    os.utime(repo / "a.py", (1_000_000_000, 1_000_000_000))  # user's index stat is now stale
    assert snapshot(repo, repo / ".florwb").git_dirty is False


def test_deleted_and_moved_files(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "p", {"a.py": "1\n", "d": "file\n"})
    store = repo / ".florwb"
    snapshot(repo, store)
    (repo / "a.py").unlink()
    (repo / "d").unlink()
    write(repo, {"d/inner.py": "2\n"})  # a file replaced by a folder of the same name
    snap = snapshot(repo, store)
    assert list_files(store, snap.version) == ["d/inner.py"]
    assert snap.skipped == () and snap.git_dirty is True


def test_detached_head(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "p", {"a.py": "1\n"})
    write(repo, {"a.py": "2\n"})
    git(repo, "commit", "-qam", "two")
    git(repo, "checkout", "-q", "--detach", "HEAD~1")
    snap = snapshot(repo, repo / ".florwb")
    assert snap.git_branch is None
    assert snap.git_head == git(repo, "rev-parse", "HEAD").strip()
    assert snap.git_dirty is False
    assert read_file(repo / ".florwb", snap.version, "a.py") == b"1\n"


def test_repository_without_commits(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "p", {"a.py": "1\n", "b.py": "2\n"}, commit=False)
    git(repo, "add", "a.py")
    before = dot_git_files(repo)
    snap = snapshot(repo, repo / ".florwb")
    assert dot_git_files(repo) == before
    assert snap.in_git and snap.git_head is None and snap.git_branch == "main"
    assert snap.git_dirty is True and snap.n_files == 2


def test_plain_folder_outside_git(tmp_path: Path) -> None:
    proj = tmp_path / "plain"
    write(
        proj,
        {
            "train.py": "x\n",
            ".env.example": "K=V\n",
            "pkg/mod.py": "y\n",
            "pkg/__pycache__/mod.cpython-311.pyc": "cached\n",
            ".venv/pyvenv.cfg": "home=/usr\n",
            ".venv/lib/site.py": "v\n",
            "env/pyvenv.cfg": "home=/usr\n",
            "env/lib/site.py": "v\n",
            "node_modules/x/index.js": "js\n",
            ".ipynb_checkpoints/n.ipynb": "{}\n",
            ".hidden/secret.py": "s\n",
            ".florwb/journal.jsonl": "{}\n",
            "weights.bin": b"\x00\x01\x02",
        },
    )
    assert find_git_toplevel(proj) is None
    snap = snapshot(proj, proj / ".florwb")
    assert snap.in_git is False and snap.git_dirty is None
    assert snap.git_head is None and snap.git_branch is None
    assert list_files(proj / ".florwb", snap.version) == [".env.example", "pkg/mod.py", "train.py"]
    assert [(s.path, s.reason) for s in snap.skipped] == [("weights.bin", "binary file")]


def test_large_binary_and_ignored_files_are_skipped_and_reported(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "p",
        {".gitignore": "*.log\n", "train.py": "t\n", "tracked.bin": b"\x00tracked binary"},
    )
    with open(repo / "big.pt", "wb") as fh:
        fh.truncate(500 * 2**20)  # sparse: instant to create, never read by the snapshot
    write(repo, {"small.bin": b"abc\x00def", "run.log": "ignored\n", "notes.md": "keep\n"})
    make_repo(repo / "vendor", {"dep.py": "d\n"})  # an untracked nested repository
    snap = snapshot(repo, repo / ".florwb")
    files = list_files(repo / ".florwb", snap.version)
    assert files == [".gitignore", "notes.md", "tracked.bin", "train.py"]
    assert {(s.path, s.size, s.reason) for s in snap.skipped} == {
        ("big.pt", 500 * 2**20, "larger than 2 MiB"),
        ("small.bin", 7, "binary untracked file"),
        ("vendor", 0, "nested git repository"),
    }
    assert snap.n_bytes == sum((repo / f).stat().st_size for f in files)


def test_size_cap_from_argument_and_environment(tmp_path: Path, monkeypatch) -> None:
    repo = make_repo(tmp_path / "p", {"small.py": "s\n", "medium.py": "m" * 5000})
    monkeypatch.setenv("FLORWB_SNAPSHOT_MAX_BYTES", "1024")
    snap = snapshot(repo, repo / ".florwb")
    assert [(s.path, s.reason) for s in snap.skipped] == [("medium.py", "larger than 1 KiB")]
    assert snap.git_dirty is False  # a skipped tracked file does not count as an edit
    assert snapshot(repo, repo / ".florwb", max_file_bytes=10_000).n_files == 2
    monkeypatch.setenv("FLORWB_SNAPSHOT_MAX_BYTES", "lots")
    with pytest.raises(VersionError, match="FLORWB_SNAPSHOT_MAX_BYTES"):
        snapshot(repo, repo / ".florwb")


def test_file_limit_is_reported(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "p", {f"m{i}.py": f"{i}\n" for i in range(5)})
    snap = snapshot(repo, repo / ".florwb", max_files=3)
    assert snap.n_files == 3
    assert [(s.path, s.reason) for s in snap.skipped] == [
        ("m3.py", "file limit (3 files)"),
        ("m4.py", "file limit (3 files)"),
    ]


def test_materialize_read_and_list_agree(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "p",
        {"train.py": "print('v1')\n", "cfg/a.yaml": "lr: 1\n", "run.sh": "#!/bin/sh\n"},
    )
    (repo / "run.sh").chmod(0o755)
    os.symlink("cfg/a.yaml", repo / "link.yaml")
    write(repo, {"untracked.py": "u = 1\n"})
    store = repo / ".florwb"
    snap = snapshot(repo, store)
    expected = {
        name: (repo / name).read_bytes()
        for name in ["cfg/a.yaml", "run.sh", "train.py", "untracked.py"]
    }
    write(repo, {"train.py": "print('v2')\n"})  # later edits must not leak into the old version

    dest = tmp_path / "scratch" / "v1"
    materialize(store, snap.version, dest)
    found = {
        Path(d, n).relative_to(dest).as_posix() for d, _s, names in os.walk(dest) for n in names
    }
    assert found == set(expected) | {"link.yaml"}
    assert sorted(found) == list_files(store, snap.version)
    for name, content in expected.items():
        assert (dest / name).read_bytes() == content == read_file(store, snap.version, name)
    assert os.readlink(dest / "link.yaml") == "cfg/a.yaml"
    assert os.access(dest / "run.sh", os.X_OK) and not os.access(dest / "train.py", os.X_OK)
    assert read_file(store, snap.version, "./cfg/a.yaml") == b"lr: 1\n"
    assert read_file(store, snap.version, "missing.py") is None
    assert read_file(store, snap.version, "cfg") is None
    assert (repo / "train.py").read_bytes() == b"print('v2')\n"


def test_unknown_versions_and_unsafe_destination(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "p", {"a.py": "1\n"})
    store = repo / ".florwb"
    with pytest.raises(VersionError, match="unknown version"):
        list_files(store, "0" * 40)  # nothing stored yet
    snap = snapshot(repo, store)
    for bad in ["0" * 40, "deadbeef"]:
        with pytest.raises(VersionError, match="unknown version"):
            materialize(store, bad, tmp_path / "out")
        with pytest.raises(VersionError, match="unknown version"):
            read_file(store, bad, "a.py")
    with pytest.raises(VersionError, match="not a version id"):
        list_files(store, "--all")
    write(repo, {"a.py": "edited\n"})
    with pytest.raises(VersionError, match="refusing"):
        materialize(store, snap.version, repo)  # would check out over the working tree
    assert (repo / "a.py").read_text() == "edited\n"
    assert list_files(store, snap.version[:12]) == ["a.py"]  # abbreviations resolve


def test_attributes_do_not_change_stored_bytes(tmp_path: Path) -> None:
    raw = b"line one\r\nline two\r\n"
    repo = make_repo(tmp_path / "p", {".gitattributes": "* text eol=lf export-subst\n"})
    write(repo, {"crlf.txt": raw, "subst.py": "# $Format:%H$\n"})
    snap = snapshot(repo, repo / ".florwb")
    assert read_file(repo / ".florwb", snap.version, "crlf.txt") == raw
    materialize(repo / ".florwb", snap.version, tmp_path / "m")
    assert (tmp_path / "m" / "crlf.txt").read_bytes() == raw
    assert (tmp_path / "m" / "subst.py").read_text() == "# $Format:%H$\n"


def test_project_in_subfolder_and_worktree_exclude(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "mono", {"top.py": "t\n", "ml/train.py": "x\n"})
    project = repo / "ml"
    write(project, {"extra.py": "e\n"})
    assert find_git_toplevel(project) == repo.resolve()
    snap = snapshot(project, project / ".florwb")
    assert list_files(project / ".florwb", snap.version) == ["extra.py", "train.py"]
    assert snap.git_dirty is True and snap.git_branch == "main"

    ensure_excluded(project)
    assert (repo / ".git/info/exclude").read_text().splitlines()[-1] == "/ml/.florwb/"
    assert "?? ml/.florwb/" not in git(repo, "status", "--porcelain", read_only=True)

    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", str(wt), "-b", "side")
    assert (wt / ".git").is_file()
    ensure_excluded(wt)
    ensure_excluded(wt)
    lines = (repo / ".git/info/exclude").read_text().splitlines()
    assert lines.count("/.florwb/") == 1 and lines.count("/ml/.florwb/") == 1
    wt_snap = snapshot(wt, wt / ".florwb")
    assert wt_snap.git_branch == "side" and wt_snap.git_dirty is False
    assert "?? .florwb/" not in git(wt, "status", "--porcelain", read_only=True)


def test_ensure_excluded_outside_git_is_a_no_op(tmp_path: Path) -> None:
    write(tmp_path / "plain", {"a.py": "1\n"})
    ensure_excluded(tmp_path / "plain")
    assert sorted(p.name for p in (tmp_path / "plain").iterdir()) == ["a.py"]


def test_project_inside_ignored_folder_is_walked(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {".gitignore": "scratch/\n"})
    project = repo / "scratch" / "exp"
    write(project, {"train.py": "1\n"})
    snap = snapshot(project, project / ".florwb")
    assert snap.in_git is False and snap.n_files == 1


def test_stale_lock_from_killed_run_is_recovered(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "p", {"a.py": "1\n"})
    first = snapshot(repo, repo / ".florwb")
    (repo / ".florwb" / "versions.git" / "index.lock").write_bytes(b"")
    write(repo, {"a.py": "2\n"})
    second = snapshot(repo, repo / ".florwb")
    assert second.version != first.version
    assert read_file(repo / ".florwb", second.version, "a.py") == b"2\n"


def test_concurrent_snapshots_agree(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "p", {f"m{i}.py": f"v = {i}\n" for i in range(50)})
    write(repo, {"dirty.py": "d\n"})
    store = repo / ".florwb"  # fresh: the processes also race to create the private repo
    code = (
        "import sys; from pathlib import Path; from florwb_engine.versions import snapshot;"
        "print(snapshot(Path(sys.argv[1]), Path(sys.argv[2])).version)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(repo), str(store)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        for _ in range(4)
    ]
    outputs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err.decode() for _out, err in outputs]
    versions = {out.decode().strip() for out, _err in outputs}

    results: list[Snapshot | BaseException] = []

    def run() -> None:
        try:
            results.append(snapshot(repo, tmp_path / "thread-store"))
        except BaseException as exc:  # reported below
            results.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert all(isinstance(r, Snapshot) for r in results) and len(results) == 4, results
    versions |= {r.version for r in results}  # type: ignore[union-attr]
    assert len(versions) == 1 and len(versions.pop()) == 40


def test_missing_git_is_a_version_error(tmp_path: Path, monkeypatch) -> None:
    write(tmp_path / "plain", {"a.py": "1\n"})
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin-here"))
    assert find_git_toplevel(tmp_path / "plain") is None
    with pytest.raises(VersionError, match="git is not installed"):
        snapshot(tmp_path / "plain", tmp_path / "store")
