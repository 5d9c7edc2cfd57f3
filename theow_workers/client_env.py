"""The client's env file on this machine: what ``theow up`` tells a local ``theow-client``.

``theow up`` makes a local agent token (``local``) and writes it, with the
broker URL, to its home's ``client.env`` (or $THEOW_CLIENT_ENV), which its
stack file names: ``theow_client.config`` finds it there, and the quick start
needs no extra step. Each home has its own, so two stacks on one machine never
rewrite each other's. A token in it that still works is kept.
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


CLIENT_ENV_FILE = "client.env"


def client_env_file(settings: Settings) -> Path:
    """The client env file of ``settings``' home: $THEOW_CLIENT_ENV when set, else ``client.env`` in it."""
    explicit = os.environ.get(config.ENV_CLIENT_ENV)
    if explicit:
        return Path(explicit).expanduser()
    return settings.home.resolve() / CLIENT_ENV_FILE


def write_client_env(
    path: Path, redis_url: str, token: str, console_url: str | None = None
) -> Path:
    """Write the client's env file at ``path`` (mode 0600: it holds a token); returns it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = (
        "# Written by `theow up` for theow-client on this machine.\n"
        f"{config.ENV_REDIS_URL}={redis_url}\n"
        f"{config.ENV_AGENT_TOKEN}={token}\n"
    )
    if console_url:
        text += f"{config.ENV_CONSOLE_URL}={console_url}\n"
    draft = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(draft, path)
    return path


def local_agent_token(tokens: TokenStore, path: Path) -> str:
    """The local agent's token: the one in the env file at ``path`` while it works, else a new one.

    Its broker user is the caller's to make (``grant_broker_access``), once the broker runs.
    """
    current = config.client_env(path).get(config.ENV_AGENT_TOKEN, "")
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
