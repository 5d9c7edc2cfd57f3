"""The rule index in a real Milvus Lite server, serving a worker with the real MiniLM model.

What the index itself does (sync, filters, ordering) is its contract, run against Milvus
too: ``tests/contract/test_rule_index.py``.
"""

from __future__ import annotations

import pytest

from tests.integration.conftest import worker_runtime
from theow_client.messages import SubmitRequest
from theow_workers.adapters.milvus_index import MilvusIndex

pytestmark = pytest.mark.integration


def test_a_validating_rule_is_found_by_a_worker_even_when_it_ranks_below_top_k(
    tmp_path, milvus_uri, collection, redis_url, redis_client, minilm
):
    from theow_client.verdict import Status
    from theow_workers.core.resolve.fingerprint import similarity_text

    rules = tmp_path / "rules"
    rules.mkdir()
    stderr = "npm ERR! code ERESOLVE\nnpm ERR! ERESOLVE unable to resolve dependency tree"
    for i in range(30):  # read like the failure, never validate
        (rules / f"decoy_{i}.rule.yaml").write_text(
            f"name: decoy_{i}\nmode: track\ndescription: npm ERESOLVE unable to resolve dependency tree {i}\n"
            f"when:\n  - {{fact: stderr, contains: 'NEVER-{i}'}}\n"
        )
    (rules / "right.rule.yaml").write_text(
        "name: right\nmode: track\ndescription: zebra quartz violin\nwhen:\n  - {fact: stderr, contains: ERESOLVE}\n"
    )
    runtime = worker_runtime(tmp_path, redis_url, milvus_uri, collection, minilm)
    verdict = runtime.service.resolve(
        SubmitRequest.from_wire({"failure_id": "f", "facts": {"stderr": stderr}}), "f"
    )

    vector = runtime.embedder.embed([similarity_text({"stderr": stderr})])[0]
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


def test_two_rules_level_on_evidence_are_ordered_by_the_indexed_similarity(
    tmp_path, milvus_uri, collection, redis_url, redis_client, minilm
):
    from theow_client.verdict import Status
    from theow_workers.core.resolve.fingerprint import similarity_text

    rules = tmp_path / "rules"
    rules.mkdir()
    stderr = "npm ERR! code ERESOLVE\nnpm ERR! ERESOLVE unable to resolve dependency tree"
    for name, description in [
        ("unrelated", "zebra quartz violin"),
        ("npm_peer_conflict", "npm cannot resolve the dependency tree, a peer dependency conflict"),
    ]:  # both validate on the same line: only similarity tells them apart
        (rules / f"{name}.rule.yaml").write_text(
            f"name: {name}\nmode: track\ndescription: {description}\n"
            "when:\n  - {fact: stderr, contains: ERESOLVE}\n"
        )
    runtime = worker_runtime(tmp_path, redis_url, milvus_uri, collection, minilm)
    facts = {"stderr": stderr}

    verdict = runtime.service.resolve(
        SubmitRequest.from_wire({"failure_id": "f", "facts": facts}), "f"
    )

    assert (verdict.status, verdict.rule) == (Status.TRACKED, "npm_peer_conflict")
    assert verdict.also == ("unrelated",)
    # The worker's scores are the index's own cosine, without searching it.
    scores = runtime.similarity_for(facts)(["npm_peer_conflict", "unrelated"])
    vector = minilm.embed([similarity_text(facts)])[0]
    searched = runtime.index.search(vector, names=["npm_peer_conflict", "unrelated"])
    assert scores == pytest.approx({h.name: h.similarity for h in searched}, abs=1e-4)
    runtime.index.close()
