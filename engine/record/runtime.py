"""One recorded run: its identity, its journal, and the thread that flushes it.

A run starts at the first florwb call in a process and ends at `commit()` or interpreter
exit. The hot path (`log`, `loop`) only extends the module-level buffers below;
this module drains them every FLUSH_INTERVAL_S from a background thread. The buffers are
flat lists grown by `extend((a, b, c))`: one atomic list operation per record that leaves
no per-record object alive. The flusher packs the first n items and then runs
`del buf[:n]`, also atomic under the GIL: the training thread needs no lock, never loses a
record, and records are never split (n is always a multiple of 3).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import marshal
import os
import secrets
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from florwb_engine import journal_events as ev
from florwb_engine import processes, settings
from florwb_engine import project as projects
from florwb_engine.contract.replay_spec import ENV as REPLAY_ENV
from florwb_engine.contract.replay_spec import ReplaySpec
from florwb_engine.journal import (
    SUFFIX,
    JournalWriter,
    pack_logs,
    pack_timings,
    replay_journal_name,
)
from florwb_engine.record import args as cli_args
from florwb_engine.record import capture, file_access, notebook, ranks, save_mirror, start_rng
from florwb_engine.record.checkpoint import DEFAULT_BUDGET, Checkpointer
from florwb_engine.record.context import RunContext
from florwb_engine.record.replaying import Replayer
from florwb_engine.record.system import SystemSampler
from florwb_engine.record.values import REPLACED, encode, name_text, read_staged

RECORDED = "record"
# The events that say which run a journal holds and how it was started: a journal made
# anew after the first was deleted starts with them again.
_NAMING = frozenset({ev.Start.kind, ev.Version.kind, ev.VersionError.kind, ev.Arg.kind})

FLUSH_INTERVAL_S = 0.05
RETRY_INTERVAL_S = 0.5  # between tries to write a journal that failed (disk full...)
FINAL_RETRY_S = settings.read(settings.FINAL_RETRY_S)
BUFFER_LIMIT = int(settings.read(settings.BUFFER_MB) * (1 << 20))

LOGS: list = []  # name, value, ctx_id, name, value, ctx_id, ...
TIMINGS: list = []  # ctx_id, wait_s, iter_s, ...
EVENTS: list = []


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def main_script() -> Path | None:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return Path(path).resolve() if path else None


class Run:
    checkpointer: Checkpointer
    _start_rng_pending: dict | None = None  # start RNG states the disk refused so far

    def __init__(self, project: Path | None = None) -> None:
        start_states = start_rng.capture()  # first: before anything here could draw
        script = main_script()
        self.project = project or projects.find_project(script.parent if script else None)
        self.store = projects.store_dir(self.project)
        self.replayer: Replayer | None = None
        self.rank = ranks.detect()  # one rank of a torchrun / mp.spawn launch (ranks.py)
        spec_path = os.environ.get(REPLAY_ENV)
        if spec_path:  # a replay worker: the run is the recorded one, the rows a new source
            spec = ReplaySpec.load(Path(spec_path))
            self.run_id = spec.run_id
            self.source = spec.replay_id
            journal_name = replay_journal_name(spec.replay_id, spec.segment)
            self.replayer = Replayer(spec, lambda: self.checkpointer.objects, self.rank)
            _restore_start_rng(ranks.rank_file(spec.start_rng, self.rank))
            self.replayer.on_finish = lambda: self.finish("finished")
        else:
            self.run_id = ranks.run_id(self.rank) if self.rank else new_run_id()
            self.source = RECORDED
            journal_name = f"{self.run_id}{SUFFIX}"
        journal_name = ranks.journal_name(journal_name.removesuffix(SUFFIX), self.rank, SUFFIX)
        self.script = (
            _relative(script, self.project) if script else notebook.script_name(self.project)
        )
        self.journal = JournalWriter(projects.journal_dir(self.project) / journal_name)
        self.checkpointer = Checkpointer(
            projects.checkpoint_dir(self.project) / self.run_id, EVENTS.append, DEFAULT_BUDGET
        )
        self._rng_folder = ranks.rank_folder(self.checkpointer.folder, self.rank)
        if self._rng_folder != self.checkpointer.folder:  # rank > 0: rank 0 saves the state
            self.checkpointer.rng_only = self._rng_folder
        if self.replayer is None:
            self._save_start_rng(start_states)
        self.args: dict[str, object] = {}
        self.exception: BaseException | None = None
        self.finished = False
        self.ended = False  # its end event is written (finish, or a stopping signal)
        self._flush_lock = threading.Lock()
        self._buffer = PendingChunks(BUFFER_LIMIT)
        self._values_packed = 0  # values handed to the journal so far
        self._naming_events: list[dict] = []  # what a new journal starts with (_NAMING)
        self._open_loops: dict[str, dict] = {}  # and the loop entries its rows may refer to
        self._write_failed = False
        self._said_write_failed = False
        self._said_replaced = False
        self._stop = threading.Event()
        self.context = RunContext()  # device, versions, peak memory, energy (context.py)
        # CPU, memory and GPU over time, sampled on the flusher's thread (system.py)
        self.system = SystemSampler(self.rank.rank if self.rank else None, self.context.nvml_meter)
        self.system.off = self.system.off or self.replayer is not None
        self._write_start_event()
        self._flusher = threading.Thread(target=self._flush_loop, name="florwb-flush", daemon=True)
        self._flusher.start()
        self._snapshotter = threading.Thread(target=self._snapshot, name="florwb-snap", daemon=True)
        if self.replayer is None and (self.rank is None or self.rank.rank == 0):
            self._snapshotter.start()  # one code version per launch: rank 0 snapshots it
        if self.replayer is None:
            capture.install()  # printed and logged lines, teed (capture.py)
            # which project files it reads and which it only writes (file_access.py)
            file_access.install(self.project, [self.store, self.project / ".git"])

    def _save_start_rng(self, states: dict) -> None:
        """Written at once (tens of KiB) so a replay of a run killed early still has them.
        When the disk refuses, they are kept and written again with the journal (the
        disk-full warning already says it once); only what is still unsaved at the end of
        the run is reported."""
        try:
            start_rng.save(states, self._rng_folder)
        except OSError:
            self._start_rng_pending = states

    def _retry_start_rng(self) -> None:
        if self._start_rng_pending is not None:
            with contextlib.suppress(OSError):  # still refused: kept, said at the end
                start_rng.save(self._start_rng_pending, self._rng_folder)
                self._start_rng_pending = None

    def _write_start_event(self) -> None:
        pid = os.getpid()
        # The run's length is measured on the monotonic clock: the wall clock may step
        # back (NTP, a VM resumed) and an end stamped before the start read as negative.
        self._started_monotonic = time.monotonic()
        EVENTS.append(
            ev.Start(
                source=self.source,
                run_id=self.run_id,
                script=self.script,
                argv=list(cli_args.ORIGINAL_ARGV),
                cwd=_relative(Path(os.getcwd()), self.project),  # replays map it
                host=socket.gethostname(),
                pid=pid,
                pid_ticks=processes.start_ticks(pid),
                python=sys.version.split()[0],
                time=time.time(),
                context=self.context.at_start(),
                rank=self.rank.to_event() if self.rank else None,
            ).to_dict()
        )
        self.try_flush()  # visible to readers at once, even if the process dies next

    def _snapshot(self) -> None:
        try:
            from florwb_engine import versions

            snap = versions.snapshot(self.project, self.store)
            if snap.in_git:
                versions.ensure_excluded(self.project)
        except Exception as exc:  # recording must go on without a code version
            EVENTS.append(ev.VersionError(str(exc)).to_dict())
            return
        EVENTS.append(
            ev.Version(
                version=snap.version,
                n_files=snap.n_files,
                n_bytes=snap.n_bytes,
                skipped=[(s.path, s.size, s.reason) for s in snap.skipped],
                inputs=_inputs(self.project, snap.skipped),
                git_head=snap.git_head,
                git_branch=snap.git_branch,
                git_dirty=snap.git_dirty,
            ).to_dict()
        )
        _report_skipped_once(self.store, snap.skipped)

    def flush(self) -> None:
        """Pack what the buffers hold and write it with whatever still waits; OSError when
        the journal cannot be written (the packed chunks wait in memory for the next try)."""
        with self._flush_lock:
            capture.drain(EVENTS)
            file_access.drain(EVENTS)
            self.system.drain(EVENTS)
            # Pack straight from the buffers, then drop what was packed: the training thread
            # only appends, so the first n items stay put meanwhile.
            n_logs, n_timings, n_events = len(LOGS), len(TIMINGS), len(EVENTS)
            read_staged(LOGS, 1, n_logs, 3)  # device scalars copied at flor.log: read them here
            if n_logs or n_timings or n_events:
                try:
                    payload = self._pack(n_logs, n_timings, n_events)
                except Exception as exc:  # never the flusher's end: count the batch as lost
                    why = f"batch not packed ({type(exc).__name__}: {exc})"[:200]
                    REPLACED.add("lost", why, n_logs // 3)
                    payload = (None, None, [])
                del LOGS[:n_logs], TIMINGS[:n_timings], EVENTS[:n_events]
                self._buffer.add(payload, n_logs // 3)
                self._values_packed += n_logs // 3
            issues = REPLACED.take_new() + self._buffer.take_lost()
            if issues:
                self._buffer.add((None, None, [ev.Issues(issues).to_dict()]), 0)
                self._say_replaced_once(issues)
            if self.journal.gone():
                self._journal_deleted()
            self._buffer.write(self.journal)
        self._retry_start_rng()
        if self._write_failed:  # written again: say what it cost, once
            self._write_failed = False
            lost = self._buffer.lost_total
            print(
                "florwb: journal written again"
                + (f"; {lost} values were lost meanwhile" if lost else "; nothing lost"),
                file=sys.stderr,
            )

    def _journal_deleted(self) -> None:
        """The journal was deleted under the run (a script that removes `.florwb/`): what it
        held is gone, said once in one line; the run goes on in a new journal that starts
        again with what names it (start, version, args, the loops it is in) and counts
        what was lost."""
        lost = self._values_packed - self._buffer.pending_values
        print(
            f"florwb: run {self.run_id}'s journal was deleted while it recorded "
            f"({self.journal.path}): {lost} values written before are lost unless a florwb "
            "reader read them already; "
            "recording goes on in a new journal",
            file=sys.stderr,
        )
        self.journal.restart()
        issue = ev.Issues([["lost", ev.JOURNAL_DELETED, lost]]).to_dict()
        loops = sorted(self._open_loops.values(), key=lambda e: e.get("entry", 0))
        self._buffer.add_first((None, None, [*self._naming_events, *loops, issue]))

    def _pack(self, n_logs: int, n_timings: int, n_events: int) -> tuple:
        events = EVENTS[:n_events]
        for e in events:
            if e.get("kind") in _NAMING:
                self._naming_events.append(e)
            elif e.get("kind") == ev.Loop.kind:  # the latest entry of each loop is the open one
                self._open_loops[repr(e.get("names"))] = e
        timings = pack_timings(TIMINGS, n_timings)
        logs = None
        if n_logs:
            # One C pass over the names (a few distinct strings): anything else takes the
            # slow path. Values are not checked here; what marshal refuses falls back too,
            # and what DuckDB refuses (lone surrogates) ingestion keeps as text and says.
            names = LOGS[0:n_logs:3]
            if _plain_names(names):
                with contextlib.suppress(ValueError, TypeError):  # a value marshal refuses
                    logs = pack_logs(LOGS, n_logs, names)
            if logs is None:
                logs = pack_logs(_sanitized(LOGS[:n_logs]))
        try:
            marshal.dumps(events)
        except (ValueError, TypeError):  # an event value marshal refuses: as text
            events = [{str(k): encode(v) for k, v in e.items()} for e in events]
        return logs, timings, events

    def _say_replaced_once(self, issues: list[list]) -> None:
        said = [i for i in issues if i[0] in ("replaced", "dropped")]
        if self._said_replaced or not said:
            return
        kind, detail, _n = said[0]
        self._said_replaced = True
        print(
            f"florwb: some logged values or names cannot be stored as they are; {kind}: "
            f"{detail} (`florwb runs` counts them)",
            file=sys.stderr,
        )

    def try_flush(self) -> bool:
        """Flush; on a write failure say it once and keep buffering. True when written."""
        try:
            self.flush()
        except OSError as exc:
            if not self._write_failed:
                self._write_failed = True
                if not self._said_write_failed:
                    self._said_write_failed = True
                    print(
                        f"florwb: cannot write the run's journal ({exc.strerror or exc}); "
                        f"keeping values in memory (up to {self._buffer.limit >> 20} MiB) "
                        "and retrying",
                        file=sys.stderr,
                    )
            return False
        return True

    def _flush_loop(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL_S):
            if not self.try_flush():
                self._stop.wait(RETRY_INTERVAL_S)

    def finish(self, status: str | None = None) -> None:
        if self.finished:
            return
        self.finished = True
        self.checkpointer.close()
        if self._snapshotter.is_alive():
            self._snapshotter.join(timeout=60)
        exc = self.exception
        if status is None:
            if exc is None:
                status = "finished"
            elif isinstance(exc, KeyboardInterrupt):
                status = "interrupted"
            else:
                status = "failed"
        EVENTS.extend(notebook.final_events(self))  # a notebook's executed cells as its code
        unused = sorted(set(cli_args.CLI_KWARGS) - set(self.args))
        if unused and self.replayer is None:
            print(
                f"florwb: --kwargs not used by any flor.arg: {', '.join(unused)}", file=sys.stderr
            )
        with self._flush_lock:  # the last lines go before the end event
            capture.uninstall()
            capture.drain(EVENTS, final=True)
            file_access.drain(EVENTS)
            file_access.uninstall()
        EVENTS.append(
            ev.End(
                status=status,
                exception=None if exc is None else type(exc).__name__,
                message=None if exc is None else str(exc)[:500],
                time=time.time(),
                elapsed_s=time.monotonic() - self._started_monotonic,
                context=self.context.at_end_or_error(),
                world_size=ranks.end_fields(self.rank).get("world_size"),
            ).to_dict()
        )
        self.ended = True
        self._stop.set()
        self._flusher.join()
        self._last_flush()
        self.journal.close()

    def stop_event(self, signame: str) -> dict:
        """The end of a process stopped by a signal it does not survive: no end-of-run
        readings (the process has moments left), only when and by what."""
        return ev.End(
            status="killed",
            signal=signame,
            message=f"stopped by {signame}",
            time=time.time(),
            elapsed_s=time.monotonic() - self._started_monotonic,
            world_size=ranks.end_fields(self.rank).get("world_size"),
        ).to_dict()

    def _last_flush(self) -> None:
        """Write everything left, retrying a little while a full disk frees up; then say
        what could not be written, in one line (never a traceback at exit)."""
        deadline = time.monotonic() + FINAL_RETRY_S
        while not self.try_flush():
            if time.monotonic() > deadline:
                lost = self._buffer.pending_values + self._buffer.lost_total
                print(
                    f"florwb: run {self.run_id} ended without its journal written: "
                    f"{lost} values lost" + self._start_rng_unsaved(),
                    file=sys.stderr,
                )
                return
            time.sleep(RETRY_INTERVAL_S / 4)
        if unsaved := self._start_rng_unsaved():
            print(f"florwb: run {self.run_id}{unsaved}", file=sys.stderr)

    def _start_rng_unsaved(self) -> str:
        if self.replayer is not None or self._start_rng_pending is None:
            return ""
        return (
            "; its RNG states at run start were not saved, so a replay may not draw the "
            "same random numbers"
        )
        with contextlib.suppress(OSError):  # durability: a later power cut keeps the run
            self.journal.sync()


def _restore_start_rng(path: str) -> None:
    """Put back the recorded run's RNG states at this, the replay's first florwb call (the
    point where the run captured them). A run recorded before they were saved has none."""
    if not path or not os.path.exists(path):
        return
    try:
        missing = start_rng.restore(start_rng.load(Path(path)))
    except (OSError, ValueError, KeyError, TypeError) as exc:  # replay goes on, checked
        print(f"florwb: RNG states at run start not restored: {exc}", file=sys.stderr)
        return
    if missing:
        print(
            f"florwb: RNG states at run start not restored for {', '.join(missing)} "
            "(not imported or initialised yet at the first florwb call)",
            file=sys.stderr,
        )


def _plain_names(names: list) -> bool:
    """True when every name is a string DuckDB takes as it is."""
    try:
        distinct = set(names)
    except TypeError:  # an unhashable name
        return False
    for name in distinct:
        if type(name) is not str:
            return False
        if not name.isascii():
            try:
                name.encode()
            except UnicodeEncodeError:
                return False
    return True


def _sanitized(logs: list) -> list:
    """Records with string names and values marshal and DuckDB take; what was changed or
    dropped is counted in REPLACED."""
    clean: list = []
    for name, value, ctx in zip(logs[0::3], logs[1::3], logs[2::3]):
        text = name_text(name)
        if text is None:
            continue
        if not text.isascii():
            try:
                text.encode()
            except UnicodeEncodeError:
                REPLACED.add("replaced", "log name with lone surrogates kept escaped")
                text = text.encode("utf-8", "backslashreplace").decode()
        if type(value) is str and not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError:
                REPLACED.add("replaced", "string with lone surrogates kept escaped")
                value = ("object", "str: " + value.encode("utf-8", "backslashreplace").decode())
        try:
            marshal.dumps(value)
        except (ValueError, TypeError):
            value = encode(value)
        clean.extend((text, value, ctx))
    return clean


class PendingChunks:
    """Packed chunks not yet in the journal, in order, within a memory bound.

    While the journal cannot be written (disk full, read-only folder), chunks wait here;
    past `limit` bytes the log and timing columns of new chunks are dropped and counted
    (events, small, are kept: the run's start, args and end still reach the journal).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: collections.deque = collections.deque()
        self.bytes = 0
        self.pending_values = 0
        self.lost_total = 0
        self._lost_new = 0

    def add(self, payload: tuple, n_values: int) -> None:
        logs, timings, events = payload
        size = sum(map(len, (*(logs or ()), *(timings or ()))))
        if self.chunks and self.bytes + size > self.limit:
            self._lost_new += n_values
            self.lost_total += n_values
            payload, size, n_values = (None, None, events), 0, 0
        self.chunks.append((payload, size, n_values))
        self.bytes += size
        self.pending_values += n_values

    def take_lost(self) -> list[list]:
        if not self._lost_new:
            return []
        lost, self._lost_new = self._lost_new, 0
        return [["lost", "journal could not be written (memory buffer full)", lost]]

    def add_first(self, payload: tuple) -> None:
        """A chunk that must go before every waiting one (a new journal's start)."""
        self.chunks.appendleft((payload, 0, 0))

    def write(self, writer: JournalWriter) -> None:
        while self.chunks:
            payload, size, n_values = self.chunks[0]
            writer.append(payload)  # OSError: this and later chunks stay for the next try
            self.chunks.popleft()
            self.bytes -= size
            self.pending_values -= n_values


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _inputs(project: Path, skipped) -> list[list]:
    """Fingerprints of the left-out files, so a replay can read the run's bytes of them."""
    from florwb_engine.versions.inputs import fingerprint

    return [seen.to_json() for seen in fingerprint(project, [s.path for s in skipped])]


def _report_skipped_once(store: Path, skipped) -> None:
    """Say which files were left out of the code snapshot, once per set of files."""
    if not skipped:
        return
    marker = store / "snapshot-skipped.txt"
    listing = "\n".join(sorted(f"{s.path}\t{s.reason}" for s in skipped))
    with contextlib.suppress(OSError):  # no marker: the warning shows again, that is all
        if marker.exists() and marker.read_text() == listing:
            return
        marker.write_text(listing)
    names = ", ".join(f"{s.path} ({s.reason})" for s in skipped[:3])
    more = f" and {len(skipped) - 3} more" if len(skipped) > 3 else ""
    print(f"florwb: not in the code snapshot: {names}{more}", file=sys.stderr)


# --- the process's current run -------------------------------------------------------

_current: Run | None = None
_disabled = False
_lock = threading.Lock()


def current() -> Run | None:
    return _current


def disabled() -> bool:
    return _disabled


def ensure_run() -> Run | None:
    """The current run, started on first use; None in a forked child (it does not record)."""
    global _current, _disabled
    if _current is not None or _disabled:
        return _current
    if processes.is_multiprocessing_child() and not ranks.is_spawned_rank():
        # not a run of its own; a torch.multiprocessing.spawn child re-importing the
        # script is not one yet: its rank function, called next, records (ranks.py)
        _disabled = not ranks.may_become_rank()
        return None
    with _lock:
        if _current is None:
            _current = Run()
            _install_hooks()
            save_mirror.attach(_current)  # the script's own torch.save become checkpoints
    return _current


def end_run(status: str | None = None) -> None:
    global _current
    run = _current
    save_mirror.detach()
    if run is not None:
        run.finish(status)
        _current = None


_hooks_installed = False


def _install_hooks() -> None:
    global _hooks_installed
    if _hooks_installed:
        return
    _hooks_installed = True
    previous = sys.excepthook

    def excepthook(kind, value, tb):
        if _current is not None:
            _current.exception = value
        previous(kind, value, tb)

    sys.excepthook = excepthook
    atexit.register(end_run)
    os.register_at_fork(after_in_child=_disable_in_child)
    _flush_on_sigterm()


def _flush_on_sigterm() -> None:
    """Write what the buffers hold when the process is told to stop (SIGTERM), then stop.

    A launcher stops the other workers with SIGTERM when one dies (torchrun, Slurm, k8s);
    by default that ends the process at once, and values logged since the flusher last ran
    were lost, however old a starved flusher let them get. Only the default action is
    replaced (a script's or framework's own handler is left alone), and the process still
    ends by SIGTERM, as its launcher expects; without an end event the run reads as killed."""
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread
    with contextlib.suppress(ValueError, OSError):
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, _frame: object) -> None:
    run = _current
    ends_here = signal.getsignal(signum) is _on_sigterm
    if run is not None and ends_here and not run.ended:
        # The process stops now: its end says it was stopped from outside (a launcher
        # stopping the other ranks once one died), so the rank that failed is told apart.
        # Also while it was finishing: finish() does not resume to write its own end.
        run.finished = run.ended = True
        EVENTS.append(run.stop_event(signal.Signals(signum).name))
    # The handler runs in the main thread, which may itself be inside a flush (holding its
    # lock): then that flush is left as it is rather than waited for forever.
    if run is not None and run._flush_lock.acquire(timeout=1.0):
        run._flush_lock.release()
        try:
            run.try_flush()
        except Exception as exc:  # noqa: BLE001 - the process is stopping either way: say so
            print(
                f"florwb: values logged since the last flush were lost at SIGTERM ({exc!r})",
                file=sys.stderr,
            )
    if not ends_here:
        return  # a framework's handler calls this one in its chain: it decides what stops
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _disable_in_child() -> None:
    """DataLoader workers and other forks must not write into the parent's journal."""
    global _current, _disabled
    _current = None
    _disabled = True
    capture.disable_in_child()
    file_access.disable_in_child()
    for buf in (LOGS, TIMINGS, EVENTS):
        buf.clear()
