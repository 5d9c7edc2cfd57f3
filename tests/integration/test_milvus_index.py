"""The rule index in a real Milvus Lite server, with the real MiniLM model."""

from __future__ import annotations

import pytest

from theow_workers.adapters.milvus_index import MilvusIndex
from theow_workers.core.ports import IndexEntry

pytestmark = pytest.mark.integration


def entry(
    name: str, text: str, equals: dict[str, str] | None = None, version: str = "1"
) -> IndexEntry:
    return IndexEntry(f"rule:{name}", "rule", name, f"{name}-{version}", text, equals or {})


class CountingEmbedder:
    def __init__(self, inner):
        self.inner, self.model_name, self.dim, self.embedded = (
            inner,
            inner.model_name,
            inner.dim,
            [],
        )

    def embed(self, texts):
        self.embedded.extend(texts)
        return self.inner.embed(texts)


def test_sync_embeds_only_what_changed_and_removes_what_is_gone(milvus_uri, collection, minilm):
    index = MilvusIndex(milvus_uri, collection)
    embedder = CountingEmbedder(minilm)
    rules = [entry("a", "disk full"), entry("b", "dns failure"), entry("c", "oom killed")]
    report = index.sync(rules, embedder)
    assert (report.added, report.unchanged) == (3, 0)

    embedder.embedded.clear()
    report = index.sync(rules, embedder)
    assert (report.added, report.updated, report.unchanged) == (0, 0, 3)
    assert embedder.embedded == []

    report = index.sync([rules[0], entry("b", "name resolution failed", version="2")], embedder)
    assert (report.updated, report.removed, report.unchanged) == (1, 1, 1)
    assert embedder.embedded == ["name resolution failed"]
    assert set(index.hashes()) == {"rule:a", "rule:b"}
    index.close()


def test_an_equals_filter_never_excludes_a_rule_that_does_not_constrain_the_fact(
    milvus_uri, collection, minilm
):
    index = MilvusIndex(milvus_uri, collection)
    index.sync(
        [
            entry("for_builds", "npm install failed", {"problem_type": "build_failure"}),
            entry("for_tests", "npm install failed", {"problem_type": "test_failure"}),
            entry("for_anything", "npm install failed"),
        ],
        minilm,
    )
    vector = minilm.embed(["npm ERR! install failed"])[0]
    found = {h.name for h in index.search(vector, facts={"problem_type": "build_failure"})}
    assert found == {"for_builds", "for_anything"}
    found = {h.name for h in index.search(vector, facts={"problem_type": 'quote"and\\slash'})}
    assert found == {"for_anything"}
    assert {h.name for h in index.search(vector, names=["for_tests"])} == {"for_tests"}
    index.close()


def test_similar_text_ranks_first(milvus_uri, collection, minilm):
    index = MilvusIndex(milvus_uri, collection)
    index.sync(
        [
            entry("dns", "Could not resolve host: temporary failure in name resolution"),
            entry("disk", "No space left on device while writing layer"),
            entry("python", "ModuleNotFoundError: No module named yaml"),
        ],
        minilm,
    )
    vector = minilm.embed(["curl: (6) Could not resolve host: registry.npmjs.org"])[0]
    hits = index.search(vector, limit=3)
    assert hits[0].name == "dns"
    assert hits[0].similarity > hits[-1].similarity
    index.close()


def test_a_validating_rule_is_found_by_a_worker_even_when_it_ranks_below_top_k(
    tmp_path, milvus_uri, collection, redis_url, redis_client
):
    from theow_client.verdict import Status
    from theow_workers.config import Settings
    from theow_workers.core.query import query_text
    from theow_workers.runtime import Runtime
    from theow_workers.store.schema import migrate

    rules, actions = tmp_path / "rules", tmp_path / "actions"
    rules.mkdir()
    actions.mkdir()
    stderr = "npm ERR! code ERESOLVE\nnpm ERR! ERESOLVE unable to resolve dependency tree"
    for i in range(30):  # read like the failure, never validate
        (rules / f"decoy_{i}.rule.yaml").write_text(
            f"name: decoy_{i}\nmode: track\ndescription: npm ERESOLVE unable to resolve dependency tree {i}\n"
            f"when:\n  - {{fact: stderr, contains: 'NEVER-{i}'}}\n"
        )
    (rules / "right.rule.yaml").write_text(
        "name: right\nmode: track\ndescription: zebra quartz violin\nwhen:\n  - {fact: stderr, contains: ERESOLVE}\n"
    )
    url = f"sqlite:///{tmp_path / 'theow.db'}"
    migrate(url)
    settings = Settings.load(
        env={
            "THEOW_REDIS_URL": redis_url,
            "THEOW_MILVUS_URI": milvus_uri,
            "THEOW_MILVUS_COLLECTION": collection,
            "THEOW_DATABASE_URL": url,
            "THEOW_RULES_DIR": str(rules),
            "THEOW_ACTIONS_DIR": str(actions),
        }
    )
    runtime = Runtime(settings)
    verdict = runtime.service.resolve({"failure_id": "f", "facts": {"stderr": stderr}}, "f")

    vector = runtime.embedder.embed([query_text({"stderr": stderr})])[0]
    top_10 = [h.name for h in runtime.index.search(vector, limit=10)]
    assert "right" not in top_10
    assert (verdict.status, verdict.rule) == (Status.TRACKED, "right")
    runtime.index.close()


def test_an_idle_client_does_not_ping_the_server_into_goaway(milvus_uri, collection):
    # pymilvus's default pings every 10 s with no call in flight; Milvus Lite's
    # gRPC server answers that with GOAWAY "too_many_pings" after about two idle
    # minutes, an error line in every worker log. (Reproducing it takes that
    # long; what makes it happen is the channel's keepalive policy, checked here.)
    index = MilvusIndex(milvus_uri, collection)
    options = index.client._get_connection()._grpc_options
    assert options["grpc.keepalive_permit_without_calls"] is False
    assert options["grpc.keepalive_time_ms"] >= 300_000  # gRPC servers' default minimum
