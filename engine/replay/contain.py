"""Keeping a replay's writes off the user's files.

An old script writes where it wrote when it ran: `torch.save(model, "model.pt")`, a PDF of
its plots, `netG_epoch_3.pth`. Those paths exist in the user's working tree (ignored or
untracked, so git cannot tell), and a replay must leave them byte for byte as they were.
A hook on Python's `open` cannot catch it (torch.save writes from C++), so the kernel does:

- **namespace** (where the kernel allows a private mount namespace, as root or through an
  unprivileged user namespace): each worker, right after the fork server forks it and
  before the script's first line, gets its own mount namespace in which the project's
  parent folder and the user's home are overlays: reads see the real files, writes land
  in a scratch folder that is removed with the replay. Absolute paths elsewhere (`/data`,
  `/mnt/...`) are not overlaid: a full copy-on-write root would also hide the caches and
  shared memory the script needs. `.florwb/` is bound back as it is (the worker's journal,
  progress and checkpoints are real). Folders mounted below the overlaid one come back
  read-only, so a write there fails loudly instead of reaching the user's files.
- **copy** (no namespace): what the snapshot left out of the code (data folders, large or
  ignored files) is copied into the replay's folder instead of linked, up to a byte
  budget (`FLORWB_REPLAY_COPY_MAX`, default 1 GiB). Past the budget the replay is refused
  before it starts, saying which files are too large. Paths outside the project are read
  in place in this mode; `..` links of the mirror (mirror.py) reach the real folders.

Files the recorded run created (replay/run_inputs.py) are hidden: links or copies of them
in the replay's folder are removed before the worker starts, and, in namespace mode, a file
reached through a link to the user's folder is removed inside the worker's overlay
(`hide`), so the old script finds what the run found at its start.

`FLORWB_REPLAY_CONTAIN=copy` forces the copy mode (and `namespace` insists on the other).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from florwb_engine import settings
from florwb_engine.errors import FlorwbError

MODE_ENV = settings.REPLAY_CONTAIN.name
COPY_MAX_ENV = settings.REPLAY_COPY_MAX.name
DEFAULT_COPY_MAX = settings.REPLAY_COPY_MAX.default
# "namespace": a private mount namespace overlays the project's parent; "copy": left-out
# files are copied into the replay's folder (no namespace here, or FLORWB_REPLAY_CONTAIN=copy)
ContainmentMode = Literal["namespace", "copy"]
REQUEST_KEY = "contain"  # the fork server request's field the worker reads

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_RDONLY = 1
_MS_REMOUNT = 32
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18


class ContainmentError(FlorwbError):
    """A replay whose writes could not be kept off the user's files: it must not start."""

    title = "The replay cannot start"


@dataclass(frozen=True)
class Containment:
    """How this replay's workers keep their writes off the user's files."""

    mode: ContainmentMode
    lower: tuple[str, ...] = ()  # folders overlaid (namespace mode)
    keep: tuple[str, ...] = ()  # folders bound back as they are (the store)
    why: str = ""  # why the namespace is not used, in copy mode

    def describe(self) -> str:
        if self.mode == "namespace":
            return "writes go to a private overlay of " + ", ".join(self.lower)
        return f"left-out files are copied into the replay ({self.why})"

    def request(self, scratch: Path) -> dict | None:
        """What the worker needs to enter the namespace (None in copy mode)."""
        if self.mode != "namespace":
            return None
        return {"lower": list(self.lower), "keep": list(self.keep), "scratch": str(scratch)}


def choose(project: Path, store: Path) -> Containment:
    """The namespace where this machine allows it (probed once per process), else copies."""
    wanted = settings.read(settings.REPLAY_CONTAIN)
    if wanted == "copy":
        return Containment("copy", why=f"{MODE_ENV}=copy")
    lowers = _overlaid(project.resolve())
    store = store.resolve()
    keep = (str(store),) if any(store.is_relative_to(x) for x in lowers) else ()
    problem = _probe(lowers)
    if problem is None:
        return Containment("namespace", tuple(str(p) for p in lowers), keep)
    if wanted == "namespace":
        raise ContainmentError(f"{MODE_ENV}=namespace, but {problem}")
    return Containment("copy", why=problem)


def _overlaid(project: Path) -> tuple[Path, ...]:
    """The folders a worker sees as overlays: the project's parent (so `../data` writes
    are caught) and the user's home (`~/outputs`, caches), whichever holds the other just
    once. A folder that is `/`, or holds the scratch folders, is not overlaid: for the
    parent the project itself is taken instead, the home is left out."""
    scratch = Path(tempfile.gettempdir()).resolve()

    def usable(folder: Path) -> bool:
        return folder != folder.parent and not scratch.is_relative_to(folder)

    near = project.parent if usable(project.parent) else project
    try:
        home = Path.home().resolve()
    except (KeyError, RuntimeError):  # no home directory known for this user
        return (near,)
    if not usable(home) or not home.is_dir():
        return (near,)
    if near.is_relative_to(home):
        return (home,)
    if home.is_relative_to(near):
        return (near,)
    return (near, home)


