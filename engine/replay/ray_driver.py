"""The warm Ray driver: one long-lived process on this machine that holds a Ray cluster's
connection between `florwb replay --executor ray` commands, so a command pays neither
`import ray` nor connecting to the cluster and disconnecting from it (1-2.5 s on a busy
box, most of what a replay on Ray cost beyond the local executor's).

The first replay on a cluster starts it (detached, in a session of its own); it connects
(or, with no cluster named, starts Ray on this machine as the command did), listens on a
Unix socket in the user's private runtime folder (forkserver.runtime_dir), named by a key
of florwb's code, the cluster's address and the RAY_* environment, and ends after
FLORWB_FORKSERVER_IDLE_S without a command (stopping the Ray it started), as the warm
workers it drives do. A command connects, is greeted with the cluster's facts (planning
needs its CPUs, its largest node, whether the warm workers are up) and hands over the
replay's segments (ray_executor.SegmentJob: paths on this machine, no bytes); the driver
runs them as the command would have (ray_executor.drive: the same shipping, warm
workers, journals and logs written where a local worker leaves them) and streams each
segment's progress and return code back. The command's catalog, ingestion and fidelity
check stay in the command.

Cancel: the command says so on the connection (Ctrl-C, the `cancel` event), and a
command that goes away (killed) cancels its segments by closing it. Whatever is wrong
with the driver is found and mended, never waited on: nothing answers on the socket (a
dead driver's socket) - a new one is started; a driver that does not greet within
HELLO_S (hung, or its cluster gone) - killed and replaced; a driver that dies during the
replay - its segments fail with its log's last line. Ray not installed or the cluster
unreachable is the driver's first line back to the command that started it, said as the
command said it before (RayUnavailable, one line).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import queue
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from florwb_engine.errors import FlorwbError
from florwb_engine.replay.forkserver import code_key, idle_seconds, listen_private, runtime_dir

if TYPE_CHECKING:
    from florwb_engine.replay.executor import SegmentState
    from florwb_engine.replay.ray_executor import (
        Cluster,
        RayOptions,
        Report,
        SegmentJob,
        Shipment,
    )

HELLO_S = 30.0  # a driver that does not greet within this is hung (or its cluster gone)
START_S = 180.0  # a driver's first line: Ray retries a silent address for minutes
PROBE_S = 10.0  # connecting to the cluster's address before Ray tries (for minutes)
POLL_S = 0.2  # how often a waiting command looks at its cancel event
# After a cancel, how long the driver gets to confirm the segments stopped (it gives up on
# Ray after ray_executor's STOP_GRACE_S + GIVE_UP_S itself) before the command kills it.
CANCEL_S = 60.0
SUN_PATH = 100  # a Unix socket's path must be shorter (108 bytes with its terminator)


class DriverError(FlorwbError):
    """The driver failed while running a replay (a defect of florwb): said in one line."""


def enabled() -> bool:
    """Whether replays on Ray go through the warm driver: it is kept for
    FLORWB_FORKSERVER_IDLE_S (0: each command connects to Ray itself) and the user has a
    private runtime folder whose path leaves room for its socket's name."""
    if idle_seconds() <= 0:
        return False
    folder = runtime_dir()
    return folder is not None and len(str(folder / f"ray-{'0' * 20}.sock")) < SUN_PATH


def driver_key(address: str | None) -> str:
    """What a driver must share with a command it serves: florwb's code, the cluster it
    was asked for (the address as given: `--address`, RAY_ADDRESS, or none) and the RAY_*
    variables that say how to reach it (RAY_AUTH_MODE, ...)."""
    digest = hashlib.sha256(code_key().encode())
    ray_env = sorted((k, v) for k, v in os.environ.items() if k.startswith("RAY_"))
    digest.update(json.dumps([address or "", ray_env]).encode())
    return digest.hexdigest()[:20]


def _address(options: RayOptions) -> str | None:
    return options.address or os.environ.get("RAY_ADDRESS") or None


def socket_path(options: RayOptions) -> Path | None:
    """The driver's socket for `options`' cluster; None where there is none to use."""
    folder = runtime_dir()
    if folder is None:
        return None
    path = folder / f"ray-{driver_key(_address(options))}.sock"
    return path if len(str(path)) < SUN_PATH else None


_CURRENT: DriverClient | None = None  # the driver this command talks to


def current() -> DriverClient | None:
    """The driver this process connected to (`connect`), if any."""
    return _CURRENT


