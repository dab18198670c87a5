"""Which calls only read: the one table propagation, replay planning and the loop-state
analysis share.

A call counted here as reading must leave its receiver and its arguments as they were:
a miss (a reading call counted as changing) only costs a needless refusal or a slower
replay that re-executes from the start, while a wrong entry (a changing call counted as
reading) serves a wrong value. So a name that changes its receiver on a common type
stays out even when it only reads on another (`add` reads a tensor but changes a set,
`update`, `step`, `append`, `pop`, `sort`).
"""

from __future__ import annotations

import libcst as cst

# Methods that leave their receiver (and arguments) as they were.
PURE_METHODS = frozenset(
    """item size numel dim shape mean sum prod cumsum norm std var max min argmax argmin
    abs pow sqrt exp log round isnan isinf isfinite allclose equal eq ne lt gt le ge all
    any nonzero count index detach cpu cuda to clone float double half int long bool type
    numpy tolist tobytes astype view reshape flatten squeeze unsqueeze expand contiguous
    t transpose chunk unbind matmul mm bmm sigmoid tanh relu softmax log_softmax sub mul
    div stack cat tensor zeros_like ones_like get_last_lr get_lr parameters
    named_parameters buffers named_buffers modules named_modules children named_children
    state_dict keys values items get copy format join split startswith endswith lower
    upper strip replace total_seconds""".split()
)

# Methods that write out (files, loggers, progress bars, summary writers) and change no
# value a training step or a log statement reads: a loop calling them still restores whole.
OUTPUT_METHODS = frozenset(
    """write writelines flush info debug warning warn error exception critical log_metrics
    add_scalar add_scalars add_histogram add_image add_text set_description set_postfix
    set_postfix_str refresh""".split()
)

# Builtins whose call reads its arguments and returns a new value.
PURE_FUNCTIONS = frozenset(
    """len float int str bool abs max min sum round sorted list tuple dict set repr
    isinstance any all zip enumerate range map filter getattr hasattr type""".split()
)

# Builtins that only read their arguments, besides PURE_FUNCTIONS (their results are
# not values worth re-computing, or they print).
READ_ONLY_BUILTINS = frozenset(
    "print callable issubclass id hash format ord chr divmod pow dir vars".split()
)


def pure_call(call: cst.Call) -> bool:
    """A call whose result is a new value and that changes nothing: a pure method or builtin
    (`x.item()`, `len(xs)`), safe to compute once more."""
    func = call.func
    if type(func) is cst.Attribute:
        return func.attr.value in PURE_METHODS
    if type(func) is cst.Name:
        return func.value in PURE_FUNCTIONS
    return False


def read_only(func: cst.BaseExpression) -> bool:
    """A call that changes neither its receiver nor its arguments: pure methods and
    builtins, printing, and exception constructors (`ValueError(f"bad {x}")`)."""
    if isinstance(func, cst.Attribute):
        return func.attr.value in PURE_METHODS
    if isinstance(func, cst.Name):
        name = func.value
        return (
            name in PURE_FUNCTIONS
            or name in READ_ONLY_BUILTINS
            or name.endswith(("Error", "Exception", "Warning"))
        )
    return False


# Calls after which a save in the main loop's body still holds the iteration's end state:
# they log, print, save, format or read, and change no training state (a list of losses
# appended to is not state a checkpoint restores).
QUIET_CALLS = frozenset(
    """log print info debug warning error save write flush state_dict item format str float
    int len dict append set_postfix set_description round min max time perf_counter
    join""".split()
)
