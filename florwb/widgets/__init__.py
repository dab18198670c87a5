"""Widgets of the workbench: the fast version-history list, sparklines, results table."""
