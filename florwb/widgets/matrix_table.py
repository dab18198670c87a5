"""The log-statement matrix: a DataTable that also answers the vim keys (j/k/h/l/g/G) the
rest of the workbench uses, so moving through it works like every other table."""

from __future__ import annotations

from textual.widgets import DataTable

from florwb.ui import keys


class MatrixTable(DataTable[object]):
    """Statements down, versions across; bindings from florwb.ui.keys, scope "matrix"."""

    BINDINGS = keys.bindings("matrix")