def connect(options: RayOptions, *, start: bool) -> DriverClient | None:
    """A connection to the warm driver of `options`' cluster, which becomes `current()`.
    With `start`, one is started where none answers (RayUnavailable when it cannot reach
    Ray); without, None then."""
    global _CURRENT
    from florwb_engine.replay.ray_executor import RayUnavailable, require_ray

    require_ray()
    path = socket_path(options)
    if path is None:
        raise RayUnavailable("the Ray driver needs a private runtime folder")  # enabled() said
    client, stale = _greet(path)
    if client is None and start:
        with _locked(path.with_suffix(".lock")):  # two commands start one driver
            if stale is None:  # none there: another command may have started one since
                client, stale = _greet(path)
            if client is None:
                if stale is not None:
                    _mend(path, stale)
                _start(path, _address(options))
                client, _ = _greet(path)
                if client is None:
                    raise RayUnavailable(
                        f"the florwb Ray driver did not answer: {_tail(path.with_suffix('.log'))}"
                    )
                client.started = True
    if _CURRENT is not None and _CURRENT is not client:
        _CURRENT.close()
    _CURRENT = client
    return client


def forget() -> None:
    """Close the connection to the driver (the driver stays, warm)."""
    global _CURRENT
    if _CURRENT is not None:
        _CURRENT.close()
    _CURRENT = None


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "a+b") as f:
        deadline = time.monotonic() + START_S + HELLO_S
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _peer_pid(sock: socket.socket) -> int | None:
    """The pid of the process listening at the other end (Linux's SO_PEERCRED)."""
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):
        return None
    pid, uid, _gid = struct.unpack("3i", creds)
    return pid if uid == os.getuid() and pid > 0 else None


def _greet(path: Path) -> tuple[DriverClient | None, tuple[int | None, int] | None]:
    """The driver at `path` after its greeting, or (None, what is stale there): the pid
    (None for a dead driver's socket) and the socket's inode, where something is there
    that does not greet within HELLO_S; (None, None) where nothing is."""
    try:
        st = path.stat()
    except OSError:
        return None, None
    if st.st_uid != os.getuid():
        return None, None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError:  # a dead driver's socket
        sock.close()
        return None, (None, st.st_ino)
    pid = _peer_pid(sock)
    client = DriverClient(sock, pid, path)
    try:
        client.send({"hello": 1})
        hello = client.receive(HELLO_S)
    except (OSError, ValueError):
        hello = None
    if not isinstance(hello, dict) or "cluster" not in hello:
        client.close()
        return None, (pid, st.st_ino)
    client.hello(hello)
    return client, None


def _mend(path: Path, stale: tuple[int | None, int]) -> None:
    """A driver that did not greet: killed, and its socket removed (unless a new driver's
    took its place), so a new one can take it."""
    pid, inode = stale
    if pid is not None and pid != os.getpid():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        if path.stat().st_ino == inode:
            path.unlink()


def _start(path: Path, address: str | None) -> None:
    """Start a driver for `address` and wait for its first line: ready (or another
    driver holds the socket), or why it cannot reach Ray (RayUnavailable)."""
    from florwb_engine.replay.ray_executor import RayUnavailable

    where = address or "this machine"
    try:
        _probe(address)
    except ConnectionError as exc:
        raise RayUnavailable(f"cannot reach Ray at {where}: {exc}") from None
    root = str(Path(__file__).resolve().parents[2])
    code = (
        f"import sys; sys.path.append({root!r}); "
        "from florwb_engine.replay.ray_driver import serve; "
        f"serve({address!r}, {str(path)!r}, {idle_seconds()!r})"
    )
    log = path.with_suffix(".log")
    with open(log, "wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            cwd="/",
            start_new_session=True,
        )
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], START_S)
    line = process.stdout.readline() if ready else b""
    process.stdout.close()
    try:
        first = json.loads(line)
    except ValueError:
        first = None
    if not isinstance(first, dict) or "error" in first or not ready:
        if process.poll() is None:
            process.kill()
        why = first.get("error") if isinstance(first, dict) else None
        if not ready:
            why = f"cannot reach Ray at {where}: no answer in {START_S:.0f} s"
        raise RayUnavailable(why or f"the florwb Ray driver did not start: {_tail(log)}")
    _STARTED.append(process)  # reaped by nobody: it outlives this command


_STARTED: list[subprocess.Popen] = []


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no output)"
    return lines[-1] if lines else "(no output)"


