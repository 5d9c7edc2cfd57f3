"""Bytes an agent's broker login can push onto a queue: twenty kinds that are not a task message.

``envelope(queue)`` is a well-formed protocol-2 message of the task routed to
``queue``, as kombu's Redis transport writes it; each kind breaks one thing.
``KINDS`` maps a kind's name to (its bytes for a queue, the edge's reason).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable
from typing import Any

from theow_client import names

TASK_OF_QUEUE = {route["queue"]: task for task, route in names.TASK_ROUTES.items()}
TASK_OF_QUEUE[names.QUEUE_RESOLVE] = names.TASK_RESOLVE


def body(args: Any = None, embed: Any = None) -> str:
    nulls = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
    data = [args if args is not None else [{"job": "j"}], {}, embed or nulls]
    return base64.b64encode(json.dumps(data).encode()).decode()


def envelope(queue: str, task: str | None = None, **changes: Any) -> dict[str, Any]:
    """A message as the client's Celery app writes it; ``changes`` replace top-level fields."""
    task_id = str(uuid.uuid4())
    message: dict[str, Any] = {
        "body": body(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {
            "lang": "py",
            "task": task or TASK_OF_QUEUE[queue],
            "id": task_id,
            "shadow": None,
            "eta": None,
            "expires": None,
            "group": None,
            "group_index": None,
            "retries": 0,
            "timelimit": [None, None],
            "root_id": task_id,
            "parent_id": None,
            "argsrepr": "[...]",
            "kwargsrepr": "{}",
            "origin": "gen1@agent",
            "ignore_result": False,
            "replaced_task_nesting": 0,
            "stamped_headers": None,
            "stamps": {},
        },
        "properties": {
            "correlation_id": task_id,
            "reply_to": "",
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": str(uuid.uuid4()),
        },
    }
    message.update(changes)
    return message


def with_headers(queue: str, **headers: Any) -> dict[str, Any]:
    message = envelope(queue)
    message["headers"].update(headers)
    return message


def with_properties(queue: str, **properties: Any) -> dict[str, Any]:
    message = envelope(queue)
    message["properties"].update(properties)
    return message


def without_header(queue: str, name: str) -> dict[str, Any]:
    message = envelope(queue)
    del message["headers"][name]
    return message


def raw(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode()


def _chained(queue: str) -> dict[str, Any]:
    follow = {
        "task": names.TASK_EXPLORE,
        "args": [{}],
        "kwargs": {},
        "options": {"queue": "theow:lock:index-sync"},
        "subtask_type": None,
    }
    nulls = {"callbacks": [follow], "errbacks": None, "chain": None, "chord": None}
    return envelope(queue, body=body(embed=nulls))


Kind = Callable[[str], bytes]
KINDS: dict[str, tuple[Kind, str]] = {
    "not JSON": (lambda q: b"garbage", "not-json"),
    "empty": (lambda q: b"", "not-json"),
    "a JSON array": (lambda q: b"[]", "not-an-envelope"),
    "null": (lambda q: b"null", "not-an-envelope"),
    "invalid UTF-8": (lambda q: b"\xff\xfe{" + raw(envelope(q))[1:], "not-json"),
    "an object, not an envelope": (lambda q: b'{"task": "theow.resolve"}', "not-an-envelope"),
    "body a number": (lambda q: raw(envelope(q, body=5)), "not-an-envelope"),
    "headers a list": (lambda q: raw(envelope(q, headers=[1])), "not-an-envelope"),
    "unknown body_encoding": (
        lambda q: raw(with_properties(q, body_encoding="rot13")),
        "unknown-encoding",
    ),
    "body not base64": (lambda q: raw(envelope(q, body="!!not base64!!")), "bad-base64"),
    "pickle": (
        lambda q: raw(envelope(q, **{"content-type": "application/x-python-serialize"})),
        "bad-content",
    ),
    "no task header": (lambda q: raw(without_header(q, "task")), "bad-headers"),
    "task a list": (lambda q: raw(with_headers(q, task=[names.TASK_RESOLVE])), "bad-headers"),
    "unknown task": (lambda q: raw(with_headers(q, task="os.system")), "not-a-theow-task"),
    "built-in task": (lambda q: raw(with_headers(q, task="celery.accumulate")), "not-a-theow-task"),
    "body not [args, kwargs, embed]": (
        lambda q: raw(envelope(q, body=base64.b64encode(b"5").decode())),
        "bad-body",
    ),
    "a callback to run after": (lambda q: raw(_chained(q)), "callbacks"),
    "nested 100,000 deep": (lambda q: b"[" * 100_000 + b"]" * 100_000, "too-deep"),
    "a 100 KB header": (lambda q: raw(with_headers(q, origin="o" * 100_000)), "bad-headers"),
    "retries a string": (lambda q: raw(with_headers(q, retries="many")), "bad-headers"),
}
