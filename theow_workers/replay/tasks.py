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
import dataclasses
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from celery import Task
from celery.signals import worker_process_init

from theow_client import names, signing
from theow_workers import runtime
from theow_workers.celery_app import app
from theow_workers.core.service import ResolveService
from theow_workers.delivery import DeliveryPolicy
from theow_workers.identity import WORKER, Refused, count_refused
from theow_workers.replay.runner import ReplayRunner
from theow_workers.store.replay import ReplayStore
from theow_workers.store.replay_chunk import ChunkStore

log = logging.getLogger("theow.replay")

_runner: ReplayRunner | None = None


@app.task(name=names.TASK_REPLAY, bind=True)
def replay(self: Task, chunk: Any = None, *_: Any, **__: Any) -> dict[str, Any]:
    """Replay one chunk of a job's items; returns how many were recorded.

    Only a chunk signed with the workers' secret (the operator's CLI shares it) is replayed.
    """
    if isinstance(chunk, dict) and names.UNREADABLE in chunk:
        # See theow_workers.wire; the driver sends the items again.
        log.error("replay chunk %s unreadable: %s", self.request.id, chunk[names.UNREADABLE])
        return {"recorded": 0, "unreadable": str(chunk[names.UNREADABLE])}
    rt = runtime.current()
    try:
        rt.verifier.verify(names.TASK_REPLAY, chunk, WORKER)
    except Refused as refused:
        count_refused(rt.redis, names.TASK_REPLAY)
        log.error("replay chunk %s refused: %s", self.request.id, refused)
        return {"recorded": 0, "refused": str(refused)}
    chunk = signing.unsigned(chunk)
    run = runner()
    delivery = _count(f"replay-chunk:{self.request.id}")
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


def _count(delivery_id: str) -> int:
    """How many times this delivery id was started (Redis, expires after a day)."""
    return runtime.current().deliveries.count(delivery_id)


def runner() -> ReplayRunner:
    """This process's runner, built on the runtime's clients (after the fork)."""
    global _runner
    if _runner is not None:
        return _runner
    rt = runtime.current()
    services: dict[bool, tuple[ResolveService, ChunkStore]] = {}

    def service_for(dry_run: bool) -> tuple[ResolveService, ChunkStore]:
        """The live service's rules, actions and settings, writing into a ChunkStore."""
        if dry_run not in services:
            live = rt.service
            writes = ChunkStore(rt.store, count_rules=not dry_run)
            service = ResolveService(
                writes,
                rulebook=live.rulebook,
                actions=live.actions,
                similarity=live.similarity,
                settings=dataclasses.replace(live.settings, dry_run=dry_run),
                normals=live.normals,  # a replayed failure meets its job's normal too
            )
            services[dry_run] = (service, writes)
        return services[dry_run]

    _runner = ReplayRunner(
        ReplayStore(rt.store.engine),
        service_for,
        deliveries=_count,
        policy=DeliveryPolicy.replay(rt.settings.max_deliveries, rt.settings.resolve_time_limit),
        rules_version=lambda: rt.knowledge().book.version,
        time_budget=rt.settings.resolve_time_limit / 3,
    )
    return _runner


@worker_process_init.connect
def _after_fork(**_: Any) -> None:
    global _runner
    _runner = None
