"""Facts are validated, normalized and bounded in one place, at any depth, never with a traceback."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theow_client.facts import (
    DEFAULT_LIMITS,
    FactLimits,
    FactsError,
    bound_facts,
    bound_text,
    dumps_facts,
    loads_facts,
)

SMALL = FactLimits(text=50, depth=4, keys=8, key_chars=12, values=60, total=400)

# Any value JSON (or a careless Python caller) might hand over, including what JSON
# cannot say: lone surrogates, NaN/Infinity, bytes, non-string keys.
scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(alphabet=st.characters(codec=None), max_size=120)
    | st.binary(max_size=60)
)  # fmt: skip
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=6)
        | st.dictionaries(st.text(max_size=16) | st.integers(), inner, max_size=6)
    ),
    max_leaves=40,
)
facts_objects = st.dictionaries(st.text(min_size=1, max_size=16), values, max_size=8)


def depth(value: object) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


def strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [*value, *(s for v in value.values() for s in strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


@settings(max_examples=150, deadline=None)
@given(facts_objects)
def test_validated_facts_are_within_every_limit_or_refused_with_a_path(facts):
    try:
        bounded, notes = bound_facts(facts, limits=SMALL)
    except FactsError as exc:
        assert str(exc).startswith(("facts", "fact names")), exc
        return
    assert depth(bounded) <= SMALL.depth
    marker_room = 60  # the cut marker bound_text inserts
    for text in strings(bounded):
        text.encode("utf-8")  # no lone surrogate survives
        assert "\x00" not in text
        assert len(text) <= max(SMALL.text + marker_room, SMALL.key_chars)
    # What is accepted can be sent, stored and read back unchanged.
    assert json.loads(dumps_facts(bounded)) == bounded
    for key, note in notes.items():
        assert key and note


@settings(max_examples=100, deadline=None)
@given(facts_objects)
def test_validating_twice_changes_nothing(facts):
    try:
        once, _ = bound_facts(facts, limits=SMALL)
    except FactsError:
        return
    twice, notes = bound_facts(once, limits=SMALL)
    assert twice == once
    assert not any("replaced" in n for n in notes.values())


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(codec=None), max_size=300))
def test_any_wire_text_parses_to_facts_or_a_facts_error(text):
    try:
        loaded = loads_facts(text)
        bound_facts(loaded)
    except FactsError:
        pass


def nested(levels: int) -> dict:
    inner: list = []
    root = {"stderr": "x", "n": inner}
    for _ in range(levels):
        child: list = []
        inner.append(child)
        inner = child
    return root


@pytest.mark.parametrize("levels", [33, 520, 5000])
def test_deep_nesting_is_refused_naming_where(levels):
    with pytest.raises(FactsError, match=r"^facts\.n\[0\]\[0\].*: nested deeper than 32 levels$"):
        bound_facts(nested(levels))


def test_deep_json_text_is_refused_without_a_recursion_error():
    text = '{"stderr": "x", "n": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(FactsError, match="nested too deeply to parse"):
        loads_facts(text)


@pytest.mark.parametrize(
    ("facts", "message"),
    [
        ({"stderr": "x", "n": ["y" * 10, "z" * 10]}, None),
        ({"k" * 300: 1}, "has 300 characters, more than 256"),
        ({str(i): i for i in range(200_000)}, "facts: 200000 keys, more than 1000"),
        ({"a": {7: "x"}}, "facts.a: key 7 is not a string"),
        ({"a": [0] * 30_000}, "more than 20000 values in all"),
        ({"a": ["y" * 60_000] * 40}, "more than 2097152 characters of text in all"),
        ({"a": {1, 2}}, "facts.a: a value of type set, not JSON"),
        (["not", "an", "object"], "facts must be a JSON object, got list"),
    ],
)
def test_structure_past_a_limit_is_refused_with_what_and_where(facts, message):
    if message is None:
        assert bound_facts(facts)[0] == facts
        return
    with pytest.raises(FactsError) as raised:
        bound_facts(facts)
    assert message in str(raised.value)


def test_text_is_normalized_and_bounded_at_any_depth():
    facts = {
        "stderr": "error: \udcff bad byte\x00",
        "steps": [{"log": "x" * 200_000}],
        "ratio": math.nan,
        "raw": b"\xff\xfeok",
    }
    bounded, notes = bound_facts(facts)
    assert bounded["stderr"] == "error: \ufffd bad byte\ufffd"
    assert len(bounded["steps"][0]["log"]) < DEFAULT_LIMITS.text + 100
    assert notes["steps[0].log"]["original_chars"] == 200_000
    assert bounded["ratio"] is None and notes["ratio"] == {"replaced": "nan"}
    assert bounded["raw"] == "\ufffd\ufffdok"
    assert "replaced" in notes["stderr"]


def test_a_log_the_client_bounded_reaches_the_worker_unchanged_and_within_the_limit():
    log = "".join(f"step {n}: ok\n" for n in range(20_000)) + "error: linker failed\n" * 3
    client, note = bound_text(log, limit=64 * 1024)
    worker, again = bound_text(client, limit=64 * 1024)

    assert note is not None and len(client) <= 64 * 1024
    assert (worker, again) == (client, None)
    assert "error: linker failed" in worker
