"""Let a forked replay worker train without importing torch._dynamo (1.5-2 s here) until
something really needs it.

torch marks optimizer methods as "not to be compiled" in two ways, and both import
torch._dynamo on their first call: Optimizer.add_param_group, load_state_dict, state_dict and
zero_grad are wrapped in `torch._disable_dynamo`, and every optimizer's `step` is wrapped by
`_use_grad_for_differentiable`, which imports torch._dynamo to place two graph breaks around
the step. Before torch._dynamo is imported nothing can be compiling, the graph breaks are
no-ops and "do not compile" marks mean nothing, so calling the method itself is the same.
Once anything imports torch._dynamo (torch.compile in the script, say), the real wrappers
take over.

The fork server imports torch once for all workers; without this, every worker (or the server,
serially, before the first fork) would import torch._dynamo too.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable


def defer_dynamo_import() -> None:
    """Rewire the optimizer classes defined so far (torch's own, and any a preloaded module
    defined). A class the script defines later keeps torch's wrappers: correct, only slower."""
    torch = sys.modules.get("torch")
    if torch is None or "torch._dynamo" in sys.modules:
        return
    try:
        from torch.optim import optimizer

        disable_code = torch._disable_dynamo(lambda: None).__code__
        step_code = optimizer._use_grad_for_differentiable(lambda *a, **k: None).__code__
        classes = [torch.optim.Optimizer]
    except Exception:  # noqa: BLE001 - another torch version: keep its behaviour
        return
    seen: set[type] = set()
    while classes:
        cls = classes.pop()
        if cls in seen:
            continue
        seen.add(cls)
        classes.extend(cls.__subclasses__())
        for name, attr in list(vars(cls).items()):
            code = getattr(attr, "__code__", None)
            if code is not disable_code and code is not step_code:
                continue
            cells = _cells(attr)  # names another torch version may not use: then leave it
            if code is disable_code and {"fn", "recursive"} <= cells.keys():
                fn = cells["fn"]
                if getattr(fn, "__dynamo_disable", None) is None:
                    fn.__dynamo_disable = _deferred_disable(fn, cells["recursive"])
            elif code is step_code and "func" in cells:
                setattr(cls, name, _deferred_step(attr, cells["func"], torch))


def _cells(fn) -> dict:
    """A closure's free variables by name (torch's wrappers keep what they wrap there)."""
    return {
        n: c.cell_contents for n, c in zip(fn.__code__.co_freevars, fn.__closure__, strict=True)
    }


def _deferred_disable(fn: Callable, recursive: bool) -> Callable:
    real = None

    def call(*args, **kwargs):
        nonlocal real
        if real is None:
            if "torch._dynamo" not in sys.modules:
                return fn(*args, **kwargs)
            import torch._dynamo

            real = torch._dynamo.disable(fn, recursive, wrapping=False)
        return real(*args, **kwargs)

    return call


def _deferred_step(wrapper: Callable, func: Callable, torch) -> Callable:
    """torch's `_use_grad` minus the import and the graph breaks, while nothing compiles."""

    @functools.wraps(func)
    def step(*args, **kwargs):
        if "torch._dynamo" in sys.modules:
            return wrapper(*args, **kwargs)
        prev_grad = torch.is_grad_enabled()
        try:
            torch.set_grad_enabled(args[0].defaults["differentiable"])
            return func(*args, **kwargs)
        finally:
            torch.set_grad_enabled(prev_grad)

    return step
