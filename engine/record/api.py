"""The recording API a training script calls: arg, log, loop, iteration, checkpointing,
commit.

`log` and `loop` are the hot path: no I/O, no locks, no printing. They append tuples to the
flat buffers in `runtime`, which a background thread drains into the run's journal. The loop
coordinates of a logged value are one integer, `entry << 32 | iteration`; the loop entry
event carries the outer coordinates once, so nothing per call or per iteration is copied.
"""

from __future__ import annotations

import itertools
import numbers
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from florwb_engine.journal import ENTRY_SHIFT, ITERATION_MASK
from florwb_engine.journal_events import Arg, Loop
from florwb_engine.record import args as cli_args
from florwb_engine.record import echo, lineage, loop_state, notebook, ranks, runtime, save_mirror
from florwb_engine.record.values import PRIMITIVES, attr_of, encode, name_text

T = TypeVar("T")

_TIME_EXTEND = runtime.TIMINGS.extend
_entry_ids = itertools.count(1)
SEGMENT_ENTRIES = 1 << 20

# The innermost loop iteration as `entry << 32 | iteration`; 0 outside any flor.loop.
_CTX = 0
# Open loop entries: id -> (loop names outermost first, iterations of the outer loops).
_ENTRIES: dict[int, tuple[tuple[str, ...], tuple[int, ...]]] = {}


def loop_position() -> tuple[int, tuple[str, ...], tuple[int, ...]] | None:
    """Where the script is in its flor.loops: (the innermost iteration's context, loop
    names outermost first, iterations of the outer loops); None outside every loop. For
    code that runs beside the loops (the torch.save mirror), never on flor.log's path."""
    if not _CTX:
        return None
    names, prefix = _ENTRIES.get(_CTX >> ENTRY_SHIFT, ((), ()))
    return _CTX, names, prefix


def _first_record(record: tuple) -> None:
    """Stands in for the buffer until a run exists: the first logged value starts it."""
    if _start() is not None:
        _LOGS_EXTEND(record)


def _discard(record: tuple) -> None:
    """Used where nothing may be recorded (a forked child)."""


# Bound to the log buffer's `extend` while a run records, so `log` needs no "started?" test.
_LOGS_EXTEND: Callable[[tuple], None] = _first_record


def _forget_in_child() -> None:
    global _LOGS_EXTEND, _ECHO
    _LOGS_EXTEND = _first_record
    _ECHO = None


os.register_at_fork(after_in_child=_forget_in_child)


# The opt-in summary line (echo.py); None unless FLORWB_ECHO asks for it while recording.
_ECHO: echo.Echo | None = None


def _start() -> runtime.Run | None:
    global _LOGS_EXTEND, _entry_ids, _ECHO
    run = runtime.ensure_run()
    _LOGS_EXTEND = runtime.LOGS.extend if run is not None else _discard
    if run is None and not runtime.disabled():  # a spawned rank still importing (ranks.py)
        _LOGS_EXTEND = _first_record
    interval = echo.interval_from_env() if run is not None and run.replayer is None else None
    if interval is not None:
        _ECHO = echo.Echo(runtime.LOGS.extend, interval)
        _LOGS_EXTEND = _ECHO.extend
    if run is not None and (run.replayer is not None or run.rank is not None):
        # Segments of one replay, and ranks of one launch, write rows of the same run and
        # source: their loop entry ids must not collide, or coordinates would mix.
        slot = ranks.entry_slot(run.rank)
        if run.replayer is not None:
            slot += run.replayer.spec.segment * max(1, run.replayer.spec.world_size)
        _entry_ids = itertools.count(slot * SEGMENT_ENTRIES + 1)
    if run is not None and run.replayer is not None and run.replayer.spec.first > 0:
        _LOGS_EXTEND = _outside_prefix(runtime.LOGS.extend, run.replayer)
    return run


