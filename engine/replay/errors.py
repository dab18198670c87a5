"""The planner's one expected failure, shared by its modules."""

from florwb_engine.errors import FlorwbError


class PlanError(FlorwbError):
    """A replay that cannot be planned at all (no runs match, bad --where...)."""

    title = "Cannot plan the replay"
