"""Propagation's names for the shared flor-call recogniser (florwb_engine.flor_calls).

The recogniser lives outside this package because the instrumenter and replay planning use
it too; propagate's modules import it from here.
"""

from florwb_engine.flor_calls import (
    FLOR_MODULES,
    FlorImports,
    ast_log_call_lines,
    call_args,
    imports_from_nodes,
    literal_string,
    log_call_parts,
)

__all__ = [
    "FLOR_MODULES",
    "FlorImports",
    "ast_log_call_lines",
    "call_args",
    "imports_from_nodes",
    "literal_string",
    "log_call_parts",
]
