"""Actions as the core sees them: the loader and runner the build agent shares.

They live in ``theow_client.actions`` because the agent runs client-side
actions with the same code; see that module for how an action is written.
The workers read several action directories as layers (``load_action_layers``).
"""

import threading
from collections.abc import Sequence
from pathlib import Path

from theow_client import actions as _client
from theow_client.actions import (
    CONTEXT_PARAMS,
    DEFAULT_ACTION_TIMEOUT,
    ActionError,
    ActionLoadError,
    ActionRegistry,
    ActionSpec,
    ActionTimeout,
    action,
    call_action,
)

# The client's loader collects what a file registers in module-global state: two loads at
# once (the console approving while a page reloads the library) would register into each
# other's registries. A worker process loads one directory at a time.
_loading = threading.RLock()


def load_actions(directory: str | Path) -> ActionRegistry:
    """The client's ``load_actions``, one call at a time in this process."""
    with _loading:
        return _client.load_actions(directory)


def load_action_layers(directories: Sequence[Path]) -> ActionRegistry:
    """The actions of every directory, earliest first: a later one wins on a name.

    Unlike the build agent's ``load_actions``, a directory that does not exist
    is an error here: rules naming its actions would otherwise fail as
    "unknown action" with nothing saying why.
    """
    chosen: dict[str, ActionSpec] = {}
    for directory in directories:
        if not directory.is_dir():
            raise ActionLoadError(
                f"{directory}: actions directory does not exist (THEOW_ACTIONS_DIRS layers "
                "directories over the shipped actions, THEOW_ACTIONS_DIR names the only one; "
                "installed without a checkout, the shipped actions are ./actions)"
            )
        chosen.update({spec.name: spec for spec in load_actions(directory)})
    registry = ActionRegistry()
    for spec in chosen.values():
        registry.register(spec)
    return registry


__all__ = [
    "CONTEXT_PARAMS",
    "DEFAULT_ACTION_TIMEOUT",
    "ActionError",
    "ActionLoadError",
    "ActionRegistry",
    "ActionSpec",
    "ActionTimeout",
    "action",
    "call_action",
    "load_action_layers",
    "load_actions",
]
