"""Hindsight replay: plan which past runs get the new log statements, then execute it.

The names below load on first use: the fork server, which every replay worker starts
from, is a module of this package and must not pay for DuckDB, pandas or libcst.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Plan": "plan",
    "PlanError": "plan",
    "RunPlan": "plan",
    "Segment": "plan",
    "plan_replay": "plan",
    "Progress": "executor",
    "RayOptions": "ray_executor",
    "ReplayResult": "executor",
    "RunResult": "executor",
    "execute": "executor",
    "warm_workers": "forkserver",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"florwb_engine.replay.{_EXPORTS[name]}"), name)
