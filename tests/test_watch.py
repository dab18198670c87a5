"""florwb_engine.watch without a screen: the script watcher's ready signal and its report of
a save, and the journal-size comparison the workbench polls with."""

from __future__ import annotations

import threading
from pathlib import Path

from florwb_engine import project as projects
from florwb_engine.journal import SUFFIX
from florwb_engine.watch import JournalSizes, ScriptWatcher


def test_a_save_after_ready_is_reported_and_other_files_are_not(tmp_path: Path):
    script = tmp_path / "train.py"
    script.write_text("print(1)\n")
    other = tmp_path / "notes.txt"
    saved: list[Path] = []
    seen = threading.Event()

    def on_change(path: Path) -> None:
        saved.append(path)
        seen.set()

    watcher = ScriptWatcher([script], on_change, debounce_s=0.05)
    assert not watcher.ready.is_set()
    watcher.start()
    try:
        assert watcher.ready.is_set()  # set by start: the folder is watched from here on
        other.write_text("not watched\n")
        # an editor's save: a temp file renamed over the script, then a second write
        tmp = tmp_path / ".train.py.swp"
        tmp.write_text("print(2)\n")
        tmp.replace(script)
        script.write_text("print(3)\n")
        assert seen.wait(timeout=10), "the save was not reported"
    finally:
        watcher.stop()
    assert saved and set(saved) == {script.resolve()}


def test_journal_sizes_change_when_a_journal_appears_or_grows(tmp_path: Path):
    folder = projects.journal_dir(tmp_path)
    sizes = JournalSizes(tmp_path)
    assert sizes.changed() is True  # the first look (no folder yet)
    assert sizes.changed() is False
    folder.mkdir(parents=True)
    journal = folder / f"run-1{SUFFIX}"
    journal.write_bytes(b"x" * 10)
    assert sizes.changed() is True
    assert sizes.changed() is False
    (folder / "notes.tmp").write_bytes(b"not a journal")
    assert sizes.changed() is False
    with journal.open("ab") as handle:
        handle.write(b"y")
    assert sizes.changed() is True
    journal.unlink()
    assert sizes.changed() is True
