"""`python -m florwb` is the `florwb` command: for environments whose scripts folder is not
on PATH (a venv used without activating it)."""

from florwb.cli import run

run()
