"""Reading task messages so that no message can crash a worker process.

Clients send facts as one JSON text, so a task message is shallow. A message
from anything else (an old client, a hand-made one) may nest deeply: decoding
it, or pickling it for the pool, would raise RecursionError in the worker's
main process before any task code could record an outcome, and the message
would come back and kill the next worker too.

``install()`` replaces kombu's JSON decoder (in the worker only) with one
that decodes under a depth limit; a message past it becomes a task call
whose single argument says why (``names.UNREADABLE``), so the task records
a rejection and the message is acked like any other. The envelope around the
body was checked before, at the broker edge (``theow_workers.edge``), which
decodes bodies with this same function.
"""

from __future__ import annotations

from collections.abc import Iterable

from kombu.serialization import register
from kombu.utils import json as kombu_json

from theow_client import names
from theow_client.jsontypes import Json

# The task envelope is a few levels; facts add at most FactLimits.depth (32) more.
MAX_MESSAGE_DEPTH = 48


def loads(text: str | bytes) -> Json:
    """kombu's JSON decoding, refusing what is nested past ``MAX_MESSAGE_DEPTH``."""
    try:
        body = kombu_json.loads(text)  # type: ignore[no-untyped-call]
    except RecursionError:
        return unreadable("the message is nested too deeply to decode")
    except ValueError as exc:
        return unreadable(f"the message is not JSON: {str(exc)[:200]}")
    if deeper_than(body, MAX_MESSAGE_DEPTH):
        return unreadable(f"the message is nested deeper than {MAX_MESSAGE_DEPTH} levels")
    return body


def unreadable(reason: str) -> list[Json]:
    """A protocol-2 task body ``[args, kwargs, embed]`` calling the task with the reason."""
    embed = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
    return [[{names.UNREADABLE: reason}], {}, embed]


def deeper_than(value: object, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` containers; iterative, stops early."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Iterable[object] = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def install() -> None:
    """Decode every JSON message in this process with ``loads``."""
    register(  # type: ignore[no-untyped-call]
        "json",
        kombu_json.dumps,
        loads,
        content_type="application/json",
        content_encoding="utf-8",
    )
