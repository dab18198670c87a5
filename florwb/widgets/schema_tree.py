"""The Query tab's schema sidebar: tables and views, each with its columns and their types
(harlequin's data catalog, for the one catalog florwb has). Filled from the catalog outline
read on a worker thread (engine/store/catalog_outline.py)."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Tree

from florwb_engine.store.catalog_outline import Relation


class SchemaTree(Tree[str]):
    DEFAULT_CSS = "SchemaTree { width: 34; max-width: 40%; border-right: tall $panel; }"

    def __init__(self, **kwargs: object) -> None:
        super().__init__("catalog", **kwargs)  # type: ignore[arg-type]
        self.show_root = False
        self.relations: list[Relation] = []

    def show(self, relations: list[Relation]) -> None:
        self.relations = relations
        self.clear()
        for relation in relations:
            node = self.root.add(
                Text.assemble(relation.name, (f" {relation.kind}", "dim")), data=relation.name
            )
            for column, kind in relation.columns:
                node.add_leaf(Text.assemble(column, (f" {kind.lower()}", "dim")), data=column)
            if relation.name == "logs":
                node.expand()
        self.root.expand()
