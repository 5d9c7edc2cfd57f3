"""A heartbeat per worker and queue it consumes, read by ``theow doctor`` and ``theow replay``.

Celery's remote control (``inspect active_queues``) would answer the same
question, but agents must not reach the control channel and operators should
not need it to learn that nothing consumes ``resolve``. So each worker's main
process writes ``theow:consumer:<queue>:<worker>`` (``names.key_consumer``)
every few seconds with a short TTL, and deletes it at once when it stops
consuming the queue (``cancel_consumer``, a warm shutdown). A crashed worker's
keys expire within ``CONSUMER_TTL`` seconds.

Each process that resolves also says which rules version it serves
(``theow:served:<host>:<pid>``, ``ServedReport``), so that ``theow review
approve`` can tell when a rule it wrote is live on every running worker
(``live_on``).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from theow_client import names

if TYPE_CHECKING:
    from celery.worker.consumer import Consumer
    from redis import Redis

log = logging.getLogger("theow.heartbeat")

HOST = socket.gethostname()


class Heartbeat:
    """The heartbeat thread of one worker, started when it is ready."""

    def __init__(self, consumer: Consumer, redis_url: str) -> None:
        import redis

        self.consumer = consumer
        self.worker = str(consumer.hostname)
        self.redis: Redis = redis.Redis.from_url(redis_url, socket_timeout=5)
        self.beating: set[str] = set()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="theow-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self.thread.start()
        return self

    def queues(self) -> set[str]:
        """The queues the worker consumes now: ``cancel_consumer`` deselects one at once."""
        return set(self.consumer.app.amqp.queues.consume_from)

    def beat(self) -> None:
        queues = self.queues()
        now = time.time()
        with self.redis.pipeline(transaction=False) as pipe:
            for queue in sorted(queues):
                value = {
                    "worker": self.worker,
                    "queue": queue,
                    "pid": os.getpid(),
                    "host": HOST,
                    "at": now,
                }
                pipe.set(
                    names.key_consumer(queue, self.worker), json.dumps(value), ex=names.CONSUMER_TTL
                )
            for queue in self.beating - queues:
                pipe.delete(names.key_consumer(queue, self.worker))
            pipe.execute()
        self.beating = queues

    def stop(self) -> None:
        """No longer consuming anything: the keys go now, not after their TTL."""
        self.stopped.set()
        try:
            keys = [names.key_consumer(q, self.worker) for q in self.beating]
            if keys:
                self.redis.delete(*keys)
        except Exception as exc:  # the broker may already be gone; the TTL then ends them
            log.info("heartbeat keys of %s left to expire: %s", self.worker, exc)
        self.redis.close()

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                self.beat()
            except Exception as exc:  # a lost broker: Celery reconnects, so do we
                log.warning("heartbeat of %s not written: %s", self.worker, exc)
            self.stopped.wait(names.CONSUMER_BEAT)


def consumers(redis: Redis, queue: str) -> list[str]:
    """The workers whose heartbeat on ``queue`` is alive, sorted."""
    prefix = names.key_consumer(queue, "")
    found = redis.scan_iter(match=names.key_consumer(queue, "*"), count=500)
    return sorted(
        k.decode()[len(prefix) :] if isinstance(k, bytes) else k[len(prefix) :] for k in found
    )


class ServedReport:
    """Writes which rules version this process serves: at once when it changes, else every
    ``CONSUMER_BEAT`` seconds (the key expires ``CONSUMER_TTL`` seconds after the last)."""

    def __init__(self) -> None:
        self._said: tuple[str, float] = ("", 0.0)  # the version last written, and when

    def now(self, redis: Redis, version: str) -> None:
        said, at = self._said
        if version == said and time.monotonic() - at < names.CONSUMER_BEAT:
            return
        value = {"host": HOST, "pid": os.getpid(), "parent": os.getppid(), "version": version}
        try:
            redis.set(names.key_served(HOST, os.getpid()), json.dumps(value), ex=names.CONSUMER_TTL)
        except Exception as exc:  # a lost broker costs only the report, never a resolution
            log.info("served rules version not reported: %s", exc)
            return
        self._said = (version, time.monotonic())


@dataclass(frozen=True)
class Rollout:
    """Which of the running resolver workers serve a rules version."""

    workers: tuple[str, ...]  # the workers consuming ``resolve`` now
    serving: tuple[str, ...]  # those none of whose processes serves another version

    @property
    def live(self) -> bool:
        return bool(self.workers) and len(self.serving) == len(self.workers)


def live_on(redis: Redis, version: str, queue: str = names.QUEUE_RESOLVE) -> Rollout:
    """The workers on ``queue`` that serve ``version``.

    A worker serves it when every process of it that has loaded rules serves
    it; a process that has loaded none yet reads the rule files as they are
    at its first failure.
    """
    beats = _values(redis, names.key_consumer(queue, "*"))
    served = _values(redis, names.key_served("*", "*"))
    workers, serving = [], []
    for beat in sorted(beats, key=lambda b: str(b.get("worker"))):
        worker = str(beat.get("worker"))
        workers.append(worker)
        own = [process for process in served if _of(beat, process)]
        if all(process.get("version") == version for process in own):
            serving.append(worker)
    return Rollout(tuple(workers), tuple(serving))


def _of(beat: dict[str, object], process: dict[str, object]) -> bool:
    """Whether the process that wrote ``process`` is the worker of heartbeat ``beat`` or its child."""
    same_host = beat.get("host") in (None, process.get("host"))
    return same_host and beat.get("pid") in (process.get("pid"), process.get("parent"))


def _values(redis: Redis, pattern: str) -> list[dict[str, object]]:
    keys = list(redis.scan_iter(match=pattern, count=500))
    found: Iterable[bytes | str | None] = redis.mget(keys) if keys else []
    values = []
    for raw in found:
        try:
            value = json.loads(raw) if raw is not None else None
        except ValueError:
            continue
        if isinstance(value, dict):
            values.append(value)
    return values


@dataclass(frozen=True)
class Held:
    """What holds a failure that has no verdict yet: a worker resolving it, or nothing."""

    resolving: bool  # a worker holds its claim now
    deliveries: int  # how often a worker took it (more than once: a worker was lost on it)
    workers: int  # resolver workers running

    def why(self, age: str) -> str:
        """``pending: …`` as ``theow failures show`` says it; ``age``: ``3 s ago``."""
        if self.resolving:
            return f"pending: a worker is resolving it (received {age})"
        if not self.workers:
            return (
                f"pending: received {age}; no resolver worker is running to decide it "
                "(`theow up`, or `theow worker` on your fleet; `theow doctor` checks)"
            )
        return (
            f"pending: received {age}; no worker holds it now (taken {self.deliveries} time(s): "
            "the worker was lost before deciding it, and the broker delivers it again)"
        )


def held(redis: Redis, failure_id: str) -> Held:
    """Whether a worker holds ``failure_id`` now, how often one took it, and who could."""
    resolving, deliveries = redis.mget(
        [names.key_resolving(failure_id), names.key_deliveries(failure_id)]
    )
    return Held(
        resolving is not None,
        int(deliveries or 0),
        len(consumers(redis, names.QUEUE_RESOLVE)),
    )
