"""Runs recorded from a Jupyter notebook or an IPython session.

There is no script file: `__main__` is IPython's user module. A run still starts at the first
florwb call and ends at `flor.commit()` or when the kernel shuts down, so a kernel session
records one run, or one per `flor.commit()`. Its `script` is the notebook's path when the
Jupyter server tells the kernel (`__session__` / `JPY_SESSION_NAME`), else `notebook.ipynb`.

Its code version is the project's files as for a script, plus one file holding the cells the
kernel executed, in order, up to the run's end (`<notebook>.py`, each cell under an
`# In[n]:` header, as `jupyter nbconvert --to script` writes them): what was run, not the
.ipynb on disk, which may be unsaved or edited out of order. Replaying notebook runs is not
supported; the replay plan says so for such runs (`is_notebook_script`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from florwb_engine.journal_events import Version, VersionError

NOTEBOOK_SUFFIX = ".ipynb"
DEFAULT_NAME = "notebook.ipynb"


def shell() -> Any:
    """The running IPython shell (a Jupyter kernel or the IPython terminal), or None."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    get = getattr(ipython, "get_ipython", None)
    return get() if callable(get) else None


def is_notebook_script(script: str | None) -> bool:
    return bool(script) and str(script).endswith(NOTEBOOK_SUFFIX)


def script_name(project: Path) -> str | None:
    """The run's `script` for a run started in a kernel, relative to the project; None
    outside IPython."""
    ip = shell()
    if ip is None:
        return None
    session = ip.user_ns.get("__session__") or os.environ.get("JPY_SESSION_NAME")
    if not session:
        return DEFAULT_NAME
    path = Path(str(session))
    if not path.is_absolute():
        path = Path.cwd() / path
    try:
        name = str(path.resolve().relative_to(project))
    except (ValueError, OSError):
        name = path.name
    return name if name.endswith(NOTEBOOK_SUFFIX) else name + NOTEBOOK_SUFFIX


def executed_cells() -> list[str]:
    """The sources of the cells the kernel executed, in order (IPython's input history)."""
    ip = shell()
    if ip is None:
        return []
    history = getattr(getattr(ip, "history_manager", None), "input_hist_raw", None)
    if history is None:
        history = ip.user_ns.get("In", [])
    return [str(cell) for cell in history[1:]]


def cells_text(cells: list[str]) -> str:
    parts = ["# Cells executed in the kernel, in order (recorded by florwb)\n"]
    for n, cell in enumerate(cells, 1):
        parts.append(f"\n# In[{n}]:\n{cell.rstrip()}\n")
    return "".join(parts)


def version_event(project: Path, store: Path, script: str) -> dict:
    """A `version` event for the project's files plus `<script>.py` holding the executed
    cells, stored in the private version store (the user's repository is not touched)."""
    from florwb_engine import versions
    from florwb_engine.versions.notebook_tree import with_file

    snap = versions.snapshot(project, store)
    name = Path(script).name + ".py"
    version = with_file(store, project, snap.version, name, cells_text(executed_cells()))
    return Version(
        version=version,
        n_files=snap.n_files + 1,
        n_bytes=snap.n_bytes,
        skipped=[(s.path, s.size, s.reason) for s in snap.skipped],
        git_head=snap.git_head,
        git_branch=snap.git_branch,
        git_dirty=True if snap.in_git else None,
        notebook_code=name,
    ).to_dict()


def final_events(run: Any) -> list[dict]:
    """At the end of a notebook run: its code version with the executed cells (one event),
    or the reason there is none."""
    if run.replayer is not None or not is_notebook_script(run.script) or shell() is None:
        return []
    try:
        return [version_event(run.project, run.store, run.script)]
    except Exception as exc:  # the run's values are kept without its cells
        return [VersionError(f"notebook cells not stored: {exc}").to_dict()]
