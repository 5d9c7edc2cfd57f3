"""A worker decodes any message body into something its task can record."""

from __future__ import annotations

import json

from theow_client import names
from theow_workers import wire


def test_an_ordinary_message_decodes_unchanged():
    body = [[{"failure_id": "f-1", "facts_json": '{"stderr": "x"}'}], {}, {"callbacks": None}]
    assert wire.loads(json.dumps(body)) == body


def test_a_message_nested_past_the_limit_becomes_a_rejection_for_the_task():
    deep = "[[" + "[" * 600 + "]" * 600 + "], {}, {}]"
    (args, kwargs, embed) = wire.loads(deep)
    assert args == [{names.UNREADABLE: "the message is nested deeper than 48 levels"}]
    assert kwargs == {} and embed["callbacks"] is None


def test_a_message_too_deep_to_decode_or_not_json_becomes_a_rejection():
    (args, _, _) = wire.loads("[" * 200_000 + "]" * 200_000)
    assert args == [{names.UNREADABLE: "the message is nested too deeply to decode"}]
    (args, _, _) = wire.loads("{not json")
    assert args[0][names.UNREADABLE].startswith("the message is not JSON")