_PROBED: dict[str, str | None] = {}
_PROBING: dict[str, threading.Thread] = {}  # probes started ahead (probe_soon)
_PROBING_LOCK = threading.Lock()


def probe_soon(project: Path) -> None:
    """Start probing the namespace for `project`'s folders now, in a thread: the probe's
    fresh interpreter then starts while the replay is planned, and `choose` waits for it."""
    if settings.read(settings.REPLAY_CONTAIN) == "copy":
        return
    lowers = _overlaid(project.resolve())
    key = "\0".join(map(str, lowers))
    with _PROBING_LOCK:
        if key in _PROBED or key in _PROBING:
            return
        thread = threading.Thread(target=_probe, args=(lowers,), name="florwb-probe", daemon=True)
        _PROBING[key] = thread
    thread.start()


def _probe(real: tuple[Path, ...] = ()) -> str | None:
    """None when a process here can unshare its mounts and overlay the folders `real`
    (mounted, never written) and a scratch folder (written: the write must not reach it);
    else the reason, in words. Run in a fresh interpreter, once per set of folders: the
    caller may have threads."""
    key = "\0".join(map(str, real))
    with _PROBING_LOCK:
        ahead = _PROBING.get(key)
    if ahead is not None and ahead is not threading.current_thread():
        ahead.join()  # started by probe_soon: its answer is the one
    if key in _PROBED:
        return _PROBED[key]
    if not sys.platform.startswith("linux"):
        _PROBED[key] = "private mount namespaces exist only on Linux"
        return _PROBED[key]
    with tempfile.TemporaryDirectory(prefix="florwb-probe-") as folder:
        lower = Path(folder, "lower")
        lower.mkdir()
        (lower / "file").write_text("user")
        code = (
            "import sys; from florwb_engine.replay.contain import enter; "
            "enter({'lower': sys.argv[3:], 'keep': [], 'scratch': sys.argv[2]}); "
            "open(sys.argv[1] + '/file', 'w').write('replay')"
        )
        folders = [str(lower), *map(str, real)]
        try:
            done = subprocess.run(
                [sys.executable, "-c", code, str(lower), str(Path(folder, "scratch")), *folders],
                capture_output=True,
                text=True,
                timeout=20,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            _PROBED[key] = f"the namespace probe failed ({exc})"
            return _PROBED[key]
        contained = (lower / "file").read_text() == "user"
        if done.returncode == 0 and contained:
            _PROBED[key] = None
        else:
            last = (done.stderr.strip().splitlines() or ["writes reached the real folder"])[-1]
            _PROBED[key] = f"no private mount namespace here ({last})"
    return _PROBED[key]


# ------------------------------------------------------------------ in the worker


def enter(request: dict) -> None:
    """Become a process whose writes under `request["lower"]` land in its scratch folder.
    Must run single-threaded (right after fork) and before the script's first line."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(_CLONE_NEWNS) != 0:
        if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS) != 0:
            raise OSError(ctypes.get_errno(), "unshare: " + os.strerror(ctypes.get_errno()))
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE)
    lowers = [os.path.realpath(p) for p in request["lower"]]
    keep = [(os.open(p, os.O_PATH), p) for p in request["keep"] if os.path.isdir(p)]
    nested = [(os.open(p, os.O_PATH), p) for p in _mounts_below(lowers)]
    scratch = Path(request["scratch"])
    for index, lower in enumerate(lowers):
        upper, work = scratch / str(index) / "upper", scratch / str(index) / "work"
        upper.mkdir(parents=True, exist_ok=True)
        work.mkdir(parents=True, exist_ok=True)
        options = f"lowerdir={_escape(lower)},upperdir={_escape(upper)},workdir={_escape(work)}"
        _mount(libc, "overlay", lower, "overlay", 0, options)
    for fd, path in nested:  # what was mounted below comes back, read-only
        _mount(libc, f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
        _mount(libc, None, path, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY)
    for fd, path in keep:  # the store, as it is: journals, progress, checkpoints
        _mount(libc, f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC)
    for fd, _path in nested + keep:
        os.close(fd)
    hide(request.get("hide", ()), lowers, [p for _fd, p in keep])


def hide(paths, lowers: list[str], keep: list[str]) -> None:
    """Remove, inside this worker's overlay only, the files the run created (reached
    through the replay folder's links to the user's folders): the replay starts without
    them, as the run did, and the user's files stay as they are. A path that does not
    resolve into an overlaid folder (or resolves into the store, bound back as it is) is
    left alone."""
    for path in paths:
        real = os.path.realpath(path)
        inside = any(real.startswith(lower.rstrip("/") + "/") for lower in lowers)
        kept = any(real == k or real.startswith(k.rstrip("/") + "/") for k in keep)
        if inside and not kept and os.path.lexists(real) and not os.path.isdir(real):
            os.unlink(real)  # a whiteout in the overlay's upper folder


def _mount(libc, source, target, fstype, flags: int, options: str | None = None) -> None:
    enc = [None if v is None else os.fsencode(v) for v in (source, target, fstype, options)]
    if libc.mount(enc[0], enc[1], enc[2], flags, enc[3]) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {fstype or 'bind'} on {target}: {os.strerror(errno)}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _escape(path: object) -> str:
    """Overlay options separate with `,` and `:`; a backslash escapes them."""
    return str(path).replace("\\", "\\\\").replace(",", "\\,").replace(":", "\\:")


def _mounts_below(folders: list[str]) -> list[str]:
    """Mount points strictly inside `folders` (an overlay hides them), outermost first."""
    found = []
    with open("/proc/self/mountinfo", "rb") as handle:
        for line in handle:
            point = _unescape(line.split()[4].decode("utf-8", "surrogateescape"))
            if any(point != f and point.startswith(f.rstrip("/") + "/") for f in folders):
                found.append(point)
    return sorted(set(found), key=lambda p: p.count("/"))


def _unescape(text: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        text = text.replace(code, chr(int(code[1:], 8)))
    return text


# ------------------------------------------------------------------ copy mode


def copy_missing(source: Path, target: Path, skip: set[str]) -> None:
    """Copy what the snapshot left out of `target` (a materialised version of `source`)
    from `source`, so the old script reads the run's neighbours and writes only copies.
    Virtual environments are linked (nothing writes there). Raises ContainmentError,
    before copying anything, when the copies would pass the byte budget."""
    plan = [(src, dst, _bytes(src)) for src, dst in left_out(source, target, skip)]
    total = sum(size for _src, _dst, size in plan)
    budget = _copy_budget()
    if total > budget:
        largest = sorted(plan, key=lambda item: -item[2])[:3]
        names = ", ".join(f"{src.relative_to(source)} ({_mib(size)})" for src, _d, size in largest)
        raise ContainmentError(
            f"replay refused: files left out of the snapshot ({_mib(total)}: {names}) are more "
            f"than {COPY_MAX_ENV}={budget} bytes to copy, and this machine has "
            "no private mount namespace to keep the replay's writes off them"
        )
    for src, dst, _size in plan:
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        elif src.is_dir() and (src / "pyvenv.cfg").exists():
            dst.symlink_to(src)
        elif src.is_dir():
            shutil.copytree(src, dst, symlinks=True)
        else:
            shutil.copy2(src, dst)


def left_out(
    source: Path, target: Path, skip: set[str], depth: int | None = None
) -> Iterator[tuple[Path, Path]]:
    """(source entry, where it goes) for each entry of `source` that `target` (a
    materialised version of it) lacks, looking `depth` folders deep (all, when None)."""
    if depth == 0:
        return
    try:
        entries = list(os.scandir(source))
    except OSError:
        return
    for entry in entries:
        if entry.name in skip:
            continue
        there = target / entry.name
        src = Path(entry.path)
        if not there.exists() and not there.is_symlink():
            yield src, there
        elif entry.is_dir(follow_symlinks=False) and there.is_dir() and not there.is_symlink():
            yield from left_out(src, there, skip, None if depth is None else depth - 1)


def _bytes(path: Path) -> int:
    if path.is_symlink():
        return 0
    if not path.is_dir():
        return path.stat().st_size
    if (path / "pyvenv.cfg").exists():
        return 0  # linked, not copied
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # vanished meanwhile: nothing to copy
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def _copy_budget() -> int:
    try:
        return settings.read(settings.REPLAY_COPY_MAX)
    except settings.SettingError as exc:
        raise ContainmentError(str(exc)) from None


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def remove_scratch(folder: Path) -> None:
    """Remove a worker's scratch; the kernel leaves an overlay work folder mode 000."""

    def unlock(function, path, _exc) -> None:
        os.chmod(path, 0o700)
        parent = os.path.dirname(path)
        os.chmod(parent, 0o700)
        function(path)

    if folder.exists():
        shutil.rmtree(folder, onerror=unlock)