def _outside_prefix(extend: Callable[[tuple], None], replayer: Any) -> Callable[[tuple], None]:
    """A later segment of a replay runs the code before the main loop again: the values
    logged there (outside any loop) belong to the segment that starts at the first
    iteration, and would otherwise be stored once per segment. So do the values of the
    iteration before its first, which it replays only to reach that iteration's state
    (Replayer.silent)."""

    def keep(record: tuple) -> None:
        if record[2] != 0 and not replayer.silent:
            extend(record)

    return keep


def log(name: str, value: T) -> T:
    """Record `value` under `name` at the current loop coordinates and return it."""
    if type(value) in PRIMITIVES:
        _LOGS_EXTEND((name, value, _CTX))
    else:
        _LOGS_EXTEND((name, encode(value, defer=True), _CTX))
    return value


def _nested(parent: int, loop_name: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The loop names and outer iterations of a loop (or flor.iteration) entered inside
    the iteration `parent` (0: at the top): what its entry in _ENTRIES holds."""
    if not parent:
        return (loop_name,), ()
    outer_names, outer_iters = _ENTRIES[parent >> ENTRY_SHIFT]
    return (*outer_names, loop_name), (*outer_iters, parent & ITERATION_MASK)


def loop(name: str, iterable: Iterable[T]) -> Iterator[T]:
    """Iterate like `iterable`, recording each iteration's coordinates and timings; an
    item that is a string (a file name) is logged as `<name>_value`, as flordb does."""
    global _CTX
    run = runtime.current() or _start()
    if run is None:
        yield from iterable
        return
    if save_mirror.WAITING:  # torch imported after the run started: wrap its save now
        save_mirror.arm()
    parent = _CTX
    loop_name = name_text(name) or "loop"  # a name whose str() fails: the loop still runs
    names, prefix = _nested(parent, loop_name)
    entry = next(_entry_ids)
    _ENTRIES[entry] = (names, prefix)
    try:
        total: int | None = len(iterable)  # type: ignore[arg-type]
    except Exception:  # noqa: BLE001 - no length, or a __len__ that raises (NotImplementedError)
        total = None
    runtime.EVENTS.append(Loop(entry, names, prefix, total).to_dict())
    ckpt = run.checkpointer
    replayer = run.replayer
    time_extend: Callable[[tuple], None] = _TIME_EXTEND
    if replayer is None:
        items: Iterator[tuple[int, T]] = enumerate(iterable)
        if ckpt.objects and ckpt.loop_depth is None:
            ckpt.loop_depth = len(prefix)
        checkpointed_here = bool(ckpt.objects) and ckpt.loop_depth == len(prefix)
        # a loop nested directly in the checkpointed loop's body: its end is the moment
        # the iteration's checkpoint is copied (Checkpointer.inner_loop_ended)
        ends_inner = bool(ckpt.objects) and ckpt.loop_depth == len(prefix) - 1
        is_main = False
        main_here = checkpointed_here
    else:  # replay: the replayer picks the iterations and restores their state
        checkpointed_here = ends_inner = False
        is_main = main_here = replayer.is_main(names[-1], len(prefix))
        items = (
            replayer.main_items(iterable)
            if is_main
            else replayer.inner_items(iterable, len(prefix), sys._getframe(1))
        )
        time_extend = replayer.timings(_TIME_EXTEND)
    if main_here:  # its frame holds the loop-carried names checkpoints keep
        loop_state.main_loop_started(sys._getframe(1), loop_name, analyse=replayer is None)
    clock = time.perf_counter
    echoing = _ECHO if not parent else None  # a summary line per outermost iteration
    base = entry << ENTRY_SHIFT
    value_name = f"{loop_name}_value"
    i = -1
    ctx = 0
    t1 = 0.0
    try:
        t0 = clock()
        for i, item in items:
            t1 = clock()
            ctx = base + i
            _CTX = ctx
            if type(item) is str:  # flordb's `<loop>_value`: a document's name, joinable
                _LOGS_EXTEND((value_name, item, ctx))
            if checkpointed_here:
                ckpt.iteration_started(i, total, t1)
            yield item
            t2 = clock()
            time_extend((ctx, t1 - t0, t2 - t1))
            _CTX = parent
            t0 = t2
            if echoing is not None:
                echoing.iteration_ended(loop_name, i, total)
            if checkpointed_here:
                ckpt.end_of_iteration(names[-1], i, ctx, t2 - t1, total)
                t0 = clock()
        if checkpointed_here and i >= 0 and ckpt.last_iteration != i and ckpt.objects:
            ckpt.save(names[-1], i, ctx)  # the end state is what replay needs most
        if ends_inner:
            ckpt.inner_loop_ended(sys._getframe(1))
    except GeneratorExit:
        # The caller left the loop inside iteration i (break, return, an exception: the
        # generator is closed at its yield); that iteration happened and is recorded.
        time_extend((ctx, t1 - t0, clock() - t1))
        if checkpointed_here:
            ckpt.loop_left(names[-1], i, ctx)
        elif ends_inner:
            ckpt.inner_loop_ended(sys._getframe(1))
        elif is_main and replayer is not None:
            replayer.loop_left(sys._getframe(1))
        raise
    finally:
        _CTX = parent
        del _ENTRIES[entry]
        close = attr_of(items, "close")
        if callable(close):  # the replayer's generator learns how the loop ended now
            close()
        if main_here:
            loop_state.main_loop_ended()


# flor.iteration's own count per loop path, for an iteration given no index (a request
# handler's document): the n-th entry of that name in this run. Reset when a run ends.
_ITERATION_COUNTS: dict[tuple[str, ...], int] = {}


@contextmanager
def iteration(name: str, idx: int | None, value: Any = None) -> Iterator[None]:
    """flordb's one iteration of a loop the script does not hand to flor (a `while` loop,
    one request of a web handler): what is logged inside carries `name` = `idx` as a loop
    coordinate, nested in the enclosing flor.loops and iterations. With `idx` None the
    coordinate is this run's count of such iterations (0, 1, ...). A `value` other than the
    index is logged as `<name>_value`, flordb's column for it."""
    global _CTX
    run = runtime.current() or _start()
    if run is None:
        yield
        return
    parent = _CTX
    loop_name = name_text(name) or "loop"
    names, prefix = _nested(parent, loop_name)
    index = _iteration_index(names, idx)
    entry = next(_entry_ids)
    _ENTRIES[entry] = (names, prefix)
    runtime.EVENTS.append(Loop(entry, names, prefix).to_dict())
    ctx = (entry << ENTRY_SHIFT) + index
    _CTX = ctx
    if value is not None and str(value) != str(idx):
        log(f"{loop_name}_value", value if type(value) in PRIMITIVES else str(value))
    clock = time.perf_counter
    t0 = clock()
    try:
        yield
    finally:
        if run.replayer is None or not run.replayer.silent:
            _TIME_EXTEND((ctx, 0.0, clock() - t0))
        _CTX = parent
        del _ENTRIES[entry]


