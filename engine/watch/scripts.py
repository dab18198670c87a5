"""Watch training scripts for saves, within a second, with watchdog (inotify on Linux).

Editors save in different ways (write in place, write a temp file and rename over it), so
every event whose source or destination is a watched file counts. Callbacks run on the
observer's thread; a burst of events within `debounce_s` is reported once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: ScriptWatcher) -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type in ("opened", "closed_no_write"):
            return
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            if raw:
                path = Path(raw if isinstance(raw, str) else raw.decode()).resolve()
                if path in self.watcher.paths:
                    self.watcher._changed(path)


class ScriptWatcher:
    """Calls `on_change(path)` after a watched file is saved.

    `ready` is set once the observer watches every folder: a save after that is reported
    (inotify watches are added synchronously by `start`), so callers and tests wait on it
    instead of sleeping."""

    def __init__(
        self,
        paths: Iterable[Path],
        on_change: Callable[[Path], None],
        debounce_s: float = 0.15,
    ) -> None:
        self.paths = {Path(p).resolve() for p in paths}
        self.on_change = on_change
        self.debounce_s = debounce_s
        self._observer = Observer()
        self._timers: dict[Path, threading.Timer] = {}
        self._lock = threading.Lock()
        handler = _Handler(self)
        for folder in {p.parent for p in self.paths}:
            if folder.is_dir():
                self._observer.schedule(handler, str(folder), recursive=False)
        self._observer.daemon = True
        self.ready = threading.Event()

    def start(self) -> ScriptWatcher:
        self._observer.start()
        self.ready.set()
        return self

    def stop(self) -> None:
        with self._lock:
            for timer in self._timers.values():
                timer.cancel()
            self._timers.clear()
        self._observer.stop()
        if self._observer.is_alive():
            self._observer.join(timeout=2)

    def _changed(self, path: Path) -> None:
        with self._lock:
            timer = self._timers.pop(path, None)
            if timer is not None:
                timer.cancel()
            timer = threading.Timer(self.debounce_s, self.on_change, [path])
            timer.daemon = True
            self._timers[path] = timer
            timer.start()
