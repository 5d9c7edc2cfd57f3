"""Actions as the core sees them: the loader and runner the build agent shares.

They live in ``theow_client.actions`` because the agent runs client-side
actions with the same code; see that module for how an action is written.
"""

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
    load_actions,
)

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
    "load_actions",
]
