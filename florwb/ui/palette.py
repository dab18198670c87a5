"""What the command palette offers: every action of the key table (florwb.ui.keys), so
anything a key does can also be found by name, each with the key that does it now (the
app's keymap applied)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass

from florwb.ui import keys


@dataclass(frozen=True)
class PaletteEntry:
    scope: str
    key: keys.Key
    title: str  # what the user types to find it
    help: str  # where it acts, its key, its id


def palette_entries(
    on_screen: Collection[str],
    on_main: bool,
    keymap: Mapping[str, str],
    key_display: Callable[[str], str],
) -> Iterator[PaletteEntry]:
    """The entries for a screen that holds the scopes `on_screen` (`keys.screen_scopes`);
    `on_main` when it is the tabs' screen; `key_display(name)` says how a key name reads."""
    for scope, entries in keys.KEYS.items():
        title, _selector, tab = keys.SCOPES[scope]
        if scope in keys.SCREEN_SCOPES and scope not in on_screen:
            continue
        if tab is not None and not on_main:
            continue
        for key in entries:
            if not key.palette:
                continue
            active = keys.active_keys(key, keymap)
            shown = key_display(active[0]) if active else "none"
            yield PaletteEntry(scope, key, key.description, f"{title} · key {shown} · {key.id}")
