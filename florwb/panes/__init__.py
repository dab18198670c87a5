"""The workbench's tab panes: version history, log-statement diff, replay, query.

Each pane is a component that owns its state: it is built with what it needs (the store,
the project), is handed data by the app (`show`, `set_history`...) and posts messages
upward (florwb.ui.messages) instead of reaching into the app, which it never imports."""
