"""Thread workers whose failures reach the one handler at the app.

Textual posts `Worker.StateChanged` only to the worker's node (the message does not
bubble), so a worker started on a pane would need its own error handling. Every worker of
the workbench is therefore started here on the app (`App.run_worker`, public API) with
`exit_on_error=False`: a pane or component runs its reads in a thread, posts typed messages
from it, and an exception ends in the app's single `Worker.StateChanged` handler, which
shows it in the error modal (Harlequin's approach). `exclusive` keeps one worker per
(node, group), as `@work(exclusive=True, group=...)` does on the node itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.dom import DOMNode
from textual.worker import Worker


def run_in_thread(
    node: DOMNode, work: Callable[[], Any], *, group: str, description: str
) -> Worker[Any]:
    """Run `work()` in a thread; `description` completes "Error while ..." if it raises."""
    return node.app.run_worker(
        work,
        name=description,
        group=f"{type(node).__name__}-{id(node)}-{group}",
        description=description,
        exclusive=True,
        thread=True,
        exit_on_error=False,
    )
