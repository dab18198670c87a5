"""The runtime side of replay: which iterations of the old script run, and with what state.

A replay worker is the old version of the training script (with the new log statements
propagated into it) started with a ReplaySpec. `flor.arg` answers with the run's recorded
values; the main loop runs only the iterations of its segment, each starting from the
checkpoint at the end of the previous iteration where one exists; in OUTER mode the inner
loops of an iteration are skipped and their end state is restored from the checkpoint of
that iteration. When the segment is done the process ends before any code after the main
loop runs, so the old script never writes its usual outputs.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from florwb_engine.record import loop_state, ranks
from florwb_engine.record.checkpoint import copy_to_host, load, restore, restore_rng
from florwb_engine.record.restore_saves import restore_own_saves
from florwb_engine.replay.spec import OUTER, PREFIX, ReplaySpec

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
        self._restored: int | None = None
        self._kept: tuple[int, dict] | None = None  # the last checkpoint read, if small
        self._reported = 0.0
        self.done = 0
        self.on_finish: Callable[[], None] = lambda: None

    def is_main(self, name: str, depth: int) -> bool:
        return depth == 0 and self.current is None and name == (self.spec.main_loop or name)

    def main_items(self, iterable: Iterable[Any]) -> Iterator[tuple[int, Any]]:
        spec = self.spec
        if spec.mode == PREFIX:
            self.finish()
        total = spec.last - spec.first + 1
        self._progress(total)
        for i, item in enumerate(iterable):
            if i < spec.first:
                continue
            if i > spec.last:
                break
            if spec.mode == OUTER or i == spec.first:
                self._restore(i - 1, carried=True)
            self.current = i
            yield i, item
            self.done += 1
            self._progress(total)
        self.current = None
        self.finish()

    def inner_items(self, iterable: Iterable[Any]) -> Iterator[tuple[int, Any]]:
        if self.current is not None and self.current in self.spec.skip_inner:
            if self._restored != self.current:
                self._restore(self.current)
            return iter(())
        return enumerate(iterable)

    def _restore(self, iteration: int, *, carried: bool = False) -> None:
        """In OUTER mode each checkpoint is restored twice (end of iteration i's inner loops,
        then start of i+1), so a small one is kept in memory after the first read. Restores
        take a copy: optimizers keep the tensors they are given and update them in place.
        The loop-carried names (`carried`) go back only where an iteration starts: in the
        middle of one they hold the values of its end."""
        path = self.spec.checkpoint(iteration) if iteration >= 0 else None
        own = self.spec.mirrored_checkpoint(iteration) if iteration >= 0 else None
        if own is not None:  # the script's own torch.save (flor.checkpointing's wins)
            restore_own_saves(own, self.spec.saved_map, self._objects(), rng=path is None)
            self._restored = iteration
        if path is None:
            return
        if self._kept is not None and self._kept[0] == iteration:
            saved = copy_to_host(self._kept[1])
        else:
            saved = load(path)
            self._kept = None
            if path.stat().st_size <= KEEP_BYTES:
                self._kept = (iteration, saved)
                saved = copy_to_host(saved)
        restore(self._objects(), saved)
        if carried:
            loop_state.restore(saved)
        if self.rank is not None and self.rank.rank > 0:
            self._restore_rank_rng(path, carried)
        self._restored = iteration

    def _restore_rank_rng(self, path: Path, carried: bool) -> None:
        own = Path(ranks.rank_file(str(path), self.rank))
        try:
            saved = load(own)
            restore_rng(saved["rng"])
            if carried:  # this rank's own batch, counters...: not rank 0's
                loop_state.restore(saved)
        except (OSError, KeyError, RuntimeError) as exc:  # replay goes on; fidelity checks
            print(f"florwb: rank RNG states not restored from {own.name}: {exc}", file=sys.stderr)

    def _progress(self, total: int) -> None:
        if not self.spec.progress_file or (self.rank is not None and self.rank.rank != 0):
            return  # one progress file per segment: rank 0 writes it
        now = time.monotonic()
        if 0 < self.done < total and now - self._reported < PROGRESS_EVERY_S:
            return  # the executor looks 5 times a second; a file per iteration is too many
        self._reported = now
        path = Path(self.spec.progress_file)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps({"done": self.done, "total": total}))
        os.replace(tmp, path)

    def finish(self) -> None:
        """End the replay here: nothing after the main loop of the old script may run."""
        self.on_finish()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # a closed or broken stream
                stream.flush()
        os._exit(0)
