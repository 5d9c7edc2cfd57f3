"""Where the client finds the broker, its spool and the client-side actions.

This is also the one place that builds the client's Celery app.

Build agents configure the client through the environment only: there is no
config file to ship to every agent. An explicit argument always wins over the
environment, and the environment over the defaults.

>>> import os
import tempfile
>>> os.environ["THEOW_REDIS_URL"] = "redis://theow.internal:6379/0"
>>> redis_url()
'redis://theow.internal:6379/0'
>>> redis_url("redis://elsewhere:6379/1")
'redis://elsewhere:6379/1'
>>> del os.environ["THEOW_REDIS_URL"]
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from celery import Celery

from theow_client import names

ENV_REDIS_URL = "THEOW_REDIS_URL"
ENV_SPOOL_DIR = "THEOW_SPOOL_DIR"
ENV_ACTIONS_DIR = "THEOW_ACTIONS_DIR"

DEFAULT_SPOOL_DIR = "~/.cache/theow/spool"
DEFAULT_ACTIONS_DIR = "actions"

# Seconds to connect to, or hear back from, the broker before spooling instead:
# a build agent must not stall on a dead Theow.
DEFAULT_CONNECT_TIMEOUT = 2.0


def redis_url(explicit: str | None = None) -> str:
    """The Redis URL used as both Celery broker and result backend."""
    return explicit or os.environ.get(ENV_REDIS_URL) or names.DEFAULT_REDIS_URL


def spool_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The directory holding failures that could not be sent yet."""
    raw = explicit or os.environ.get(ENV_SPOOL_DIR) or DEFAULT_SPOOL_DIR
    try:
        return Path(raw).expanduser()
    except RuntimeError:  # no home directory, as in some CI containers
        return Path(tempfile.gettempdir()) / "theow-spool"


def actions_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The directory whose ``*.py`` files define the client-side actions.

    Relative to the current directory by default: a build usually runs from
    the checkout that carries its ``actions/``.
    """
    raw = explicit or os.environ.get(ENV_ACTIONS_DIR) or DEFAULT_ACTIONS_DIR
    return Path(raw).expanduser()


def celery_app(url: str, timeout: float = DEFAULT_CONNECT_TIMEOUT) -> Any:
    """A minimal Celery app that sends tasks by name and reads their results.

    ``url`` is both broker and result backend. Every connection attempt and
    round trip is bounded by ``timeout`` and nothing is retried: the caller
    spools instead of waiting for a broker that may never come back.
    """
    app = Celery("theow-client", broker=url, backend=url)
    app.conf.update(
        task_routes=names.TASK_ROUTES,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        broker_connection_retry_on_startup=False,
        broker_connection_timeout=timeout,
        broker_transport_options={
            "max_retries": 0,
            "socket_connect_timeout": timeout,
            "socket_timeout": timeout,
        },
        redis_socket_connect_timeout=timeout,
        redis_socket_timeout=timeout,
        # Without this the result backend retries a dead Redis for ~20 s.
        result_backend_transport_options={"retry_policy": {"max_retries": 0}},
    )
    return app
