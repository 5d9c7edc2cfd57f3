"""One contract for the embedder: the hashing stand-in and the real MiniLM model.

Every test runs against each. MiniLM is the session's (``minilm`` in
tests/conftest.py), loaded once from the installed package, offline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest

from theow_workers.adapters.memory import HashingEmbedder, cosine

DNS = "curl: (6) Could not resolve host: registry.npmjs.org"
DNS_TOO = "fatal: Could not resolve host: github.com"
DISK = "write /var/lib/docker: no space left on device"


@pytest.fixture(params=["hashing", "minilm"])
def embedder(request: pytest.FixtureRequest) -> Any:
    if request.param == "hashing":
        return HashingEmbedder()
    return request.getfixturevalue("minilm")


def another_worker(embedder: Any) -> Any:
    """The same embedder in another worker: its own cache, the same model."""
    if isinstance(embedder, HashingEmbedder):
        return HashingEmbedder(embedder.dim)
    other = type(embedder)(disk=None)
    other._model = embedder._load()  # loaded once per session: seconds each time otherwise
    return other


def assert_same(a: Sequence[float], b: Sequence[float]) -> None:
    assert a == pytest.approx(b, abs=1e-5)


def test_one_vector_of_the_declared_dimension_per_text_in_order(embedder):
    texts = [DNS, DISK, DNS_TOO]

    vectors = embedder.embed(texts)

    assert len(vectors) == 3
    assert {len(v) for v in vectors} == {embedder.dim}
    for text, vector in zip(texts, vectors, strict=True):
        assert_same(vector, embedder.embed([text])[0])
    assert embedder.embed([]) == []
    assert embedder.model_name


def test_every_vector_has_unit_length_whatever_the_text(embedder):
    texts = [DNS, "", "   ", "!!! ??? ...", "é" * 50, "x" * 5000]

    for vector in embedder.embed(texts):
        assert math.sqrt(sum(x * x for x in vector)) == pytest.approx(1.0, abs=1e-4)


def test_another_worker_embeds_a_text_to_the_same_vector_whatever_else_is_in_the_batch(
    embedder,
):
    # The index is embedded by one worker and queried by another.
    mine = embedder.embed([DISK, DNS])
    theirs = another_worker(embedder).embed([DNS, DISK, DNS_TOO + " and a much longer tail" * 20])

    assert_same(mine[0], theirs[1])
    assert_same(mine[1], theirs[0])
    twice = embedder.embed([DNS, DNS])
    assert_same(twice[0], twice[1])


def test_similar_texts_are_closer_than_unrelated_ones(embedder):
    dns, dns_too, disk = embedder.embed([DNS, DNS_TOO, DISK])

    assert cosine(dns, dns_too) > cosine(dns, disk) + 0.1
    assert cosine(dns, dns_too) > cosine(dns_too, disk) + 0.1
    assert cosine(dns, dns) == pytest.approx(1.0, abs=1e-4)


def test_vectors_kept_on_disk_are_the_models_and_need_no_model(minilm, tmp_path):
    from theow_workers.adapters.embedder import MiniLMEmbedder, VectorFiles

    first = MiniLMEmbedder(disk=VectorFiles(tmp_path))
    first._model = minilm._load()
    computed = first.embed([DNS, DISK])

    later = MiniLMEmbedder(disk=VectorFiles(tmp_path))  # a restarted worker, a second command
    assert later.embed([DISK, DNS]) == [computed[1], computed[0]]
    assert later._model is None, "every text was on disk: the model was not loaded"
    assert_same(computed[0], minilm.embed([DNS])[0])


def test_an_unreadable_vector_file_is_embedded_again(minilm, tmp_path):
    from theow_workers.adapters.embedder import MiniLMEmbedder, VectorFiles

    files = VectorFiles(tmp_path)
    files.put(DNS, [0.5] * 10)  # the wrong size: a torn or foreign file
    embedder = MiniLMEmbedder(disk=files)
    embedder._model = minilm._load()

    assert_same(embedder.embed([DNS])[0], minilm.embed([DNS])[0])
    assert files.get(DNS) == embedder.embed([DNS])[0]
