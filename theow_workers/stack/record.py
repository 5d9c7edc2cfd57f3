"""One stack per home: the lock ``theow up`` holds while it runs, and the stack file it writes.

The lock is an ``flock`` on ``stack.lock`` in the home, held for the life of
``theow up``: the kernel drops it when the process ends, even by SIGKILL, so a
dead stack never blocks the next one and a pid reused since never looks alive.
The stack file (``theow_client.stack`` reads it) stays after the stack stops:
its settings still say where the home's data is.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import SecretStr

from theow_client.jsontypes import JsonObject
from theow_client.stack import StackFileError, StackRecord, read_stack, stack_file
from theow_workers.config import VALKEY_PASSWORD_FILE, Settings

LOCK_FILE = "stack.lock"
# Settings that hold a secret are never written: give them again where they are needed.
SECRET_SETTINGS = frozenset(
    name for name, info in Settings.model_fields.items() if info.annotation is SecretStr
)


class StackRunning(RuntimeError):
    """Another ``theow up`` holds the home; the message names it."""

    def __init__(self, home: Path, record: StackRecord | None) -> None:
        running = record.describe() if record is not None else "its stack file is unreadable"
        super().__init__(
            f"theow is already up on {home} ({running}): stop it first, "
            "or give this one a home of its own (THEOW_HOME, or a .theow/ directory where you run it)"
        )
        self.home, self.record = home, record


def running(home: Path) -> StackRecord | None:
    """The stack running on ``home`` (its lock is held), else None. Creates nothing."""
    try:
        fd = os.open(home / LOCK_FILE, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return _record_or_none(home)
    finally:
        os.close(fd)  # a lock taken here to look is dropped with it
    return None


def claim(home: Path) -> int:
    """Hold ``home`` for this process: the lock's descriptor (keep it open), or StackRunning."""
    home.mkdir(parents=True, exist_ok=True)
    fd = os.open(home / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StackRunning(home, _record_or_none(home)) from None
    return fd


def _record_or_none(home: Path) -> StackRecord | None:
    try:
        return read_stack(home)
    except StackFileError:
        return None


def write_stack_file(
    settings: Settings,
    given: Iterable[str],
    client_env: Path,
    ports: dict[str, int],
) -> Path:
    """Record the stack of ``settings`` in its home (mode 0600, replaced whole); returns where.

    ``given``: the settings named on ``theow up``'s line, in its environment or
    theow.yaml; only those are recorded, so a default stays the default.
    """
    home = settings.home.resolve()
    values = settings.model_dump(mode="json")
    recorded: JsonObject = {}
    for name in sorted(set(given) - SECRET_SETTINGS - {"home"}):
        recorded[name] = _absolute(getattr(settings, name), values[name])
    if "redis_url" in recorded:
        recorded["redis_url"] = _without_embedded_password(settings.redis_url, home)
    record: JsonObject = {
        "pid": os.getpid(),
        "home": str(home),
        "client_env": str(client_env.resolve()),
        "ports": ports,
        "settings": recorded,
    }
    path = stack_file(home)
    draft = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(record, out, indent=2)
        out.write("\n")
    os.replace(draft, path)
    return path


def _absolute(value: object, dumped: object) -> object:
    """Directories as absolute paths: a command run elsewhere reads the same ones."""
    if isinstance(value, Path):
        return str(value.resolve())
    if isinstance(value, list) and value and all(isinstance(v, Path) for v in value):
        return [str(v.resolve()) for v in value]
    return dumped


def _without_embedded_password(url: str, home: Path) -> str:
    """``url`` without the embedded Valkey's password: readers take it from its own file."""
    parts = urlsplit(url)
    file = home / VALKEY_PASSWORD_FILE
    if parts.password is None or not file.is_file():
        return url
    if unquote(parts.password) != file.read_text().strip():
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