def _iteration_index(names: tuple[str, ...], idx: int | None) -> int:
    """The coordinate of a flor.iteration: its index when it is one a coordinate can hold
    (0 <= idx < 2**32), else the run's own count of iterations on this loop path."""
    count = _ITERATION_COUNTS.get(names, 0)
    _ITERATION_COUNTS[names] = count + 1
    try:
        index = int(idx) if idx is not None else -1
    except (TypeError, ValueError):
        index = -1
    return index if 0 <= index <= ITERATION_MASK else count


def arg(name: str, default: Any = None) -> Any:
    """A hyperparameter: `--kwargs name=value` on the command line overrides `default`."""
    run = runtime.current() or _start()
    if run is not None and run.replayer is not None:  # replay: what the run was given
        return run.replayer.spec.args.get(name, default)
    value = default
    if name in cli_args.CLI_KWARGS:
        try:
            value = cli_args.cast(name, cli_args.CLI_KWARGS[name], default)
        except cli_args.ArgError as exc:
            if run is not None:
                run.exception = exc
            print(f"florwb: {exc}", file=sys.stderr)
            # said once above: the exit's "not used by any flor.arg" must not name it again
            cli_args.CLI_KWARGS.pop(name, None)
            raise SystemExit(2) from None
    text = name_text(name)
    if run is not None and text is not None:
        run.args[text] = value
        runtime.EVENTS.append(Arg(text, encode(value)).to_dict())
    return value


