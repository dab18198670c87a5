"""The planner's one expected failure, shared by its modules."""


class PlanError(Exception):
    """A replay that cannot be planned at all (no runs match, bad --where...)."""
