"""The Celery application shared by every worker role.

Queues ``resolve``, ``explore`` and ``replay`` are routed by task name
(``theow_client.names.TASK_ROUTES``); a worker chooses its role with
``--queues``. Delivery is at-least-once (late acks, a message whose worker
dies goes back to the queue) and the effect exactly-once (idempotent tasks
keyed by failure id, see ``theow_workers.core.resolve.service``).

Every message a worker consumes passes the broker edge first
(``theow_workers.edge``: a kombu transport that sets aside what is not a
Theow task message), and Celery's built-in tasks (``celery.group``,
``celery.chord_unlock``...) are unregistered: only Theow's tasks run.

Warning: the visibility timeout must stay longer than every task's hard time
limit and retry delay, or Redis hands a still-running task to a second worker.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from celery import Celery
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    celeryd_init,
    worker_ready,
    worker_shutdown,
)

from theow_client import names
from theow_workers import wire
from theow_workers.config import Settings

if TYPE_CHECKING:
    from celery.apps.worker import Worker
    from celery.worker.consumer import Consumer

    from theow_workers.heartbeat import Heartbeat


def make_app(settings: Settings | None = None, edge: bool = True) -> Celery:
    """The app; ``edge=False`` for a monitor that takes no task off a queue (Flower).

    Flower reads the broker's URL back from the connection, and a transport given
    as a class path is not a ``redis://`` URL to it.
    """
    settings = settings or Settings.load()
    wire.install()  # no message, however deep, may crash the worker before the task runs
    if settings.visibility_timeout <= settings.resolve_time_limit:
        raise ValueError(
            f"visibility_timeout ({settings.visibility_timeout}s) must exceed "
            f"resolve_time_limit ({settings.resolve_time_limit}s)"
        )
    app = Celery("theow", broker=settings.redis_url, backend=settings.redis_url)
    transport = {"visibility_timeout": settings.visibility_timeout}
    app.conf.update(
        task_routes=names.TASK_ROUTES,
        task_default_queue=names.QUEUE_RESOLVE,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options=transport,
        result_backend_transport_options=transport,
        result_expires=24 * 3600,
        task_time_limit=settings.resolve_time_limit,
        task_soft_time_limit=max(1, settings.resolve_time_limit - 15),
        broker_connection_retry_on_startup=True,
        worker_send_task_events=True,
        task_send_sent_event=True,
        include=["theow_workers.tasks", "theow_workers.replay.tasks", "theow_workers.ledger.tasks"],
    )
    if edge and urlsplit(settings.redis_url).scheme in EDGE_SCHEMES:
        app.conf.broker_transport = EDGE_TRANSPORT
    app.on_after_finalize.connect(_only_theow_tasks, weak=False)
    return app


# The worker's transport: every message it pops is checked before Celery reads it.
EDGE_TRANSPORT = "theow_workers.edge.transport:Transport"
EDGE_SCHEMES = ("redis", "rediss")
BUILTIN_PREFIX = "celery."


def _only_theow_tasks(sender: Celery, **_: object) -> None:
    # Celery registers its canvas and maintenance tasks on every app: none is Theow's to run,
    # and each would publish or write wherever its message says, with the worker's login.
    for name in [name for name in sender.tasks if name.startswith(BUILTIN_PREFIX)]:
        sender.tasks.unregister(name)


# This module builds the app and nothing else: it imports no service, so the
# services (``runtime``, the explorer) may send tasks through it without a cycle.
settings = Settings.load()
app = make_app(settings)
# Flower's app (``-A theow_workers.celery_app:monitor``): it reads events and asks
# workers, and takes no task message off a queue, so it needs no edge transport.
monitor = make_app(settings, edge=False)


@after_setup_logger.connect
@after_setup_task_logger.connect
def _log_format(logger: logging.Logger, **_: object) -> None:
    # THEOW_LOG_FORMAT=json: one JSON object per line; secrets masked in either format.
    from theow_workers.logs import configure_logger

    configure_logger(logger, settings, task_context=True)


@celeryd_init.connect
def _json_from_the_start(instance: Worker, **_: object) -> None:
    # Before Celery sets up logging: no free-text banner or warnings in JSON mode.
    from theow_workers.logs import prepare_worker

    prepare_worker(instance, settings)


_heartbeats: list[Heartbeat] = []


@worker_ready.connect
def _heartbeat(sender: Consumer, **_: object) -> None:
    # Liveness for `theow doctor` and `theow replay` without the remote control.
    from theow_workers.heartbeat import Heartbeat

    _heartbeats.append(Heartbeat(sender, settings.redis_url).start())


@worker_shutdown.connect
def _heartbeat_stop(**_: object) -> None:
    while _heartbeats:
        _heartbeats.pop().stop()
