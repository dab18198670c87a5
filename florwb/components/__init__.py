"""Workbench components without a screen of their own: the live monitor (journal sizes,
script watcher, polling, pending statements) and the replay runner. Hidden widgets, so
they own timers and workers and post messages that bubble to the app; none imports it."""
