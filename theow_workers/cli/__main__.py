"""``python -m theow_workers.cli`` is ``theow``."""

from theow_workers.cli import main

main()
