"""Which stack a command talks to: its home, and the stack file ``theow up`` left there.

A home is a ``.theow`` directory holding one stack's state. Every command,
``theow`` or ``theow-client`` or ``TheowClient()``, finds it the same way:
``THEOW_HOME`` when set, else the nearest ``.theow/`` at or above the working
directory (as git finds ``.git/``), else the user's own ``~/.theow``.
``theow up`` writes ``stack.json`` there: its pid, where its services
listen, the client env file it wrote, and the settings it was given (secrets
excepted). A command run later, from anywhere, reads those settings under its
own environment: the environment still wins.

>>> find_home({"THEOW_HOME": "/srv/theow"})
PosixPath('/srv/theow')

This module reads; ``theow_workers.stack.record`` writes and locks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from theow_client.jsontypes import JsonObject

ENV_HOME = "THEOW_HOME"
HOME_DIR = ".theow"
STACK_FILE = "stack.json"
# A stack file is a few KB; anything past this is not one.
MAX_STACK_FILE_BYTES = 1024 * 1024


class StackFileError(ValueError):
    """A stack file that cannot be read as one; the message names the file and why."""


@dataclass(frozen=True)
class StackRecord:
    """What ``theow up`` recorded of the stack it runs (or ran) on a home."""

    home: Path
    pid: int
    client_env: Path | None
    ports: dict[str, int] = field(default_factory=dict)
    settings: JsonObject = field(default_factory=dict)

    def describe(self) -> str:
        """``pid 4242, broker port 6500, milvus port 19600``: for one line naming the stack."""
        ports = ", ".join(f"{name} port {port}" for name, port in self.ports.items())
        return f"pid {self.pid}" + (f", {ports}" if ports else "")


def find_home(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Path:
    """The home: $THEOW_HOME, else the nearest ``.theow/`` up from ``cwd``, else ``~/.theow``."""
    env = os.environ if env is None else env
    given = env.get(ENV_HOME, "").strip()
    if given:
        return Path(given).expanduser()
    here = (cwd or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if (directory / HOME_DIR).is_dir():
            return directory / HOME_DIR
    return user_home() or here / HOME_DIR  # no home directory (some CI containers): here


def user_home() -> Path | None:
    """The user's own home, ``~/.theow``; None when the user has no home directory."""
    try:
        return Path.home().resolve() / HOME_DIR
    except RuntimeError:
        return None


def stack_file(home: Path) -> Path:
    return home / STACK_FILE


def read_stack(home: Path) -> StackRecord | None:
    """The stack recorded in ``home``; None when there is none, StackFileError when it is not one."""
    path = stack_file(home)
    try:
        with path.open("rb") as src:
            raw = src.read(MAX_STACK_FILE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StackFileError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    if len(raw) > MAX_STACK_FILE_BYTES:
        raise StackFileError(f"{path}: larger than {MAX_STACK_FILE_BYTES} bytes: not a stack file")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeError, json.JSONDecodeError) as exc:
        raise StackFileError(f"{path}: not JSON ({exc}); delete it and run `theow up`") from None
    if not isinstance(data, dict):
        raise StackFileError(f"{path}: not a JSON object; delete it and run `theow up`")
    pid, client_env, ports, settings = (
        data.get("pid"),
        data.get("client_env"),
        data.get("ports") or {},
        data.get("settings") or {},
    )
    if not isinstance(pid, int) or not isinstance(settings, dict) or not isinstance(ports, dict):
        raise StackFileError(
            f"{path}: lacks its pid, ports or settings; delete it and run `theow up`"
        )
    return StackRecord(
        home=home,
        pid=pid,
        client_env=Path(client_env) if isinstance(client_env, str) and client_env else None,
        ports={str(k): v for k, v in ports.items() if isinstance(v, int)},
        settings=settings,
    )


def recorded_client_env(env: Mapping[str, str] | None = None) -> Path | None:
    """The client env file of the found home's stack; None without a (readable) stack file.

    The client never breaks a build over a damaged stack file: it is then as if absent.
    """
    try:
        record = read_stack(find_home(env))
    except (StackFileError, OSError):
        return None
    return record.client_env if record is not None else None
