"""A warm parent for replay workers: import what the old scripts import once, then fork a
worker per segment.

Started as `python script.py`, every worker pays the interpreter and the script's imports
before it replays anything: with torch that is 2-4 s here (torch, then torch._dynamo, which
the first optimizer step pulls in; see lazy_dynamo.py), often more than the replay itself.
The fork server starts when a replay starts, imports those modules while the replay is being
planned, and forks one child per segment; each child sets up the segment's argv, working
directory, environment and output files and runs the old script as `__main__`, exiting the
way `python script.py` would (exceptions, sys.exit, atexit all as usual). When the replay
stops listening (it was killed, or gave up), the server stops the workers still running.

Only modules installed outside the project are imported ahead: the scripts' own modules
differ between versions and must come from each version's folder. If a preloaded module
left Python threads running, forking is unsafe and the children exec a fresh interpreter
instead (slower, still correct).

The server may outlive the replay (`main_shared`): the next replay of the same user, Python,
florwb code and environment connects to it through a Unix socket and is served by a session
forked from it, so torch is imported once per idle period (FLORWB_FORKSERVER_IDLE_S), not
once per replay. A session takes the replay's environment and forgets the modules its
project has its own of; whatever goes wrong with the shared server, the replay starts a
server of its own as before.

Protocol: JSON lines on stdin ({"preload": [...], "shadow": [...]},
{"start": n, "argv": [...], "cwd": ..., "env": {...}, "stderr": path}); replies on stdout
({"started": n, "pid": pid} or {"started": n, "error": text}, then {"exited": pid,
"code": c} with Popen's convention: negative for a signal). A shared server's replay first
says {"hello": 1, "preload": [...], "shadow": [...], "environ": {...}, "umask": m} and is
answered {"server": pid, "session": pid, "served": n} by its session.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from florwb_engine import settings

from .cores import limit_threads
from .lazy_dynamo import defer_dynamo_import

_NEVER_PRELOAD = {"florwb", "florwb_engine", "flordb", "__future__"}
_SKIP_DIRS = {".git", ".florwb", ".flor", "node_modules", "__pycache__", "site-packages"}


# ---------------------------------------------------------------- which modules to preload


def script_imports(source: str) -> list[str]:
    """Absolute modules a script imports anywhere in its code, in order of appearance."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    found: dict[str, None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                found[alias.name] = None
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found[node.module] = None
    return [m for m in found if m.split(".")[0] not in _NEVER_PRELOAD]


def likely_imports(project: Path, names: Iterable[str]) -> list[str]:
    """Imports of the project's scripts that mention one of `names`: today's script with
    the new statements, a good guess at what the old versions import, known before the
    replay is planned."""
    quoted = [q for n in names for q in (f'"{n}"', f"'{n}'")]
    modules: dict[str, None] = {}
    for path in _python_files(project):
        try:
            text = Path(path).read_text(errors="replace")
        except OSError:
            continue
        if any(q in text for q in quoted):
            modules.update(dict.fromkeys(script_imports(text)))
    return list(modules)


def _python_files(
    root: Path, limit: int = 20_000, depth: int = 3, largest: int = 1 << 20
) -> Iterator[str]:
    """Scripts breadth first (today's training script is usually at the top), looking at
    `limit` entries at most: a data folder of a million files must not delay the replay."""
    queue, seen = [(str(root), 0)], 0
    while queue:
        folder, level = queue.pop(0)
        try:
            entries = os.scandir(folder)
        except OSError:
            continue
        with entries:
            for entry in entries:
                seen += 1
                if seen > limit:
                    return
                name = entry.name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if (
                            level + 1 < depth
                            and name not in _SKIP_DIRS
                            and not name.startswith(".")
                            and not os.path.exists(os.path.join(entry.path, "pyvenv.cfg"))
                        ):
                            queue.append((entry.path, level + 1))
                    elif name.endswith(".py") and entry.stat().st_size <= largest:
                        yield entry.path
                except OSError:
                    continue


