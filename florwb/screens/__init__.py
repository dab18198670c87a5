"""Screens and tab panes of the workbench: history, statements, replay, query, run detail,
and the modals (replay plan, help, errors)."""
