"""A failure's query vector is embedded once per fleet, not once per worker process."""

from __future__ import annotations

import pytest

from theow_workers.adapters.memory import cosine
from theow_workers.adapters.query_vectors import QueryVectors
from theow_workers.core.resolve.fingerprint import similarity_text

pytestmark = pytest.mark.integration

LOG = (
    "2025-06-01T10:00:01.1234567Z npm ERR! code ERESOLVE\n"
    "2025-06-01T10:00:01.2234567Z npm ERR! ERESOLVE unable to resolve dependency tree\n"
    "2025-06-01T10:00:02.0000000Z npm ERR! A complete log of this run can be found in "
    "/tmp/npm-cache-81723/_logs/debug-0.log\n"
)


class Counting:
    """The real model, with its calls counted."""

    def __init__(self, embedder: object) -> None:
        self.inner, self.texts = embedder, []
        self.model_name, self.dim = embedder.model_name, embedder.dim

    def embed(self, texts):
        self.texts.extend(texts)
        return self.inner.embed(texts)


def test_a_failure_embedded_by_one_worker_is_not_embedded_again_by_another(redis_client, minilm):
    first, second = Counting(minilm), Counting(minilm)
    text = similarity_text({"stderr": LOG})

    made = QueryVectors(redis_client, first).vector(text)
    shared = QueryVectors(redis_client, second).vector(text)

    assert first.texts == [text] and second.texts == []
    assert list(shared) == list(made)
    assert cosine(made, minilm.embed([text])[0]) == pytest.approx(1.0, abs=1e-6)
    ttl = redis_client.ttl(QueryVectors(redis_client, second).key(text))
    assert 0 < ttl <= 7 * 24 * 3600


def test_a_repeat_differing_only_in_times_ids_and_numbers_costs_no_model_call(redis_client, minilm):
    counting = Counting(minilm)
    vectors = QueryVectors(redis_client, counting)
    repeat = (
        LOG.replace("10:00:0", "17:42:3").replace("81723", "90211").replace("debug-0", "debug-7")
    )
    assert repeat != LOG

    vectors.vector(similarity_text({"stderr": LOG}))
    vectors.vector(similarity_text({"stderr": repeat}))
    other = similarity_text({"stderr": "error[E0308]: mismatched types"})
    vectors.vector(other)

    assert len(counting.texts) == 2 and counting.texts[1] == other


def test_without_redis_the_vector_is_computed_and_the_resolve_goes_on(minilm, caplog):
    import logging

    import redis

    caplog.set_level(logging.WARNING, logger="theow.vectors")  # whatever an earlier test set
    down = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    counting = Counting(minilm)
    vectors = QueryVectors(down, counting)
    text = similarity_text({"stderr": LOG})

    vector = vectors.vector(text)
    again = vectors.vector(text)  # from the process's own memory

    assert len(vector) == minilm.dim and list(again) == list(vector)
    assert counting.texts == [text]
    assert "query vector" in caplog.text