class DriverClient:
    """The command's side of a connection to the driver."""

    def __init__(self, sock: socket.socket, pid: int | None, path: Path) -> None:
        self._sock = sock
        self._buffer = b""
        self.path = path
        self.pid = pid
        self.lost = False
        self.started = False  # this command started the driver
        self.served = 0  # commands it served before this one
        self.cluster: Cluster | None = None

    @property
    def identity(self) -> dict:
        """Which driver served the replay (`florwb replay --json`'s `driver`)."""
        return {"pid": self.pid, "served": self.served, "started": self.started}

    def hello(self, hello: dict) -> None:
        from florwb_engine.replay.ray_executor import Cluster

        found = hello["cluster"]
        self.pid = hello.get("pid", self.pid)
        self.served = int(hello.get("served", 0))
        self.cluster = Cluster(float(found["cpus"]), tuple(found["largest"]), found["warm"])

    def send(self, message: dict) -> None:
        self._sock.sendall((json.dumps(message) + "\n").encode())

    def receive(self, timeout: float) -> dict | None:
        """The driver's next message; None when none came within `timeout`. OSError
        when the connection ended (the driver died)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._sock], [], [], left)
            if not ready:
                return None
            chunk = self._sock.recv(1 << 16)
            if not chunk:
                raise ConnectionResetError("the driver closed the connection")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()
        self.lost = True

    def run(
        self,
        jobs: list[SegmentJob],
        workers: int,
        options: RayOptions,
        report: Report,
        ended: Callable[[int, int], None],
        cancel: threading.Event,
    ) -> dict[int, Shipment]:
        """Have the driver run `jobs` (ray_executor.drive there): each report passed on to
        `report`, and `ended(job, returncode)` after a job's. A driver that dies meanwhile
        fails the jobs not ended, with its log's last line; one that does not confirm a
        cancel within CANCEL_S is killed."""
        from florwb_engine.replay.ray_executor import Shipment

        open_jobs = set(range(len(jobs)))
        cancelled_at: float | None = None
        try:
            self.send(
                {
                    "run": [asdict(j) for j in jobs],
                    "workers": workers,
                    "options": asdict(options),
                }
            )
            while True:
                try:
                    if cancel.is_set() and cancelled_at is None:
                        cancelled_at = time.monotonic()
                        self.send({"cancel": 1})
                    if cancelled_at is not None and time.monotonic() - cancelled_at > CANCEL_S:
                        with contextlib.suppress(OSError):
                            _mend(self.path, (self.pid, self.path.stat().st_ino))
                        raise ConnectionAbortedError("it did not confirm the cancel")
                    message = self.receive(POLL_S)
                    if message is None:
                        continue
                    if "report" in message:
                        i, done, state, returncode = message["report"]
                        report(i, done, state, returncode)
                        if returncode is not None:
                            open_jobs.discard(i)
                            ended(i, returncode)
                    elif "done" in message:
                        return {int(k): Shipment(**v) for k, v in message["done"].items()}
                    elif "error" in message:
                        self.close()
                        raise DriverError(f"the florwb Ray driver failed: {message['error']}")
                except KeyboardInterrupt:  # Ctrl-C where the handler is not installed
                    cancel.set()
        except (OSError, ValueError) as exc:  # it died, or said something unreadable
            self.close()
            why = f"ray: the florwb Ray driver (pid {self.pid}) ended during the replay"
            why += f" ({exc}): {_tail(self.path.with_suffix('.log'))}\n"
            ending: SegmentState = "cancelled" if cancel.is_set() else "failed"
            for i in sorted(open_jobs):
                Path(jobs[i].log_path).write_text(why)
                report(i, 0, ending, -1)
            return {}


# ---------------------------------------------------------------- the driver process


def serve(address: str | None, path: str, idle_s: float) -> None:
    """The driver: connect to (or start) Ray, say so on stdout (one JSON line for the
    command that started it), then serve commands on `path` until idle for `idle_s`."""
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever Ray prints goes to the log, not the command's pipe
    if sys.path and sys.path[0] == "":
        sys.path.pop(0)
    try:
        import ray

        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    except ImportError:
        from florwb_engine.replay.ray_executor import INSTALL_HINT

        _first_line(reply, {"error": INSTALL_HINT})
        os._exit(1)
    except Exception as exc:  # whatever keeps it from Ray: said in one line
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        _first_line(reply, {"error": f"cannot reach Ray at {address or 'this machine'}: {first}"})
        os._exit(1)
    listener = listen_private(path)
    if listener is None:  # another driver answers there
        _first_line(reply, {"other": 1})
        ray.shutdown()
        os._exit(0)
    _first_line(reply, {"ready": os.getpid()})
    _Server(listener, path, idle_s).loop()
    ray.shutdown()  # a Ray this driver started stops with it
    os._exit(0)


def _probe(address: str | None) -> None:
    """ConnectionError at once where nothing listens at a `host:port` address (Ray itself
    retries such an address for minutes); `auto`, `local` and none are Ray's to find."""
    if not address or address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # Ray says what is wrong with it
    try:
        socket.create_connection((host, int(port)), timeout=PROBE_S).close()
    except OSError as exc:
        raise ConnectionError(exc.strerror or str(exc) or type(exc).__name__) from None


