"""Hyperparameters from the command line, flordb style: `python train.py --kwargs lr=0.05`.

The `--kwargs` tokens are removed from sys.argv when florwb is imported, so a script that
also uses argparse does not trip over them; the original argv is kept for the run record.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from typing import Any

from florwb_engine import settings
from florwb_engine.processes import is_multiprocessing_child

ORIGINAL_ARGV: list[str] = list(sys.argv)


class ArgError(ValueError):
    """A --kwargs value that cannot become the type of the argument's default."""


def split_kwargs(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """Return argv without the `--kwargs k=v ...` group, and the pairs it held."""
    kept: list[str] = []
    pairs: dict[str, str] = {}
    taking = False
    for token in argv:
        if token == "--kwargs":
            taking = True
            continue
        if token.startswith("--kwargs="):
            token = token[len("--kwargs=") :]
            taking = True
        if taking and "=" in token and not token.startswith("-"):
            key, _, value = token.partition("=")
            if not key.strip():  # `=3`: said here, or the exit would name an empty arg
                print(f"florwb: --kwargs {token}: no name before '='", file=sys.stderr)
                continue
            pairs[key.strip()] = value
            continue
        taking = False
        kept.append(token)
    return kept, pairs


ENV = settings.KWARGS.name


def take_cli_kwargs() -> dict[str, str]:
    """The --kwargs pairs, removed from sys.argv. They are also left in the environment for
    multiprocessing children: a spawned DataLoader worker re-runs the script's module level
    with the stripped argv, and its flor.arg must see the same values as the parent."""
    kept, pairs = split_kwargs(sys.argv)
    if pairs:
        sys.argv[:] = kept
        os.environ[ENV] = json.dumps(pairs)
    elif ENV in os.environ and is_multiprocessing_child():
        pairs = json.loads(os.environ[ENV])
    return pairs


CLI_KWARGS: dict[str, str] = take_cli_kwargs()


def cast(name: str, text: str, default: Any) -> Any:
    """Parse `text` as the type of `default`, like flordb's --kwargs."""
    kind = type(default)
    try:
        if kind is bool:
            lowered = text.strip().lower()
            if lowered in ("1", "true", "yes", "y", "on"):
                return True
            if lowered in ("0", "false", "no", "n", "off"):
                return False
            raise ValueError(text)
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
        if kind is str:
            return text
        if kind in (dict, list, tuple, set):  # a container default takes only its own kind
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                raise ValueError(text) from None
            if type(value) is not kind:
                raise ValueError(text)
            return value
        try:
            return ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return text
    except ValueError:
        raise ArgError(
            f"--kwargs {name}={text}: expected {_kind_name(kind)} like the default {default!r}"
        ) from None


def _kind_name(kind: type) -> str:
    """How a container default's kind is written on the command line."""
    written: dict[type, str] = {
        dict: "a dict literal",
        list: "a list literal",
        tuple: "a tuple literal",
        set: "a set literal",
    }
    return written.get(kind, kind.__name__)
