"""The kombu Redis transport the workers consume with: every popped message checked first.

Kombu's own Redis channel decodes what ``BRPOP`` returns with ``json.loads``
and hands it on; bytes that are not a message raise out of the event loop and
stop the worker (``Unrecoverable error: JSONDecodeError``). This channel pops
the same way, then asks ``envelope.admit``: a message that passes is
delivered as kombu would deliver it; one that does not is set aside
(``dead_letters.set_aside``), and since it was popped and never delivered,
nothing holds it any more: it is acked. The worker reads the next one.

Celery uses it when ``broker_transport`` names it (``celery_app.make_app``
does, for ``redis://`` and ``rediss://`` brokers):

    app.conf.broker_transport = "theow_workers.edge.transport:Transport"

Publishing is kombu's, unchanged. Warning: ``_brpop_read`` and ``_get``
follow kombu's own (5.7); a kombu upgrade must be read against them.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.exceptions import KombuError
from kombu.transport import redis as kombu_redis
from kombu.utils.encoding import bytes_to_str

from theow_workers.edge.dead_letters import set_aside
from theow_workers.edge.envelope import Refusal, admit, task_label

log = logging.getLogger("theow.edge")
# kombu's channel is untyped: its methods are called here as kombu's own subclass would.
_RedisChannel: Any = kombu_redis.Channel
_RedisTransport: Any = kombu_redis.Transport
Empty: Any = kombu_redis.Empty  # type: ignore[attr-defined]

NAME = "theow_workers.edge.transport:Transport"


class Channel(_RedisChannel):  # type: ignore[misc]
    """A Redis channel that delivers only messages ``envelope.admit`` lets through."""

    def _brpop_read(self, **options: Any) -> bool:
        try:
            try:
                dest_item = self.client.parse_response(self.client.connection, "BRPOP", **options)
            except self.connection_errors:
                # As kombu: a broken connection is dropped and made again by the next read.
                self.client.connection.disconnect()
                raise
            if not dest_item:
                raise Empty()
            dest, item = dest_item
            name: str = bytes_to_str(dest)  # type: ignore[no-untyped-call]
            queue = name.rsplit(self.sep, 1)[0]
            self._queue_cycle.rotate(queue)
            message = self._admitted(queue, item)
            if message is not None:
                self._deliver_checked(message, queue, item)
            return True
        finally:
            self._in_poll = None
            self._flush_brpop_reauth()

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        with self.conn_or_acquire() as client:
            for pri in self.priority_steps:
                item = client.rpop(self._q_for_pri(queue, pri))
                if item:
                    self._maybe_update_queues_expire(client, queue)
                    message = self._admitted(queue, item)
                    if message is None:
                        raise Empty()  # set aside: the next read takes the next message
                    return message
            self._maybe_update_queues_expire(client, queue)
            raise Empty()

    def _admitted(self, queue: str, item: bytes) -> Any:
        verdict = admit(
            queue,
            item if isinstance(item, bytes) else str(item).encode(),
            tag=self._next_delivery_tag(),
            max_eta=float(self.visibility_timeout),
        )
        if isinstance(verdict, Refusal):
            self._set_aside(queue, item, verdict)
            return None
        return verdict

    def _deliver_checked(self, message: Any, queue: str, item: bytes) -> None:
        """Deliver to Celery; a message Celery still cannot take is set aside, not fatal."""
        try:
            self.connection._deliver(message, queue)
        except (*self.connection_errors, *self.connection.channel_errors, KombuError):
            raise
        except Exception as exc:
            task = task_label(message.get("headers", {}).get("task"))
            detail = f"{type(exc).__name__} while handing it to Celery"
            self._set_aside(queue, item, Refusal("undeliverable", detail, task))
            tag = message["properties"]["delivery_tag"]
            if tag in self.qos._delivered:
                self.qos.ack(tag)

    def _set_aside(self, queue: str, item: bytes, refusal: Refusal) -> None:
        with self.conn_or_acquire() as client:
            set_aside(client, queue, item, refusal)


class Transport(_RedisTransport):  # type: ignore[misc]
    Channel = Channel