# ------------------------------------------------------------------ the server (a process)


def _has_module(folder: str, name: str) -> bool:
    """A module or regular package `name` in `folder`; a plain folder (data/, or the
    wandb/ that wandb leaves behind) shadows nothing an installed package provides."""
    return os.path.isfile(os.path.join(folder, name + ".py")) or os.path.isfile(
        os.path.join(folder, name, "__init__.py")
    )


def _is_shadowed(module: str, shadow: list[str]) -> bool:
    """True when the module is, or may be, one of the project's own."""
    top = module.split(".")[0]
    if any(_has_module(folder, top) for folder in shadow):
        return True
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return True
    if spec is None:
        return True
    places = [spec.origin or "", *(spec.submodule_search_locations or [])]
    return any(p and os.path.abspath(p).startswith(tuple(shadow)) for p in places)


def _preload(modules: list[str], shadow: list[str]) -> None:
    shadow = [os.path.join(os.path.abspath(s), "") for s in shadow]
    for module in modules:
        if module in sys.modules or _is_shadowed(module, shadow):
            continue
        try:
            importlib.import_module(module)
        except BaseException:  # noqa: BLE001 - the worker imports it again and reports why
            continue


def _send(message: dict) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(1, data) :]


def _reap(children: set[int]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)
        _send({"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def serve(pending: bytes = b"") -> dict | None:
    """Answer requests until stdin closes (None), or in a forked child: its request.
    `pending`: bytes of requests read already."""
    if sys.path and sys.path[0] == "":
        sys.path.pop(0)  # the server's folder is nobody's code
    children: set[int] = set()
    try:
        request = _serve(children, pending)
    except BrokenPipeError:  # the replay is gone while a reply was on its way
        request = None
    if request is None:
        _end_orphans(children)
    return request


def _serve(children: set[int], pending: bytes = b"") -> dict | None:
    woken = _wake_on_child_exit()
    while True:
        ready, _, _ = select.select([0, woken], [], [], 1.0)
        if woken in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(woken, 4096)
        _reap(children)
        if 0 in ready:
            chunk = os.read(0, 65536)
            if not chunk:
                return None
            pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            if "preload" in request:  # also a shared server's hello, sent here on fallback
                _preload(request["preload"], request.get("shadow", []))
            elif "start" in request:
                request["exec"] = _THREADED_PARENT or threading.active_count() > 1
                try:
                    pid = os.fork()
                except OSError as exc:
                    _send({"started": request["start"], "error": str(exc)})
                    continue
                if pid == 0:
                    _child_signals_as_they_were(woken)
                    return request
                children.add(pid)
                _send({"started": request["start"], "pid": pid})


_WAKE_WRITE = -1  # the write end of the pipe SIGCHLD wakes the server's select through


def _wake_on_child_exit() -> int:
    """A pipe that a byte arrives on whenever a worker ends (SIGCHLD), so the server
    reports it at once instead of at its next poll; its read end."""
    global _WAKE_WRITE
    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    _WAKE_WRITE = write
    signal.set_wakeup_fd(write)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    return read


def _child_signals_as_they_were(woken: int) -> None:
    """A worker runs the old script as `python script.py` would: SIGCHLD at its default,
    no wake-up pipe."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.close(woken)
    os.close(_WAKE_WRITE)


def _end_orphans(children: set[int], grace_s: float = 3.0) -> None:
    """The replay stopped listening while workers still run: it was killed (SIGKILL, a
    crash) or gave up. Nobody will collect their results, so stop them (SIGTERM, then
    SIGKILL after `grace_s`) and reap them. A replay that ends normally has none left."""
    for pid in children:
        signal_worker(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while children:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            children.discard(pid)
        elif time.monotonic() < deadline:
            time.sleep(0.02)
        else:
            for pid in children:
                signal_worker(pid, signal.SIGKILL)
            deadline = float("inf")


def _forget_shadowed(folder: str, boot: set[str]) -> None:
    """Drop modules the server imported that the script's folder has its own of (a local
    json.py, say): `python script.py` would import the local one. Modules every interpreter
    has from its start-up (`boot`) are kept, as they would be."""
    local = {name.removesuffix(".py") for name in os.listdir(folder)}
    local = {name for name in local if _has_module(folder, name)}
    for name in [m for m in sys.modules if m.split(".")[0] in local and m not in boot]:
        del sys.modules[name]


def run_child(request: dict, boot: set[str]) -> None:
    """Become the old script's process: its session, files, folder, argv and environment."""
    import runpy

    os.setsid()  # Ctrl-C in the user's terminal reaches the replay command, not the workers
    null = os.open(os.devnull, os.O_RDWR)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(err, 2)
    os.close(null)
    os.close(err)
    if request.get("contain"):  # before chdir: the working folder must be the overlay's
        from florwb_engine.replay.contain import enter

        try:
            enter(request["contain"])
        except OSError as exc:
            why = f"florwb: the replay's writes could not be kept off your files: {exc}\n"
            os.write(2, why.encode())
            os._exit(70)
    os.chdir(request["cwd"])
    os.environ.update(request["env"])
    argv = request["argv"]
    if request.get("exec") or argv[0] == "-m":  # `-m`: a launcher (ddp_launch.py)
        os.execv(sys.executable, [sys.executable, *argv])
    limit_threads()  # torch is imported already: its thread count is set here, not by env
    sys.argv = list(argv)
    script_dir = os.path.dirname(os.path.abspath(argv[0]))
    sys.path.insert(0, script_dir)
    _forget_shadowed(script_dir, boot)
    defer_dynamo_import()
    # the run's RNG states at `import florwb` (the package's import restores them when it
    # is first imported here; the server may have imported it already)
    from florwb_engine.record import start_rng

    start_rng.restore_before_script(settings.read(settings.REPLAY))
    runpy.run_path(argv[0], run_name="__main__")


def main(boot: set[str], log: str) -> None:
    """`boot`: the modules loaded before the server's own imports; `log`: the server's
    stderr, which the replay removes when it closes the server (here if it never does)."""
    # every worker imports the recording runtime (the script's `import florwb`, and
    # run_child's RNG states): once here. It reads its settings from this environment,
    # which is the workers' but for the replay's own variables, read when the run starts.
    import florwb_engine.record  # noqa: F401

    request = serve()
    if request is None:
        with contextlib.suppress(OSError):  # the replay removed it already
            os.unlink(log)
        os._exit(0)
    run_child(request, boot)


# ---------------------------------------------- the shared server (outlives one replay)

# Set in a shared server's session: the server it was forked from had threads running, so
# its workers exec a fresh interpreter (the session's own threading module cannot tell).
_THREADED_PARENT = False
IDLE_ENV = settings.FORKSERVER_IDLE_S.name
DEFAULT_IDLE_S = settings.FORKSERVER_IDLE_S.default


def main_shared(boot: set[str], path: str, idle_s: float) -> None:
    """A fork server shared by the replays of one user, Python and florwb (the key in its
    socket's name, `socket_path`): it keeps what it imported for `idle_s` seconds after
    its last replay. Each replay connects, says hello (what to preload, its environment)
    and is served by a session forked for it, which speaks `serve`'s protocol on the
    connection and stops its workers when the connection closes."""
    global _BOOT
    _BOOT = boot
    if sys.path and sys.path[0] == "":
        sys.path.pop(0)
    listener = listen_private(path)
    if listener is None:  # another server holds the socket: it serves
        os._exit(0)
    import florwb_engine.record  # noqa: F401 - every worker imports it: once here

    session = _accept(listener, path, idle_s)
    request = serve(session)
    if request is None:
        os._exit(0)
    run_child(request, boot)


def listen_private(path: str) -> socket.socket | None:
    """Listen on a Unix socket at `path` that only this user can reach; None when a live
    server answers there already (a dead one's socket is replaced)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the socket is the user's alone from its first moment
    try:
        try:
            listener.bind(path)
        except OSError:
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(path)
                listener.close()
                return None  # a live server answers there
            except OSError:  # a dead server's socket
                os.unlink(path)
                listener.bind(path)
            finally:
                probe.close()
    finally:
        os.umask(old)
    listener.listen(16)
    return listener


def _accept(listener, path: str, idle_s: float) -> bytes:
    """Accept replays until idle for `idle_s` (then exit); in a session: the bytes of the
    replay's requests read after its hello."""
    global _THREADED_PARENT
    ours = os.stat(path).st_ino
    sessions: set[int] = set()
    served = 0
    woken = _wake_on_child_exit()
    idle_since = time.monotonic()
    while True:
        ready, _, _ = select.select([listener, woken], [], [], 1.0)
        if woken in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(woken, 4096)
        _reap_sessions(sessions)
        if sessions:
            idle_since = time.monotonic()
        try:
            replaced = os.stat(path).st_ino != ours
        except OSError:
            replaced = True
        if replaced or (not sessions and time.monotonic() - idle_since > idle_s):
            if not replaced:
                os.unlink(path)
            os._exit(0)
        if listener not in ready:
            continue
        try:
            conn, _ = listener.accept()
        except OSError:  # out of descriptors, or the replay gave up: it falls back
            continue
        hello, pending = _hello(conn)
        if hello is None:
            conn.close()
            continue
        _preload(hello.get("preload", []), hello.get("shadow", []))
        served += 1
        threaded = threading.active_count() > 1
        try:
            pid = os.fork()
        except OSError:
            conn.close()  # the replay falls back to a server of its own
            continue
        if pid == 0:
            listener.close()
            _child_signals_as_they_were(woken)
            _THREADED_PARENT = threaded
            _become_session(conn, hello, served)
            return pending
        sessions.add(pid)
        conn.close()
        idle_since = time.monotonic()


def _reap_sessions(sessions: set[int]) -> None:
    while sessions:
        try:
            pid, _status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            sessions.clear()
            return
        if pid == 0:
            return
        sessions.discard(pid)


def _hello(conn) -> tuple[dict | None, bytes]:
    """The replay's first line, and the bytes after it; None when it sends none in time."""
    conn.settimeout(30)
    data = b""
    try:
        while b"\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return None, b""
            data += chunk
        line, rest = data.split(b"\n", 1)
        hello = json.loads(line)
    except (OSError, ValueError):
        return None, b""
    conn.settimeout(None)
    return (hello if isinstance(hello, dict) and "hello" in hello else None), rest


def _become_session(conn, hello: dict, served: int) -> None:
    """The connection becomes the session's stdin and stdout; the replay's environment and
    umask replace the server's (its workers get what a server of their own would give
    them); modules the replay's project has its own of are forgotten."""
    fd = conn.detach()
    os.dup2(fd, 0)
    os.dup2(fd, 1)
    os.close(fd)
    os.environ.clear()
    os.environ.update(hello.get("environ", {}))
    os.umask(int(hello.get("umask", 0o022)))
    for folder in hello.get("shadow", []):
        with contextlib.suppress(OSError):
            _forget_shadowed(folder, _BOOT)
    with contextlib.suppress(OSError):  # the replay gave up already: serve sees it gone
        _send({"server": os.getppid(), "session": os.getpid(), "served": served})


_BOOT: set[str] = set()  # a shared server's start-up modules (main's `boot`)


# ------------------------------------------------------------------ the client (in florwb)


def warm_workers(project: Path, names: Iterable[str] = ()) -> ForkServer:
    """Start a replay's fork server now and let it import what today's scripts that log
    `names` import, so the imports overlap with planning. Hand it to `execute`.

    The shared server (`main_shared`) is used where it runs or can be started; anything
    amiss with it (no runtime folder, a crash) gives the replay a server of its own."""
    from florwb_engine.project import store_dir
    from florwb_engine.replay.contain import probe_soon

    store = store_dir(project)
    if not store.is_dir():  # the store's own imports (DuckDB) wait until the server runs
        from florwb_engine.store.db import require_store

        require_store(store)  # a replay outside a project creates no .florwb/
    log = store / "replays" / f"forkserver-{os.getpid()}-{secrets.token_hex(3)}.log"
    modules = likely_imports(project, names)
    server = ForkServer.shared(log, modules, [project])
    if server is None:
        server = ForkServer(log)
        server.preload(modules, [project])
    probe_soon(project)  # execute's containment asks the same: answered meanwhile
    return server


def idle_seconds() -> float:
    """How long the shared server waits for the next replay (FLORWB_FORKSERVER_IDLE_S);
    0: every replay starts a server of its own."""
    return settings.read(settings.FORKSERVER_IDLE_S)


# Variables that differ between terminals of one user without changing what a process
# imports or computes: they do not keep two replays from sharing a server.
_VOLATILE = {"_", "OLDPWD", "PWD", "SHLVL", "COLUMNS", "LINES", "WINDOWID", "OSTYPE"}
_VOLATILE_PREFIXES = ("TERM", "SSH_", "TMUX", "STY", "PYTEST_", "DISPLAY", "XAUTHORITY")


def code_key() -> str:
    """The Python, the user and florwb's code (each engine file's size and time): what a
    warm interpreter kept between replays must share with the replay it serves."""
    engine = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    digest.update(f"{sys.executable}\0{sys.version}\0{os.getuid()}\0".encode())
    for folder, dirs, files in sorted(os.walk(engine)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            st = os.stat(os.path.join(folder, name))
            digest.update(f"{folder}/{name}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:20]


def server_key() -> str:
    """What a shared server must have in common with a replay: the Python, florwb's code
    (each engine file's size and time: an upgrade or an edit starts a new server) and the
    environment the server imported its modules under."""
    digest = hashlib.sha256(code_key().encode())
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in _VOLATILE and not k.startswith(_VOLATILE_PREFIXES) and k != IDLE_ENV
    }
    digest.update(json.dumps(sorted(env.items())).encode())
    return digest.hexdigest()[:20]


def runtime_dir() -> Path | None:
    """The user's own folder for the shared server's socket and log (mode 0700):
    $XDG_RUNTIME_DIR/florwb, else ~/.cache/florwb/run; None where neither can be had."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(xdg) / "florwb" if xdg else Path.home() / ".cache" / "florwb" / "run"
    try:
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = base.stat()
    except OSError:
        return None
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        return None  # somebody else's, or open to others: never talk through it
    return base


def socket_path() -> Path | None:
    """The shared server's socket for this replay's key; None where there is none to use."""
    if idle_seconds() <= 0:
        return None
    folder = runtime_dir()
    if folder is None:
        return None
    path = folder / f"fs-{server_key()}.sock"
    return path if len(str(path)) < 100 else None  # sun_path's limit


_STARTED: list[subprocess.Popen] = []  # shared servers this process started (not waited)


def _connect(path: Path, start_s: float = 15.0):
    """A connection to the shared server at `path`, started if none answers; None when
    none can be had."""

    def attempt():
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(str(path))
        except OSError:
            sock.close()
            return None
        return sock

    _STARTED[:] = [p for p in _STARTED if p.poll() is None]
    with contextlib.suppress(OSError):
        if path.stat().st_uid == os.getuid():
            sock = attempt()
            if sock is not None:
                return sock
    root = str(Path(__file__).resolve().parents[2])
    code = (
        f"import sys; boot = set(sys.modules); sys.path.append({root!r}); "
        "from florwb_engine.replay.forkserver import main_shared; "
        f"main_shared(boot, {str(path)!r}, {idle_seconds()!r})"
    )
    try:
        with open(path.with_suffix(".log"), "ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-c", code],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                cwd="/",
                start_new_session=True,
            )
    except OSError:
        return None
    _STARTED.append(process)
    deadline = time.monotonic() + start_s
    while time.monotonic() < deadline:
        sock = attempt() if path.exists() else None
        if sock is not None:
            return sock
        if process.poll() is not None:  # it ended: another server answers, or none does
            return attempt() if path.exists() else None
        time.sleep(0.01)
    return None


def _umask() -> int:
    """This process's umask, read without setting it where Linux says it (setting it, even
    back at once, would change it for files other threads create meanwhile)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class ForkServer:
    """The replay's handle on its fork server: start segments, learn when they end.

    Either a server of its own (a child process on pipes), or a session of the shared
    server (`ForkServer.shared`, a Unix socket)."""

    def __init__(self, log_path: Path, *, connection=None) -> None:
        self.log_path = log_path
        self._connection = connection
        self._process: subprocess.Popen | None = None
        if connection is None:
            self._process = self._spawn(log_path)
        self._next = 0
        self._buffer = b""
        self._sent: list[bytes] = []  # a session's requests, sent again on fallback
        self._fallback: Path | None = None  # a session's: the log of a server of its own
        self.started: dict[int, int | str] = {}  # request -> pid, or why it did not start
        self.exited: dict[int, int] = {}  # pid -> exit code
        # which server: {"shared": False, "pid": ...} or the shared one's {"server": pid,
        # "session": pid, "served": replays it served, this one included}
        self.identity: dict = {"shared": connection is not None}
        if self._process is not None:
            self.identity["pid"] = self._process.pid

    @staticmethod
    def _spawn(log_path: Path) -> subprocess.Popen:
        root = str(Path(__file__).resolve().parents[2])
        code = (
            f"import sys; boot = set(sys.modules); sys.path.append({root!r}); "
            f"from florwb_engine.replay.forkserver import main; main(boot, {str(log_path)!r})"
        )
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "wb") as log:
            return subprocess.Popen(
                [sys.executable, "-c", code],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )

    @classmethod
    def shared(
        cls, fallback_log: Path, modules: list[str], shadow: Iterable[Path] = ()
    ) -> ForkServer | None:
        """A session of the shared server, which imports `modules` (and keeps them for
        the next replay); None where there is none to be had (FLORWB_FORKSERVER_IDLE_S=0,
        no private runtime folder). If the session ends before it greeted the replay, a
        server of its own takes over (logging to `fallback_log`)."""
        path = socket_path()
        if path is None:
            return None
        connection = _connect(path)
        if connection is None:
            return None
        server = cls(path.with_suffix(".log"), connection=connection)
        server._fallback = fallback_log
        hello = {
            "hello": 1,
            "preload": modules,
            "shadow": [str(s) for s in shadow],
            "environ": dict(os.environ),
            "umask": _umask(),
        }
        server._request(hello)
        return server

    def preload(self, modules: list[str], shadow: Iterable[Path] = ()) -> None:
        if modules:
            self._request({"preload": modules, "shadow": [str(s) for s in shadow]})

    def start(
        self,
        argv: list[str],
        cwd: Path,
        env: dict[str, str],
        stderr: Path,
        contain: dict | None = None,
    ) -> int:
        """Ask for a worker; returns the request number that `started` will hold. With
        `contain` (contain.Containment.request), the worker's writes go to an overlay."""
        n = self._next
        self._next += 1
        self._request(
            {
                "start": n,
                "argv": argv,
                "cwd": str(cwd),
                "env": env,
                "stderr": str(stderr),
                "contain": contain,
            }
        )
        return n

    def _reader(self) -> int:
        if self._connection is not None:
            return self._connection.fileno()
        assert self._process is not None and self._process.stdout is not None
        return self._process.stdout.fileno()

    def poll(self, timeout: float) -> None:
        """Wait up to `timeout` for replies and take them in."""
        if self._connection is None and self._process is None:
            time.sleep(timeout)  # a lost session: nothing will come
            return
        fd = self._reader()
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            self._lost()
            return
        self._buffer += chunk
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            reply = json.loads(line)
            if "started" in reply:
                self.started[reply["started"]] = reply.get("pid", reply.get("error", "?"))
            elif "exited" in reply:
                self.exited[reply["exited"]] = reply["code"]
            elif "session" in reply:
                self.identity.update(reply)
                self._sent.clear()  # served: no fallback from here on

    def _lost(self) -> None:
        """The server died: every worker not known to have ended is reported failed. A
        shared server's session that never greeted the replay is replaced by a server of
        the replay's own, asked for everything the session was asked for."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None
            if self._fallback is not None and "session" not in self.identity:
                self._take_over(self._fallback)
                return
            why = f"replay fork server's session ended: {_tail(self.log_path)}"
        else:
            assert self._process is not None
            code = self._process.wait()
            why = f"replay fork server exited {code}: {_tail(self.log_path)}"
        for n in range(self._next):
            self.started.setdefault(n, why)
        for pid in self.started.values():
            if isinstance(pid, int):
                self.exited.setdefault(pid, -1)

    def _take_over(self, log_path: Path) -> None:
        sent, self._sent = self._sent, []
        self._fallback = None
        self.log_path = log_path
        self._buffer = b""
        self._process = self._spawn(log_path)
        self.identity = {"shared": False, "pid": self._process.pid, "fell_back": True}
        for data in sent:
            self._write(data)

    def _request(self, message: dict) -> None:
        data = (json.dumps(message) + "\n").encode()
        if self._connection is not None and "session" not in self.identity:
            self._sent.append(data)
        self._write(data)

    def _write(self, data: bytes) -> None:
        try:
            if self._connection is not None:
                self._connection.sendall(data)
                return
            if self._process is None:
                return
            stdin = self._process.stdin
            assert stdin is not None
            stdin.write(data)
            stdin.flush()
        except (BrokenPipeError, OSError):
            self._lost()

    def lost(self) -> bool:
        """Whether the server process (a shared server's session) has ended."""
        if self._process is None:
            return self._connection is None
        return self._process.poll() is not None

    def kill(self) -> None:
        """Stop the server now (its workers run in their own sessions and go on); a
        shared server's session, not the shared server."""
        if self._process is not None:
            self._process.kill()
        elif self._connection is not None:
            session = self.identity.get("session")
            if isinstance(session, int):
                signal_worker(session, signal.SIGKILL)
            self._connection.close()
            self._connection = None

    def close(self) -> None:
        """Stop taking requests; workers still running are stopped (nobody would collect
        their results). A server that never started one is stopped at once, even in the
        middle of its imports; a shared server keeps what it imported."""
        if self._connection is not None:
            self._close_session()
            return
        if self._process is None:
            return
        if self._next == 0:
            self.kill()
        if self._process.stdin:
            with contextlib.suppress(OSError):  # a dead server's pipe
                self._process.stdin.close()
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
        if self._process.stdout:
            self._process.stdout.close()
        self.log_path.unlink(missing_ok=True)

    def _close_session(self) -> None:
        """End the session and wait (5 s at most) until it stopped its workers: its end
        of the connection closes when it exits."""
        connection, self._connection = self._connection, None
        assert connection is not None
        with contextlib.suppress(OSError):
            connection.shutdown(socket.SHUT_WR)
            connection.settimeout(5)
            while connection.recv(65536):
                pass
        connection.close()


def signal_worker(pid: int, sig: int) -> None:
    """Signal a worker and what it started (its session's group); right after the fork,
    before the worker made its own session, the worker alone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            os.kill(pid, sig)


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no output)"
    return lines[-1] if lines else "(no output)"