# Keywords of flor.checkpointing that set the run's checkpoint policy instead of naming an
# object: a plain number under one of these names is a setting (checkpointing a bare number
# restores nothing); anything else under them (a module, a tensor, a dict) is still an object
# to checkpoint, as with flordb, whose checkpointing takes any keyword.
POLICY_KEYWORDS = ("every", "budget")


def _policy_options(objects: dict[str, Any]) -> dict[str, Any]:
    """Take the policy settings out of flor.checkpointing's keywords, checked."""
    options = {
        key: objects.pop(key)
        for key in POLICY_KEYWORDS
        if isinstance(objects.get(key), numbers.Real) and not isinstance(objects[key], bool)
    }
    every = options.get("every")
    if every is not None and (not float(every).is_integer() or every < 1):
        raise ValueError(f"checkpointing every={every!r}: a whole number of iterations >= 1")
    if "every" in options:
        options["every"] = int(every)  # type: ignore[arg-type]
    if "budget" in options:
        _check_budget(options["budget"])
        options["budget"] = float(options["budget"])
    return options


@contextmanager
def checkpointing(**objects: Any) -> Iterator[None]:
    """Register state (model=..., optimizer=...) to checkpoint at the end of outer iterations.

    `every=N` checkpoints iterations 0, N, 2N, ... and the last, whatever they cost (N=1:
    every iteration); `budget=f` is this run's checkpoint cost allowed as a fraction of
    compute time (flor.set_checkpoint_budget). Both hold inside the `with` block."""
    options = _policy_options(objects)
    run = runtime.current() or _start()
    if run is None:
        yield
        return
    ckpt = run.checkpointer
    previous = dict(ckpt.objects)
    policy = ckpt.policy
    previous_policy = {key: getattr(policy, key) for key in options}
    ckpt.objects.update(objects)
    for key, value in options.items():
        setattr(policy, key, value)
    if objects and run.replayer is None:
        ckpt.start()
    try:
        yield
    finally:
        ckpt.objects = previous
        for key, value in previous_policy.items():
            setattr(policy, key, value)
        if not previous:
            ckpt.loop_depth = None


def _check_budget(fraction: float) -> None:
    if not 0 <= fraction <= 1:
        raise ValueError("checkpoint budget must be between 0 and 1")


def set_checkpoint_budget(fraction: float) -> None:
    """Checkpoint cost allowed, as a fraction of compute time (default 0.02)."""
    _check_budget(fraction)
    run = runtime.current() or _start()
    if run is not None:
        run.checkpointer.policy.budget = fraction


def set_ckpt_interval(seconds: float) -> None:
    """flordb's checkpoint interval, kept as a floor: at least `seconds` between two
    checkpoints, beside the budget (a checkpoint is taken when both allow; the last
    iteration's always)."""
    seconds = float(seconds)
    if not seconds >= 0:
        raise ValueError("checkpoint interval must be a number of seconds >= 0")
    run = runtime.current() or _start()
    if run is not None:
        run.checkpointer.policy.min_interval_s = seconds


def load_checkpoint(
    tstamp: Any, name: str | None = None, *, map_location: Any = "cpu", weights_only: bool = True
) -> Any:
    """flordb's load of a past run's checkpoint (see lineage.py); a recording run notes
    that it started from it, and its replay loads the same file. A script's first florwb
    call starts its run here (a fine-tune loads its parent before it trains); a notebook
    or `python -c` that only reads a checkpoint starts none, as in flordb."""
    run = runtime.current()
    if run is None and notebook.shell() is None and runtime.main_script() is not None:
        run = _start()
    return lineage.load_checkpoint(
        run, tstamp, name, map_location=map_location, weights_only=weights_only
    )


def commit() -> None:
    """End the current run: flush its journal and mark it finished."""
    global _LOGS_EXTEND
    run = runtime.current()
    runtime.end_run()
    if run is not None:
        lineage.forget_calls(run.run_id)
    _ITERATION_COUNTS.clear()
    _LOGS_EXTEND = _first_record