def _first_line(reply, message: dict) -> None:
    with contextlib.suppress(OSError):
        reply.write(json.dumps(message) + "\n")
        reply.close()


class _Server:
    def __init__(self, listener: socket.socket, path: str, idle_s: float) -> None:
        self.listener = listener
        self.path = path
        self.idle_s = idle_s
        self.lock = threading.Lock()
        self.active = 0
        self.served = 0
        self.idle_since = time.monotonic()

    def loop(self) -> None:
        """Accept commands, each in a thread of its own, until idle for `idle_s` or the
        socket is no longer this driver's (a command replaced it)."""
        ours = os.stat(self.path).st_ino
        while True:
            ready, _, _ = select.select([self.listener], [], [], 1.0)
            try:
                replaced = os.stat(self.path).st_ino != ours
            except OSError:
                replaced = True
            with self.lock:
                idle = not self.active and time.monotonic() - self.idle_since > self.idle_s
                if not self.active and (replaced or idle):
                    if not replaced:
                        with contextlib.suppress(OSError):
                            os.unlink(self.path)
                    return
            if not ready or replaced:
                continue
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            with self.lock:
                self.active += 1
                served, self.served = self.served, self.served + 1
            threading.Thread(target=self._session, args=(conn, served), daemon=True).start()

    def _session(self, conn: socket.socket, served: int) -> None:
        try:
            _Session(conn, served).serve()
        except Exception:  # a defect: told to the command where it can be
            traceback.print_exc()
        finally:
            with contextlib.suppress(OSError):
                conn.close()
            with self.lock:
                self.active -= 1
                self.idle_since = time.monotonic()


class _Session:
    """One command's connection: its requests in order (hello, run, run, ...), a cancel
    or the connection's end at any time (read by a thread of its own)."""

    def __init__(self, conn: socket.socket, served: int) -> None:
        self.conn = conn
        self.served = served
        self.requests: queue.Queue[dict | None] = queue.Queue()
        self.cancel = threading.Event()
        self.closed = False
        self.write_lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buffer = b""
        try:
            while True:
                chunk = self.conn.recv(1 << 16)
                if not chunk:
                    break
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    message = json.loads(line)
                    if "cancel" in message:
                        self.cancel.set()
                    else:
                        if "run" in message:  # a cancel after the last run is no longer news
                            self.cancel.clear()
                        self.requests.put(message)
        except (OSError, ValueError):
            pass
        self.closed = True
        self.cancel.set()  # the command went away: what it ran stops
        self.requests.put(None)

    def send(self, message: dict) -> None:
        with self.write_lock, contextlib.suppress(OSError):  # gone: the reader cancels
            self.conn.sendall((json.dumps(message) + "\n").encode())

    def serve(self) -> None:
        while True:
            request = self.requests.get()
            if request is None:
                return
            if "hello" in request:
                self.send({"pid": os.getpid(), "served": self.served, "cluster": _cluster()})
            elif "run" in request:
                self._run(request)

    def _run(self, request: dict) -> None:
        from florwb_engine.replay.ray_executor import RayOptions, SegmentJob, drive

        if self.closed:
            return
        jobs = [SegmentJob(**j) for j in request["run"]]
        options = RayOptions(**request["options"])

        def report(i: int, done: int, state: SegmentState, returncode: int | None) -> None:
            self.send({"report": [i, done, state, returncode]})

        try:
            shipped = drive(jobs, int(request["workers"]), options, report, self.cancel)
        except Exception as exc:
            traceback.print_exc()
            self.send({"error": (str(exc).strip().splitlines() or [type(exc).__name__])[0]})
            return
        self.send({"done": {k: dataclasses.asdict(s) for k, s in shipped.items()}})


def _cluster() -> dict[str, Any]:
    """The connected cluster's facts for the command's plan (ray_executor.Cluster)."""
    from florwb_engine.replay.ray_executor import Cluster

    found = Cluster.here()
    return {"cpus": found.cpus, "largest": list(found.largest), "warm": found.warm}
