"""Whether the bytes popped off a queue are a Theow task message a worker may run.

``admit(queue, raw, ...)`` returns the envelope kombu delivers, rebuilt from
checked fields, or a ``Refusal`` whose ``reason`` is one of ``REASONS`` (a
fixed set: it labels a metric) and whose ``detail`` is one line for the log.

What passes: a JSON object of at most ``MAX_ENVELOPE_BYTES`` and
``MAX_ENVELOPE_DEPTH`` levels; a ``base64`` body of ``application/json`` in
UTF-8; protocol-2 headers, each of its type (any other header is dropped:
Celery would read it into the task's context, ``callbacks`` or ``is_eager``
included), naming a Theow task (``names.TASK_ROUTES``) on that task's own
queue, with no ETA further ahead than the visibility timeout; a body that decodes to
``[args, kwargs, embed]`` with nothing to call afterwards (no callbacks,
errbacks, chain or chord: Theow sends none, and the worker would publish them
with its own login). A body too deep or not JSON still passes: the task
records it as a rejected failure (``theow_workers.wire``), as before.

A message on a queue that is not a task queue (the reply queue of a remote
control command, ``celery inspect ping``: only workers and operators may write
there) is only checked to be an envelope kombu can read.

What the sender says about delivery is not kept: the delivery tag is the
worker's own, and the message goes back (when a worker dies holding it) to
the queue it came from, never to a queue or key its ``delivery_info`` names.

>>> refused = admit("resolve", b"garbage", tag="t", max_eta=60)
>>> (refused.reason, refused.task)
('not-json', 'unknown')
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from kombu.utils import json as kombu_json

from theow_client import names
from theow_client.jsontypes import Json, JsonObject
from theow_workers import wire

# Twice the JSON text a worker parses of one failure's facts (FactLimits.wire), base64'd.
MAX_ENVELOPE_BYTES = 32 * 1024 * 1024
# A real envelope is 3 levels deep (headers -> timelimit); stamps could add one or two.
MAX_ENVELOPE_DEPTH = 8
MAX_HEADER_TEXT = 256
MAX_REPR = 4096  # argsrepr and kwargsrepr: Celery cuts them to 1024, replay's summary is short

THEOW_TASKS = frozenset(names.TASK_ROUTES)
BUILTIN_PREFIX = "celery."

REASONS = (
    "too-large",
    "not-json",
    "too-deep",
    "not-an-envelope",
    "unknown-encoding",
    "bad-base64",
    "bad-content",
    "bad-headers",
    "not-a-theow-task",
    "wrong-queue",
    "bad-body",
    "callbacks",
    "undeliverable",
)

_NONE = type(None)
# Protocol-2 headers (celery.app.amqp.as_task_v2) and their types; any but task and id may be
# null (Celery's own clients send ``ignore_result: null``).
_HEADERS: dict[str, tuple[type, ...]] = {
    "lang": (str,),
    "task": (str,),
    "id": (str,),
    "shadow": (str,),
    "eta": (str,),
    "expires": (str,),
    "group": (),  # a group or chord makes the worker write and publish where it says
    "group_index": (),
    "retries": (int,),
    "timelimit": (list,),
    "root_id": (str,),
    "parent_id": (str,),
    "argsrepr": (str,),
    "kwargsrepr": (str,),
    "origin": (str,),
    "ignore_result": (bool,),
    "replaced_task_nesting": (int,),
    "stamped_headers": (list,),
    "stamps": (dict,),
    "redelivered": (bool,),  # set by kombu when it puts back a message a worker held
}
_REQUIRED = ("task", "id")
_EMBED = ("callbacks", "errbacks", "chain", "chord")


@dataclass(frozen=True)
class Refusal:
    reason: str  # one of REASONS
    detail: str  # one line, bounded, for the log and the dead letter
    task: str  # a Theow task name, "celery" for a built-in, else "unknown": a bounded label


class _Refused(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def task_label(name: object) -> str:
    """The metric label of a message's task name: never the sender's free text."""
    if isinstance(name, str) and name in THEOW_TASKS:
        return name
    if isinstance(name, str) and name.startswith(BUILTIN_PREFIX):
        return "celery"
    return "unknown"


def admit(
    queue: str, raw: bytes, *, tag: str, max_eta: float, now: datetime | None = None
) -> JsonObject | Refusal:
    """The envelope to deliver for ``raw`` popped off ``queue``, or why it is refused.

    ``tag``: the delivery tag to give it. ``max_eta``: how many seconds ahead
    an ETA may be (the visibility timeout: past it Redis would hand the
    message to a second worker while the first still holds it).
    """
    task: object = None
    try:
        envelope = _parsed(raw)
        headers = envelope.get("headers")
        task = headers.get("task") if isinstance(headers, dict) else None
        _check_envelope(envelope)
        assert isinstance(headers, dict)  # _check_envelope checked it
        if queue not in names.QUEUES:  # a remote-control reply: no task, only workers write it
            return {**envelope, "properties": {**_properties(envelope), "delivery_tag": tag}}
        _check_headers(headers, queue, max_eta, now or datetime.now(UTC))
        _check_body(envelope)
        known = {name: value for name, value in headers.items() if name in _HEADERS}
        return _rebuilt(envelope, known, queue, tag)
    except _Refused as refused:
        return Refusal(refused.reason, str(refused), task_label(task))
    except Exception as exc:  # a check that did not foresee these bytes still refuses them
        return Refusal("not-an-envelope", f"{type(exc).__name__} while reading it", "unknown")


def _parsed(raw: bytes) -> JsonObject:
    if len(raw) > MAX_ENVELOPE_BYTES:
        raise _Refused("too-large", f"{len(raw)} bytes, more than {MAX_ENVELOPE_BYTES}")
    try:
        text = raw.decode("utf-8")
        envelope = kombu_json.loads(text)  # type: ignore[no-untyped-call]
    except RecursionError:
        raise _Refused("too-deep", "nested too deeply to decode") from None
    except ValueError as exc:  # UnicodeDecodeError is one
        raise _Refused("not-json", f"not JSON: {_short(exc)}") from None
    if not isinstance(envelope, dict):
        raise _Refused("not-an-envelope", f"a JSON {type(envelope).__name__}, not an object")
    if wire.deeper_than(envelope, MAX_ENVELOPE_DEPTH):
        raise _Refused("too-deep", f"nested deeper than {MAX_ENVELOPE_DEPTH} levels")
    return envelope


def _check_envelope(envelope: JsonObject) -> None:
    for field, kind in (("body", str), ("headers", dict), ("properties", dict)):
        if not isinstance(envelope.get(field), kind):
            raise _Refused("not-an-envelope", f"{field} is not a {kind.__name__}")
    properties = envelope["properties"]
    assert isinstance(properties, dict)
    encoding = properties.get("body_encoding")
    if encoding != "base64":
        raise _Refused("unknown-encoding", f"body_encoding {_shown(encoding)}, not base64")
    content = (envelope.get("content-type"), envelope.get("content-encoding"))
    if content != ("application/json", "utf-8"):
        raise _Refused("bad-content", f"content {_shown(content[0])} in {_shown(content[1])}")
    for field, kinds in (
        ("correlation_id", (str, _NONE)),
        ("reply_to", (str, _NONE)),
        ("delivery_mode", (int, _NONE)),
        ("priority", (int, _NONE)),
    ):
        value = properties.get(field)
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise _Refused("not-an-envelope", f"properties.{field} is {_shown(value)}")
        if isinstance(value, str) and len(value) > MAX_HEADER_TEXT:
            raise _Refused("not-an-envelope", f"properties.{field} has {len(value)} characters")


def _check_headers(headers: JsonObject, queue: str, max_eta: float, now: datetime) -> None:
    for name, value in headers.items():
        kinds = _HEADERS.get(name)
        if kinds is None:
            continue  # not delivered (_rebuilt): Celery would read it into the task's context
        if name not in _REQUIRED:
            kinds = (*kinds, _NONE)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise _Refused("bad-headers", f"header {name} is {_shown(value)}")
        limit = MAX_REPR if name in ("argsrepr", "kwargsrepr") else MAX_HEADER_TEXT
        if isinstance(value, str) and len(value) > limit:
            raise _Refused("bad-headers", f"header {name} has {len(value)} characters")
    for required in _REQUIRED:
        if required not in headers:
            raise _Refused("bad-headers", f"no {required} header")
    task = headers["task"]
    if task not in THEOW_TASKS:
        raise _Refused("not-a-theow-task", f"task {_shown(task)} is not one of Theow's")
    assert isinstance(task, str)
    if names.TASK_ROUTES[task]["queue"] != queue:
        raise _Refused("wrong-queue", f"{task} is consumed from {names.TASK_ROUTES[task]['queue']}")
    if headers.get("stamped_headers") or headers.get("stamps"):
        raise _Refused("bad-headers", "stamped headers")
    _check_timelimit(headers.get("timelimit") or [None, None], max_eta)
    for name in ("eta", "expires"):
        when = _when(headers.get(name), name)
        if name == "eta" and when is not None and when > now + timedelta(seconds=max_eta):
            raise _Refused("bad-headers", f"eta {when.isoformat()} more than {max_eta:g}s ahead")


def _check_timelimit(value: Json, most: float) -> None:
    if not isinstance(value, list) or len(value) != 2:
        raise _Refused("bad-headers", "timelimit is not [hard, soft]")
    for limit in value:
        if limit is None:
            continue
        if isinstance(limit, bool) or not isinstance(limit, (int, float)):
            raise _Refused("bad-headers", f"timelimit {_shown(limit)}")
        if not (0 < limit <= most) or math.isnan(limit):
            raise _Refused("bad-headers", f"timelimit {limit:g}s, not within (0, {most:g}]")


def _when(value: Json, name: str) -> datetime | None:
    if value is None:
        return None
    assert isinstance(value, str)
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise _Refused("bad-headers", f"{name} {_shown(value)} is not a time") from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _check_body(envelope: JsonObject) -> None:
    body = envelope["body"]
    assert isinstance(body, str)
    try:
        data = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise _Refused("bad-base64", "the body is not valid base64") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Refused("bad-content", "the body is not UTF-8") from None
    decoded = wire.loads(text)  # too deep or not JSON: a stand-in the task records as rejected
    if not (
        isinstance(decoded, list)
        and len(decoded) == 3
        and isinstance(decoded[0], list)
        and isinstance(decoded[1], dict)
        and isinstance(decoded[2], (dict, _NONE))
    ):
        raise _Refused("bad-body", "the body is not [args, kwargs, embed]")
    embed = decoded[2] or {}
    assert isinstance(embed, dict)
    unknown = set(embed) - set(_EMBED)
    if unknown:
        raise _Refused("bad-body", f"unknown embed field {_shown(sorted(unknown)[0])}")
    linked = [field for field in _EMBED if embed.get(field)]
    if linked:
        raise _Refused("callbacks", f"the message asks to call {linked[0]} after the task")


def _properties(envelope: JsonObject) -> JsonObject:
    properties = envelope["properties"]
    assert isinstance(properties, dict)
    return properties


def _rebuilt(envelope: JsonObject, headers: JsonObject, queue: str, tag: str) -> JsonObject:
    """The envelope with only checked fields; delivery as the worker decides it."""
    properties = _properties(envelope)
    return {
        "body": envelope["body"],
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": headers,
        "properties": {
            "correlation_id": properties.get("correlation_id"),
            "reply_to": properties.get("reply_to"),
            "delivery_mode": properties.get("delivery_mode"),
            "priority": properties.get("priority") or 0,
            "body_encoding": "base64",
            "delivery_tag": tag,
            "delivery_info": {
                "exchange": "",
                "routing_key": queue,
                # Celery requeues a task whose worker died only once: the flag says it was.
                "redelivered": headers.get("redelivered") is True,
            },
        },
    }


def _shown(value: object) -> str:
    """A value the sender chose, as one short line: repr escapes newlines and controls."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _short(exc: Exception) -> str:
    return json.dumps(str(exc)[:120])[1:-1]
