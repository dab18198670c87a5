"""Pieces of the Textual workbench that are not widgets: the key table, typed messages
between worker threads and the screen, text formatting shared by every pane, and the
app's mixins (live: polling and the script watcher; replay_control; palette)."""
