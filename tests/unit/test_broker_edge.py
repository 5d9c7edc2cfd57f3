"""The broker edge's check: which bytes off a queue are a Theow task message, and why not."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from tests.security.edge_corpus import KINDS, envelope, raw, with_headers
from theow_client import names
from theow_workers.edge.envelope import MAX_ENVELOPE_BYTES, Refusal, admit


def admitted(queue: str, message: bytes) -> dict:
    found = admit(queue, message, tag="worker-tag", max_eta=3600)
    assert not isinstance(found, Refusal), found
    return found


@pytest.mark.parametrize("queue", names.QUEUES)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_of_bad_bytes_is_refused_with_its_reason(kind, queue):
    make, reason = KINDS[kind]
    refused = admit(queue, make(queue), tag="t", max_eta=3600)
    assert isinstance(refused, Refusal)
    assert refused.reason == reason, refused.detail
    assert "\n" not in refused.detail and len(refused.detail) < 200


@pytest.mark.parametrize("queue", names.QUEUES)
def test_a_message_as_celery_writes_it_is_delivered_with_the_workers_own_delivery(queue):
    message = envelope(queue)
    message["properties"]["delivery_info"] = {"exchange": "", "routing_key": "explore"}
    found = admitted(queue, raw(message))
    assert found["body"] == message["body"] and found["headers"] == message["headers"]
    # Put back where it came from if the worker dies: never where the sender said.
    assert found["properties"]["delivery_info"] == {
        "exchange": "",
        "routing_key": queue,
        "redelivered": False,
    }
    assert found["properties"]["delivery_tag"] == "worker-tag"


def test_a_body_no_one_can_decode_still_reaches_the_task_which_records_it():
    import base64

    deep = base64.b64encode(b"[[" + b"[" * 600 + b"]" * 600 + b"], {}, {}]").decode()
    assert admitted("resolve", raw(envelope("resolve", body=deep)))


def test_a_theow_task_on_another_tasks_queue_is_refused():
    refused = admit(
        "resolve", raw(envelope("resolve", task=names.TASK_EXPLORE)), tag="t", max_eta=60
    )
    assert isinstance(refused, Refusal)
    assert (refused.reason, refused.task) == ("wrong-queue", names.TASK_EXPLORE)


def test_an_eta_past_the_visibility_timeout_is_refused_and_a_retrys_is_not():
    now = datetime.now(UTC)
    soon = raw(with_headers("resolve", eta=(now + timedelta(seconds=5)).isoformat()))
    later = raw(with_headers("resolve", eta=(now + timedelta(days=365)).isoformat()))
    assert admitted("resolve", soon)
    refused = admit("resolve", later, tag="t", max_eta=3600)
    assert isinstance(refused, Refusal) and refused.reason == "bad-headers"


def test_a_message_larger_than_the_bound_is_refused_before_it_is_parsed():
    refused = admit("resolve", b"{" * (MAX_ENVELOPE_BYTES + 1), tag="t", max_eta=60)
    assert isinstance(refused, Refusal) and refused.reason == "too-large"


def test_labels_are_bounded_whatever_the_task_name():
    labels = {
        admit("resolve", raw(with_headers("resolve", task=name)), tag="t", max_eta=60).task
        for name in ("celery.group", "celery.chord_unlock", "x" * 200, "evil\nname")
    }
    assert labels == {"celery", "unknown"}
    assert json.dumps(sorted(labels))


def sent_by_celery(**options: object) -> bytes:
    """The message Celery's own ``send_task`` writes for ``options``, as the Redis transport stores it."""
    from celery import Celery

    app = Celery(broker="memory://", set_as_current=False)
    app.conf.task_routes = names.TASK_ROUTES
    with app.connection_for_write() as conn:
        app.send_task(names.TASK_RESOLVE, args=[{"job": "j"}], connection=conn, **options)
        message = conn.default_channel._get(names.QUEUE_RESOLVE)
    app.close()
    return json.dumps(message).encode()


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"ignore_result": True},
        {"countdown": 5},
        {"expires": 60},
        {"time_limit": 30, "soft_time_limit": 20},
        {"argsrepr": "summary", "kwargsrepr": "{}"},
        {"retries": 2},
        {"priority": 3},
    ],
    ids=str,
)
def test_every_message_celery_sends_for_theow_passes(options):
    assert admitted(names.QUEUE_RESOLVE, sent_by_celery(**options))


def test_a_remote_control_reply_is_delivered_and_a_broken_one_is_not():
    reply = envelope("resolve", headers={"ticket": "t-1", "clock": 3})
    found = admitted("d3f1.reply.celery.pidbox", raw(reply))
    assert found["headers"] == {"ticket": "t-1", "clock": 3}
    refused = admit("d3f1.reply.celery.pidbox", b"garbage", tag="t", max_eta=60)
    assert isinstance(refused, Refusal) and refused.reason == "not-json"


def test_a_message_kombu_put_back_passes_and_says_it_was_delivered_before():
    message = with_headers("replay", redelivered=True)
    message["properties"]["delivery_info"]["redelivered"] = True
    found = admitted("replay", raw(message))
    assert found["properties"]["delivery_info"]["redelivered"] is True


def test_a_header_celery_would_read_into_the_tasks_context_is_not_delivered():
    message = with_headers("resolve", chain=[{"task": "theow.explore"}], is_eager=True)
    found = admitted("resolve", raw(message))
    assert "chain" not in found["headers"] and "is_eager" not in found["headers"]
