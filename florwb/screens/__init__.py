"""Screens the workbench pushes over its tabs: run detail, and the modals (replay plan,
help, errors). Each gets what it needs when built and posts requests upward; none
imports the app."""
