"""How a Celery task reaches its process's services: ``self.services``, not a global.

Every theow task is declared with ``base=ServicesTask`` and ``bind=True``.
The services (``runtime.build(settings, "worker")``) are built on first use
and shared by every task of the process; after a fork, a pool process
forgets the parent's (sockets, pools and the model must not be shared
across a fork) and builds its own.

>>> @app.task(name="theow.example", base=ServicesTask, bind=True)  # doctest: +SKIP
... def example(self: ServicesTask) -> str:
...     return self.services.settings.redis_url
"""

from __future__ import annotations

from typing import ClassVar

from celery import Task
from celery.signals import worker_process_init

from theow_workers import celery_app
from theow_workers.runtime import Runtime, build


class ServicesTask(Task):  # type: ignore[misc]  # Celery's Task is untyped
    """A task with the services of its process as ``self.services``."""

    # One per process for every task (a task's own would load the model once per task).
    _built: ClassVar[Runtime | None] = None

    @property
    def services(self) -> Runtime:
        if ServicesTask._built is None:
            ServicesTask._built = build(celery_app.settings, "worker")
        return ServicesTask._built

    @classmethod
    def forget_services(cls) -> None:
        """Drop this process's services: after a fork, and between tests."""
        ServicesTask._built = None


@worker_process_init.connect
def _after_fork(**_: object) -> None:
    # Cheap on purpose (Celery allows 4 s here): only forget the parent's clients.
    ServicesTask.forget_services()
