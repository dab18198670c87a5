"""Hindsight replay: plan which past runs get the new log statements, then execute it."""

from engine.replay.execute import Progress, ReplayResult, RunResult, execute
from engine.replay.plan import Plan, PlanError, RunPlan, Segment, plan_replay

__all__ = [
    "Plan",
    "PlanError",
    "Progress",
    "ReplayResult",
    "RunPlan",
    "RunResult",
    "Segment",
    "execute",
    "plan_replay",
]
