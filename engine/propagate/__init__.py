"""Log-statement propagation across code versions (FlorDB-style hindsight logging).

Users add `flor.log(...)` statements to today's script; to fill them in for past runs,
each statement must be placed into the *old* version of the script that the run executed.
This package finds log statements (`find_log_statements`), places the missing ones into
an old version by matching the two syntax trees GumTree-style (`propagate`), and reports
which statement exists or could be placed in which version (`statement_matrix`).

It uses libcst so the old code round-trips byte for byte, and never imports the UI.
"""

from florwb_engine.propagate.errors import PropagationError
from florwb_engine.propagate.finder import find_log_statements
from florwb_engine.propagate.matrix import statement_matrix
from florwb_engine.propagate.model import (
    LogStatement,
    MatrixCell,
    Placement,
    PropagationResult,
    StatementMatrix,
)
from florwb_engine.propagate.propagation import propagate

__all__ = [
    "LogStatement",
    "MatrixCell",
    "Placement",
    "PropagationError",
    "PropagationResult",
    "StatementMatrix",
    "find_log_statements",
    "propagate",
    "statement_matrix",
]
