"""Flower, always behind basic auth: every worker, queue and task of the fleet.

``theow up --flower`` and the compose ``flower`` service
(``python -m theow_workers.ops.flower --address 0.0.0.0``) both start it here.

Decision: Flower is **refused** unless ``THEOW_FLOWER_PASSWORD`` is set (user
``THEOW_FLOWER_USER``, default ``theow``). A generated password printed at
start-up would land in container logs and change at every restart; Flower's
API can revoke tasks and shut workers down, so it never runs open. The
credentials reach Flower through its ``FLOWER_BASIC_AUTH`` environment
variable, not ``--basic-auth=`` on the command line, where any local user
could read them in the process list.

Flower's ``/healthcheck`` and ``/metrics`` (Celery's Prometheus metrics) answer
without authentication, as upstream decides; everything else, the REST API
included, needs the password.

>>> command = flower_command(Settings.load(env={"THEOW_FLOWER_PASSWORD": "s3cret-pw"}))
>>> command.argv[-3:]
['flower', '--port=5555', '--address=127.0.0.1']
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from theow_workers.config import ConfigError, Settings

AUTH_VARIABLE = "FLOWER_BASIC_AUTH"
# Set, it would open Flower's API to anyone when no auth is configured: never passed on.
UNAUTHENTICATED_VARIABLE = "FLOWER_UNAUTHENTICATED_API"


class FlowerError(ValueError):
    """Flower cannot be started safely with these settings."""


@dataclass(frozen=True)
class FlowerCommand:
    argv: list[str]
    env: dict[str, str]  # added to the caller's environment: the credentials
    url: str

    def environment(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in (os.environ if base is None else base).items()}
        env.pop(UNAUTHENTICATED_VARIABLE, None)
        env.update(self.env)
        return env

    def start(
        self, base_env: Mapping[str, str] | None = None, log_path: Path | None = None
    ) -> subprocess.Popen[bytes]:
        """Flower as a child process, its output in ``log_path`` (or discarded)."""
        out = log_path.open("ab") if log_path is not None else subprocess.DEVNULL
        from theow_workers.stack import die_with_parent

        return subprocess.Popen(
            self.argv,
            env=self.environment(base_env),
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,  # a killed `theow up` must not leave Flower behind
        )

    def exec(self) -> NoReturn:
        """Become Flower (the container's process, so it gets the stop signal)."""
        os.execve(self.argv[0], self.argv, self.environment())


def flower_command(
    settings: Settings, address: str = "127.0.0.1", port: int | None = None
) -> FlowerCommand:
    """The command that starts Flower for this deployment, with its credentials.

    Raises ``FlowerError`` when no password is set or the credentials cannot be
    passed to Flower intact (it splits its user list on commas).
    """
    user = settings.flower_user
    password = settings.flower_password.get_secret_value()
    if not password:
        raise FlowerError(
            "Flower is never started without authentication: set THEOW_FLOWER_PASSWORD "
            f"(the user is THEOW_FLOWER_USER, now {user!r})"
        )
    if not user or ":" in user or "," in user:
        raise FlowerError(f"THEOW_FLOWER_USER {user!r}: must be non-empty, without ':' or ','")
    if "," in password:
        raise FlowerError("THEOW_FLOWER_PASSWORD must not contain ',' (Flower splits on it)")
    port = settings.flower_port if port is None else port
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "theow_workers.celery_app:monitor",
        "flower",
        f"--port={port}",
        f"--address={address}",
    ]
    host = "127.0.0.1" if address in ("", "0.0.0.0") else address
    return FlowerCommand(argv, {AUTH_VARIABLE: f"{user}:{password}"}, f"http://{host}:{port}")


def main(argv: list[str] | None = None) -> NoReturn:
    parser = argparse.ArgumentParser(
        prog="python -m theow_workers.ops.flower",
        description="Start Flower with basic auth from THEOW_FLOWER_USER / THEOW_FLOWER_PASSWORD.",
    )
    parser.add_argument("--address", default="127.0.0.1", help="Address to listen on.")
    parser.add_argument("--port", type=int, default=None, help="[default: THEOW_FLOWER_PORT]")
    args = parser.parse_args(argv)
    try:
        command = flower_command(Settings.load(), args.address, args.port)
    except (ConfigError, FlowerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    command.exec()


if __name__ == "__main__":
    main()
