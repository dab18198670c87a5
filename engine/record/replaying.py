"""The runtime side of replay: which iterations of the old script run, and with what state.

A replay worker is the old version of the training script (with the new log statements
propagated into it) started with a ReplaySpec. `flor.arg` answers with the run's recorded
values; the main loop runs only the iterations of its segment, starting from the
checkpoint of the iteration before the first; in OUTER mode the inner loops of an
iteration with a checkpoint are skipped and the state they left is restored from it (a
checkpoint holds the state at its iteration's inner loops' end: Checkpointer). When the
segment is done, or the old script leaves the main loop early, the process ends before any
code after the main loop runs, so the old script never writes its usual outputs.
"""

from __future__ import annotations

import contextlib
import dis
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from florwb_engine.contract.replay_spec import OUTER, PREFIX, ReplaySpec
from florwb_engine.record import loop_state, ranks
from florwb_engine.record.checkpoint import (
    AFTER_INNER,
    copy_to_host,
    load,
    restore,
    restore_rng,
)
from florwb_engine.record.restore_saves import restore_own_saves

KEEP_BYTES = 256 << 20
PROGRESS_EVERY_S = 0.1


class Replayer:
    def __init__(
        self,
        spec: ReplaySpec,
        objects: Callable[[], dict[str, Any]],
        rank: ranks.Rank | None = None,
    ) -> None:
        self.spec = spec
        self.rank = rank  # a DDP rank: state from rank 0's checkpoint, RNG from its own
        self._objects = objects  # the registered checkpoint objects, looked up when needed
        self.current: int | None = None  # the main-loop iteration being replayed
        # True while the iteration before the segment's first is replayed only for its
        # tail: what it logs and times is dropped (api.py), it is no progress
        self.silent = False
        self._kept: tuple[int, dict] | None = None  # the last checkpoint read
        self._kept_big = False
        # Checkpoints taken at their iteration's end (written before AFTER_INNER existed,
        # or the script's own torch.save): restored at iteration starts, as they were
        # taken. None until a checkpoint was read.
        self._iteration_end: bool | None = None
        self._inner_started = 0  # inner loops of the current iteration begun so far
        self._skip: float | None = None  # how many of them are skipped (None: not known)
        self._skip_inner = set(spec.skip_inner)
        # what the skipped inner loops left, by their order in the iteration (loop_state.LEFT)
        self._left: dict[str, dict] = {}
        self._total = spec.last - spec.first + 1
        self._reported = 0.0
        self.done = 0
        self.on_finish: Callable[[], None] = lambda: None
        # for `florwb replay --profile` (replay/profile.py): the first florwb call, and the
        # seconds spent reading and restoring checkpoints
        self.started_at = time.time()
        self.restore_s = 0.0
        self.loads = 0

    def is_main(self, name: str, depth: int) -> bool:
        return depth == 0 and self.current is None and name == (self.spec.main_loop or name)

    def main_items(self, iterable: Iterable[Any]) -> Iterator[tuple[int, Any]]:
        """The segment's iterations [first, last]. A checkpoint taken at its iteration's
        inner loops' end (FLOR's SkipBlock) holds the state before that iteration's tail,
        so a segment starting at f > 0 first replays f - 1 silently: restored at its inner
        loops, its tail run. Within the segment the state carries over from iteration to
        iteration; OUTER mode restores each skipped iteration's checkpoint at its first
        inner loop, so the tail after the inner loops runs once, as it did."""
        spec = self.spec
        if spec.mode == PREFIX:
            self.finish()
        self._total = spec.last - spec.first + 1
        self._progress(self._total)
        tail_replayed = False
        for i, item in enumerate(iterable):
            if i > spec.last:
                break
            if i < spec.first:
                if i == spec.first - 1 and self._restores_inside(i):
                    self._begin(i, silent=True)
                    self._carried_at_top(i)
                    yield i, item
                    if self._skip is None:  # never restored: the state would be wrong
                        raise RuntimeError(
                            f"florwb: replaying {spec.main_loop} {i} to reach {spec.first} "
                            "ran no inner loop, where its checkpoint is restored"
                        )
                    tail_replayed = True
                continue
            if i == spec.first and not tail_replayed:
                self._restore(i - 1)
            elif i > spec.first and spec.mode == OUTER and self._iteration_end:
                self._restore(i - 1)
            self._begin(i, silent=False)
            yield i, item
            self.done += 1
            self._progress(self._total)
        self.current = None
        self.finish()

    def _begin(self, iteration: int, *, silent: bool) -> None:
        self.current = iteration
        self.silent = silent
        self._inner_started = 0
        self._skip = None

    def inner_items(
        self, iterable: Iterable[Any], depth: int = 1, frame: FrameType | None = None
    ) -> Iterator[tuple[int, Any]]:
        """Inner loops run, except in an iteration restored at its inner loops: there the
        first `after_inner` loops nested directly in the main loop's body are skipped (all
        of them for a checkpoint taken at the iteration's end) and the checkpoint is
        restored where the first would have begun. Each skipped loop's `frame` (the one
        running it: the main loop's, or a helper's) gets the names that loop left, as the
        checkpoint memoized them."""
        i = self.current
        if i is None or depth != 1:
            return enumerate(iterable)
        self._inner_started += 1
        if self.silent or (self.spec.mode == OUTER and i in self._skip_inner):
            if self._skip is None:
                self._skip = self._restore_at_inner(i)
            if self._inner_started <= self._skip:
                if frame is not None:
                    loop_state.restore_left(frame, self._left.get(str(self._inner_started)))
                return iter(())
        return enumerate(iterable)

    def timings(self, extend: Callable[[tuple], None]) -> Callable[[tuple], None]:
        """`extend` for iteration timings, dropping those of a silent iteration."""

        def keep(record: tuple) -> None:
            if not self.silent:
                extend(record)

        return keep

    def loop_left(self, frame: FrameType | None) -> None:
        """The old script left the main loop inside an iteration. Left through `break` or
        `return` (the loop's frame `frame` is popping the loop's iterator), the replay ends
        here: code after the loop must not run. An exception passing through goes on and
        ends the worker as it ended the run, loudly."""
        if self.current is not None and not self.silent:
            self.done += 1
            self._progress(self._total)
        self.current = None
        if frame is not None and _leaving_loop(frame):
            self.finish()

    def _restores_inside(self, iteration: int) -> bool:
        """Whether `iteration`'s checkpoint holds the state at its inner loops' end (so
        the segment after it replays its tail first)."""
        saved = self._load(iteration)
        return saved is not None and saved.get(AFTER_INNER, 0) > 0

    def _carried_at_top(self, iteration: int) -> None:
        """Before the silent iteration's top runs, its loop-carried names as its checkpoint
        holds them: the code before its inner loops reads what earlier iterations left
        (`prev + 1 if epoch else 0`), which this process never ran. Names that code or
        the inner loops change get their checkpoint values again where it is restored;
        runs whose top reads what the inner loops assign are re-executed from their start
        (planning: LoopState.before_inner). A copy: the kept checkpoint is restored again."""
        saved = self._load(iteration)
        carried = saved.get(loop_state.CARRIED) if saved is not None else None
        if carried:
            loop_state.restore({loop_state.CARRIED: copy_to_host(carried)})

    def _restore_at_inner(self, iteration: int) -> float:
        """Restore `iteration`'s checkpoint at its first inner loop; how many inner loops
        it stands for (0: it was taken at the iteration's end after inner loops had run,
        so they are run instead)."""
        saved = self._load(iteration)
        self._left = {}
        if saved is None:  # the script's own torch.save only: taken at the iteration's end
            self._restore(iteration)
            return math.inf
        self._left = saved.get(loop_state.LEFT) or {}
        after = saved.get(AFTER_INNER)
        if after == 0:
            return 0
        # with the script's own torch.save, whose objects flor.checkpointing may not hold
        # (taken where the script saves: objects it holds alone that the rest of the body
        # changes before that save would be changed twice)
        self._restore(iteration)
        return math.inf if after is None else after

    def _load(self, iteration: int) -> dict | None:
        """flor.checkpointing's checkpoint of `iteration` (None without one). A small one is
        kept in memory: it is read at a segment's start and restored right after."""
        path = self.spec.checkpoint(iteration) if iteration >= 0 else None
        if path is None:
            if self.spec.mirrored_checkpoint(iteration) is not None:
                self._iteration_end = True
            return None
        if self._kept is not None and self._kept[0] == iteration:
            return self._kept[1]
        with self._restoring():
            saved = load(path)
        self.loads += 1
        # a big one only until it is restored: memory for a second copy of the state
        self._kept = (iteration, saved)
        self._kept_big = path.stat().st_size > KEEP_BYTES
        self._iteration_end = AFTER_INNER not in saved
        return saved

    def _restore(self, iteration: int) -> None:
        """Restore `iteration`'s checkpoints (flor.checkpointing's and the script's own
        torch.save) as the state at the start of the next iteration."""
        own = self.spec.mirrored_checkpoint(iteration) if iteration >= 0 else None
        saved = self._load(iteration)
        if own is not None:  # the script's own torch.save (flor.checkpointing's wins)
            with self._restoring():
                restore_own_saves(own, self.spec.saved_map, self._objects(), rng=saved is None)
            self.loads += 1
        if saved is not None:
            with self._restoring():
                self._apply(iteration, saved)

    @contextlib.contextmanager
    def _restoring(self) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.restore_s += time.perf_counter() - t

    def _apply(self, iteration: int, saved: dict) -> None:
        """Put a checkpoint into the live objects. From a copy: optimizers keep the tensors
        they are given and update them in place, and the kept one may be restored again."""
        if self._kept is not None and self._kept[0] == iteration:
            if self._kept_big:
                self._kept = None
            else:
                saved = copy_to_host(saved)
        restore(self._objects(), saved)
        # the loop-carried names as they were at the moment the checkpoint was taken,
        # which is the moment of the replay it is restored at (an iteration's start, or
        # where its inner loops begin for one taken at their end)
        loop_state.restore(saved)
        path = self.spec.checkpoint(iteration)
        if path is not None and self.rank is not None and self.rank.rank > 0:
            self._restore_rank_rng(path)

    def _restore_rank_rng(self, path: Path) -> None:
        own = Path(ranks.rank_file(str(path), self.rank))
        try:
            saved = load(own)
            restore_rng(saved["rng"])
            loop_state.restore(saved)  # this rank's own batch, counters...: not rank 0's
            self._left = saved.get(loop_state.LEFT) or {}  # what its own inner loops left
        except (OSError, KeyError, RuntimeError) as exc:  # replay goes on; fidelity checks
            self._left = {}  # never rank 0's values in this rank's frames
            print(f"florwb: rank RNG states not restored from {own.name}: {exc}", file=sys.stderr)

    def _progress(self, total: int, profile: dict | None = None) -> None:
        if not self.spec.progress_file or (self.rank is not None and self.rank.rank != 0):
            return  # one progress file per segment: rank 0 writes it
        now = time.monotonic()
        if profile is None and 0 < self.done < total and now - self._reported < PROGRESS_EVERY_S:
            return  # the executor looks 5 times a second; a file per iteration is too many
        self._reported = now
        path = Path(self.spec.progress_file)
        tmp = path.with_name(path.name + ".tmp")
        report: dict[str, Any] = {"done": self.done, "total": total}
        if profile is not None:
            report["profile"] = profile
        tmp.write_text(json.dumps(report))
        os.replace(tmp, path)

    def finish(self) -> None:
        """End the replay here: nothing after the main loop of the old script may run.
        Its times go into the progress file last, for the executor's profile."""
        ended = time.time()
        self.on_finish()
        with contextlib.suppress(OSError):  # only the profile is lost; the rows are written
            self._progress(
                self._total,
                {
                    "run_start": self.started_at,
                    "end": ended,
                    "restore_s": self.restore_s,
                    "loads": self.loads,
                },
            )
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed or broken stream
                stream.flush()
        os._exit(0)


_POP_TOP = dis.opmap["POP_TOP"]


def _leaving_loop(frame: FrameType) -> bool:
    """Whether `frame` closes a for loop's iterator by leaving the loop (`break` and
    `return` pop it: POP_TOP), not by an exception unwinding the frame (whose current
    instruction is the one that raised)."""
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] == _POP_TOP
