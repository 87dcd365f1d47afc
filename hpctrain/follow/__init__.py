"""Following a submitted run: its state (status), logs, the operations behind the CLI and the
Python Handle (operate, handle), training progress and curves (progress, curves, plot, board),
and how all of it is shown (display)."""
