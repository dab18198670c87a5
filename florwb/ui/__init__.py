"""What every part of the workbench shares and that is not a widget: the key table
(keys), typed messages (messages), text formatting (format), the command palette's
entries (palette) and the thread-worker helper whose failures reach the app (workers)."""
