"""One contract for the rule index: in memory and in a real Milvus Lite server.

Every test runs against each implementation. A factory builds one worker's
index; for Milvus each is its own client on the test's own collection, so a
second worker sees what the first synced. Vectors come from the hashing
embedder: the index is the point here, not the model (the embedder has its
own contract).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from theow_workers.adapters.memory import HashingEmbedder, InMemoryIndex
from theow_workers.core.ports import IndexEntry

Factory = Callable[[], Any]

EMBEDDER = HashingEmbedder(dim=384)  # the Milvus collection's dimension


@pytest.fixture(params=["memory", "milvus"])
def workers(request: pytest.FixtureRequest) -> Iterator[Factory]:
    if request.param == "memory":
        shared = InMemoryIndex()
        yield lambda: shared
        return

    from theow_workers.adapters.milvus_index import MilvusIndex

    uri = request.getfixturevalue("milvus_uri")
    collection = request.getfixturevalue("collection")  # a fresh name per test
    indexes: list[MilvusIndex] = []

    def real() -> MilvusIndex:
        indexes.append(MilvusIndex(uri, collection, dim=EMBEDDER.dim))
        return indexes[-1]

    yield real
    for index in indexes:
        index.close()


class CountingEmbedder:
    """The hashing embedder, remembering which texts it was asked to embed."""

    model_name, dim = EMBEDDER.model_name, EMBEDDER.dim

    def __init__(self) -> None:
        self.embedded: list[str] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.embedded.extend(texts)
        return EMBEDDER.embed(texts)


def rule(
    name: str, text: str, equals: dict[str, str] | None = None, version: str = "1"
) -> IndexEntry:
    return IndexEntry(f"rule:{name}", "rule", name, f"{name}-{version}", text, equals or {})


def action(name: str, text: str) -> IndexEntry:
    return IndexEntry(f"action:{name}", "action", name, f"{name}-1", text)


DNS_TEXT = "curl: (6) Could not resolve host: registry.npmjs.org"
DISK_TEXT = "write /var/lib/docker: no space left on device"


def query(text: str) -> list[float]:
    return EMBEDDER.embed([text])[0]


def names(hits: Sequence[Any]) -> set[str]:
    return {hit.name for hit in hits}


def test_an_empty_index_finds_nothing(workers):
    index = workers()

    assert index.search(query("disk full"), kind="rule") == []
    assert index.search(query("disk full"), kind="action") == []
    assert index.search(query("disk full"), names=["a"], facts={"os": "linux"}) == []


def test_sync_embeds_only_what_changed_and_removes_what_is_gone(workers):
    index = workers()
    embedder = CountingEmbedder()
    rules = [rule("a", "disk full"), rule("b", "dns failure"), rule("c", "oom killed")]

    report = index.sync(rules, embedder)
    assert (report.added, report.updated, report.removed, report.unchanged) == (3, 0, 0, 0)

    embedder.embedded.clear()
    report = index.sync(rules, embedder)
    assert (report.added, report.updated, report.removed, report.unchanged) == (0, 0, 0, 3)
    assert embedder.embedded == []

    changed = [rules[0], rule("b", "name resolution failed", version="2")]
    report = index.sync(changed, embedder)
    assert (report.added, report.updated, report.removed, report.unchanged) == (0, 1, 1, 1)
    assert embedder.embedded == ["name resolution failed"]
    assert names(index.search(query("disk full dns oom"), limit=10)) == {"a", "b"}


def test_another_worker_sees_the_synced_index_and_embeds_nothing_again(workers):
    first, second = workers(), workers()
    rules = [rule("a", "disk full"), rule("b", "dns failure")]
    first.sync(rules, EMBEDDER)

    embedder = CountingEmbedder()
    report = second.sync(rules, embedder)

    assert (report.added, report.unchanged) == (0, 2)
    assert embedder.embedded == []
    assert [h.name for h in second.search(query("dns failure"), limit=1)] == ["b"]


def test_a_changed_rule_replaces_its_old_text(workers):
    index = workers()
    index.sync([rule("a", "disk full on runner"), rule("b", "oom killed")], EMBEDDER)

    index.sync([rule("a", "certificate expired", version="2"), rule("b", "oom killed")], EMBEDDER)

    hits = index.search(query("certificate expired"), limit=10)
    assert [h.name for h in hits].count("a") == 1  # replaced, not added beside the old one
    assert hits[0].name == "a" and hits[0].similarity == pytest.approx(1.0, abs=1e-4)
    (old,) = index.search(query("disk full on runner"), names=["a"])
    assert old.similarity < 0.5  # the old text is gone with its vector


def test_a_removed_rule_is_never_found_again(workers):
    index = workers()
    index.sync([rule("a", "disk full"), rule("b", "dns failure")], EMBEDDER)

    index.sync([rule("b", "dns failure")], EMBEDDER)

    assert names(index.search(query("disk full"))) == {"b"}
    assert index.search(query("disk full"), names=["a"]) == []


def test_hits_come_most_similar_first_with_cosine_similarity_and_at_most_limit(workers):
    index = workers()
    index.sync(
        [
            rule("dns", "could not resolve host registry npmjs org"),
            rule("dns_other", "could not resolve proxy"),
            rule("disk", "no space left on device"),
            rule("python", "modulenotfounderror no module named yaml"),
        ],
        EMBEDDER,
    )
    vector = query("could not resolve host registry npmjs org")

    hits = index.search(vector, limit=3)

    assert [h.name for h in hits[:2]] == ["dns", "dns_other"]
    assert len(hits) == 3
    assert hits[0].similarity == pytest.approx(1.0, abs=1e-4)
    similarities = [h.similarity for h in hits]
    assert similarities == sorted(similarities, reverse=True)
    assert [h.name for h in index.search(vector, limit=1)] == ["dns"]


def test_rules_and_actions_are_searched_apart_even_under_one_name(workers):
    index = workers()
    index.sync(
        [rule("restart", "restart the runner"), action("restart", "restart the runner")], EMBEDDER
    )
    index.sync(
        [
            rule("restart", "restart the runner"),
            action("restart", "restart the runner"),
            action("clean", "clean the cache"),
        ],
        EMBEDDER,
    )

    assert [h.name for h in index.search(query("restart the runner"), kind="rule")] == ["restart"]
    assert names(index.search(query("restart the runner"), kind="action")) == {"restart", "clean"}


def test_an_equals_filter_never_excludes_a_rule_that_does_not_constrain_the_fact(workers):
    index = workers()
    index.sync(
        [
            rule("for_builds", "npm install failed", {"problem_type": "build_failure"}),
            rule("for_tests", "npm install failed", {"problem_type": "test_failure"}),
            rule("for_anything", "npm install failed"),
            rule("for_linux", "npm install failed", {"os": "linux"}),
            rule(
                "for_linux_builds",
                "npm install failed",
                {"os": "linux", "problem_type": "build_failure"},
            ),
        ],
        EMBEDDER,
    )
    vector = query("npm install failed")

    found = names(index.search(vector, facts={"problem_type": "build_failure"}))
    # for_linux pins a fact this failure does not have: not excluded by it
    assert found == {"for_builds", "for_anything", "for_linux", "for_linux_builds"}
    found = names(index.search(vector, facts={"problem_type": "build_failure", "os": "windows"}))
    assert found == {"for_builds", "for_anything"}
    found = names(index.search(vector, facts={"problem_type": 'quote"and\\slash'}))
    assert found == {"for_anything", "for_linux"}
    assert len(index.search(vector, facts={})) == 5
    assert len(index.search(vector, facts=None)) == 5


def test_names_restrict_the_search_and_every_named_rule_is_scored_whatever_the_limit(workers):
    # The resolver asks for the similarity of every rule that validated, however many.
    index = workers()
    index.sync([rule(f"r{i}", f"npm error number {i}") for i in range(15)], EMBEDDER)
    vector = query("npm error")

    assert names(index.search(vector, names=["r3"])) == {"r3"}
    assert index.search(vector, names=[]) == []
    wanted = [f"r{i}" for i in range(12)]
    assert names(index.search(vector, names=wanted)) == set(wanted)  # more than the default 10
    assert names(index.search(vector, names=wanted, facts={"os": "linux"})) == set(wanted)


def test_the_vectors_of_named_rules_are_those_synced_and_a_rule_not_indexed_is_absent(workers):
    # The resolver scores the rules that validated against these, without a search.
    index = workers()
    index.sync([rule("dns", DNS_TEXT), rule("disk", DISK_TEXT), action("dns", DNS_TEXT)], EMBEDDER)

    vectors = workers().vectors(["dns", "disk", "never-indexed"])

    assert set(vectors) == {"dns", "disk"}
    assert vectors["dns"] == pytest.approx(query(DNS_TEXT), abs=1e-6)
    assert vectors["disk"] == pytest.approx(query(DISK_TEXT), abs=1e-6)
    assert workers().vectors([]) == {}
    assert set(workers().vectors(["dns"], kind="action")) == {"dns"}
