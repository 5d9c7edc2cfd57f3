"""Theow's workers: resolver, explorer and replay, plus the `theow` command.

Importing this package is cheap on purpose: action files do
``from theow_workers import action`` and are also loaded on build agents.
"""

from theow_workers.core.actions import action

__all__ = ["action"]
