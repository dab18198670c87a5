"""The command palette offers every action of the key table (florwb.workbench.keys), so
anything a key does can also be found by name (a WorkbenchApp mixin)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING

from textual.app import SystemCommand
from textual.screen import Screen
from textual.widgets import TabbedContent

from florwb.workbench import keys

if TYPE_CHECKING:
    from florwb.app import WorkbenchApp


class PaletteCommands:
    """`get_system_commands` for the App: the key table first, then Textual's own."""

    def get_system_commands(self: WorkbenchApp, screen: Screen) -> Iterable[SystemCommand]:
        """Every action of the key table, then Textual's own (theme, quit, screenshot...)."""
        on_main = screen is self.screen_stack[0]
        for scope, entries in keys.KEYS.items():
            title, selector, tab = keys.SCOPES[scope]
            if scope in ("run", "plan") and type(screen).__name__ != selector:
                continue
            if tab is not None and not on_main:
                continue
            for key in entries:
                if not key.palette:
                    continue
                help_text = f"{title} · key {key.keys.split(',')[0]} · {key.id}"
                yield SystemCommand(
                    key.description, help_text, partial(self._palette_run, scope, key.action)
                )
        yield from super().get_system_commands(screen)

    async def _palette_run(self: WorkbenchApp, scope: str, action: str) -> None:
        _title, selector, tab = keys.SCOPES[scope]
        if tab is not None:
            self.query_one("#tabs", TabbedContent).active = tab
            self._focus_tab(tab)
        target = self
        if selector:
            matches = self.screen.query(selector)
            if not matches and type(self.screen).__name__ == selector:
                target = self.screen
            elif matches:
                target = matches.first()
            else:
                return
        await self.run_action(action, target)
