"""The ``theow.replay`` task: one chunk of a replay job (see ``runner``).

Routed to the ``replay`` queue by name (``theow_client.names.TASK_ROUTES``),
with the app's late acks and prefetch 1: a worker killed mid-chunk puts the
chunk back, and the redelivery redoes it (nothing of it was committed).

Deliveries are counted in Redis with ``names.key_deliveries``: per chunk as
``theow:deliveries:replay-chunk:<task id>`` (a second delivery switches the
chunk to one transaction per item), and per item, once careful, under its
failure id exactly as a live failure is.
"""

from __future__ import annotations

import contextlib
import cProfile
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

from theow_client import names, signing
from theow_client.jsontypes import Json, JsonObject
from theow_workers.celery_app import app
from theow_workers.identity import WORKER, Refused, count_refused
from theow_workers.replay.runner import ReplayRunner, replay_runner
from theow_workers.runtime import Runtime
from theow_workers.worker import ServicesTask

log = logging.getLogger("theow.replay")


class ReplayTask(ServicesTask):
    """A task with its process's replay runner too, built on the services it has."""

    # The runner and the services it was built on: forgetting them (a fork) forgets it.
    _runner: ClassVar[tuple[Runtime, ReplayRunner] | None] = None

    @property
    def runner(self) -> ReplayRunner:
        rt = self.services
        if ReplayTask._runner is None or ReplayTask._runner[0] is not rt:

            def version() -> str:
                return rt.knowledge().book.version

            runner = replay_runner(rt.store, rt.service, rt.deliveries, rt.settings, version)
            ReplayTask._runner = (rt, runner)
        return ReplayTask._runner[1]


@app.task(name=names.TASK_REPLAY, base=ReplayTask, bind=True)
def replay(self: ReplayTask, chunk: Json = None, *_: object, **__: object) -> JsonObject:
    """Replay one chunk of a job's items; returns how many were recorded.

    Only a chunk signed with the workers' secret (the operator's CLI shares it) is replayed.
    """
    if isinstance(chunk, dict) and names.UNREADABLE in chunk:
        # See theow_workers.wire; the driver sends the items again.
        log.error("replay chunk %s unreadable: %s", self.request.id, chunk[names.UNREADABLE])
        return {"recorded": 0, "unreadable": str(chunk[names.UNREADABLE])}
    rt = self.services
    try:
        rt.verifier.verify(names.TASK_REPLAY, chunk, WORKER)
    except Refused as refused:
        count_refused(rt.redis, names.TASK_REPLAY)
        log.error("replay chunk %s refused: %s", self.request.id, refused)
        return {"recorded": 0, "refused": str(refused)}
    chunk = signing.unsigned(chunk)
    run = self.runner
    delivery = rt.deliveries.count(f"replay-chunk:{self.request.id}")
    if not PROFILE_DIR:
        return run.run(chunk, delivery=delivery)
    with _profiled(str(chunk.get("job_id"))):
        return run.run(chunk, delivery=delivery)


# A directory: each pool process profiles a job's chunks (cProfile) into
# replay-<job>-<pid>.prof there, for ``benchmarks/replay.py --profile``. Off unless set.
PROFILE_DIR = os.environ.get("THEOW_REPLAY_PROFILE", "")
_profiles: dict[str, cProfile.Profile] = {}


@contextlib.contextmanager
def _profiled(job_id: str) -> Iterator[None]:
    """This process's chunks of the job so far, in one profile written after each chunk."""
    profile = _profiles.setdefault(job_id, cProfile.Profile())
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        profile.dump_stats(Path(PROFILE_DIR) / f"replay-{job_id}-{os.getpid()}.prof")
