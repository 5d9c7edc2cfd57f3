"""The client's env file on this machine: what ``theow up`` tells a local ``theow-client``.

``theow up`` makes a local agent token (``local``) and writes it, with the
broker URL, where ``theow_client.config`` looks: the quick start needs no
extra step. An existing file whose token still works is kept as it is.
"""

from __future__ import annotations

import importlib
import logging
import os
from pathlib import Path
from typing import Any

from theow_client import config
from theow_workers.config import Settings
from theow_workers.store.tokens import TokenStore

log = logging.getLogger("theow.client_env")

LOCAL_AGENT = "local"


def write_client_env(settings: Settings, redis_url: str, token: str) -> Path:
    """Write the client's env file (mode 0600: it holds a token); returns where."""
    path = config.client_env_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (
        "# Written by `theow up` for theow-client on this machine.\n"
        f"{config.ENV_REDIS_URL}={redis_url}\n"
        f"{config.ENV_AGENT_TOKEN}={token}\n"
    )
    draft = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(draft, path)
    return path


def local_agent_token(tokens: TokenStore) -> str:
    """The local agent's token: the one in the env file while it works, else a new one.

    Its broker user is the caller's to make (``grant_broker_access``), once the broker runs.
    """
    current = config.client_env().get(config.ENV_AGENT_TOKEN, "")
    found = tokens.find(current) if current else None
    if found is not None and found.scope == "agent":
        return current
    return str(tokens.replace(LOCAL_AGENT, "agent"))


def grant_broker_access(settings: Settings, name: str, token: str) -> bool:
    """Create the agent's broker ACL user when this install has the ACL profile.

    ``theow_workers.ops.acl`` is optional here: without it the broker has no
    per-agent users and this does nothing. Returns whether a user was made.
    """
    try:
        acl: Any = importlib.import_module("theow_workers.ops.acl")
    except ImportError:
        return False
    create = getattr(acl, "create_agent_user", None)
    if create is None:
        return False
    create(settings, name, token)
    return True
