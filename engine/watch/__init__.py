"""Noticing change without a screen: new log statements in the working tree, growing journals.

The workbench watches these in background threads and turns them into messages; the
functions here only observe files and compare, so a CLI or notebook can use them too.
"""

from florwb_engine.watch.journal_sizes import JournalSizes
from florwb_engine.watch.pending import PendingStatements, pending_statements
from florwb_engine.watch.scripts import ScriptWatcher

__all__ = ["JournalSizes", "PendingStatements", "ScriptWatcher", "pending_statements"]
