"""A heartbeat per worker and queue it consumes, read by ``theow doctor`` and ``theow replay``.

Celery's remote control (``inspect active_queues``) would answer the same
question, but agents must not reach the control channel and operators should
not need it to learn that nothing consumes ``resolve``. So each worker's main
process writes ``theow:consumer:<queue>:<worker>`` (``names.key_consumer``)
every few seconds with a short TTL, and deletes it at once when it stops
consuming the queue (``cancel_consumer``, a warm shutdown). A crashed worker's
keys expire within ``CONSUMER_TTL`` seconds.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from typing import TYPE_CHECKING

from theow_client import names

if TYPE_CHECKING:
    from celery.worker.consumer import Consumer
    from redis import Redis

log = logging.getLogger("theow.heartbeat")


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
                value = {"worker": self.worker, "queue": queue, "pid": os.getpid(), "at": now}
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
