"""The credentials of the fleet itself: the worker secret that signs internal tasks.

Agents' and people's tokens live in the token store (``theow_workers.store.tokens``).
"""

from __future__ import annotations

import os
import secrets
import threading
from pathlib import Path

from theow_client.jsontypes import JsonObject
from theow_client.signing import WORKER, sign, signing_key
from theow_workers.config import Settings

# The fleet's shared secret for internal tasks (explore, replay), in THEOW_HOME when not set.
WORKER_SECRET_FILE = "worker.secret"


def worker_key(settings: Settings) -> bytes:
    """The signing key of internal tasks: from $THEOW_WORKER_SECRET, else a file in THEOW_HOME.

    The file is made on first use (mode 0600), so an embedded stack's workers
    and the operator's CLI, which share THEOW_HOME, share the secret. A fleet
    on several machines sets THEOW_WORKER_SECRET alike on each.
    """
    given = settings.worker_secret.get_secret_value()
    if given:
        return signing_key(given)
    path = Path(settings.home) / WORKER_SECRET_FILE
    try:
        return signing_key(path.read_text().strip())
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_urlsafe(32)
    # One draft per thread: two threads of one process (the web's hook intake) racing
    # here would otherwise write one draft and keep different secrets.
    draft = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secret + "\n")
    try:
        os.link(draft, path)  # whole or not at all; fails if another process linked first
    except FileExistsError:
        secret = path.read_text().strip()  # theirs: every process uses one secret
    finally:
        draft.unlink()
    return signing_key(secret)


def signed_internal(settings: Settings, task: str, payload: JsonObject) -> JsonObject:
    """``payload`` signed as the workers for an internal task (explore, replay)."""
    return sign(task, payload, WORKER, worker_key(settings))
