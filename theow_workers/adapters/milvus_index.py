"""The rule and action index in Milvus (Milvus Lite server or Milvus standalone).

One collection holds rules and actions (``kind``), each with its content hash
and a 384-dimension MiniLM vector (cosine). A rule's ``equals`` facts are
stored as scalar arrays so a search can pre-filter on them:

* ``eq_keys``  - the fact names the rule pins, e.g. ``["problem_type"]``
* ``eq_pairs`` - ``"name=value"`` for each, e.g. ``["problem_type=build_failure"]``

For a failure with ``problem_type=X`` the filter is
``not array_contains(eq_keys, "problem_type") or array_contains(eq_pairs,
"problem_type=X")``: a rule that does not constrain a key is never excluded
by it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from pymilvus import DataType, MilvusClient

from theow_client.jsontypes import JsonObject
from theow_workers.core.ports import Embedder, Hit, IndexEntry, SyncReport

log = logging.getLogger("theow.index")

MAX_ARRAY = 64
MAX_PAIR = 1024
# Upserts go in batches: a thousand rules with vectors is several MB per call.
BATCH = 128
QUERY_LIMIT = 16384  # rows one Milvus query or search returns at most


def _quote(value: str) -> str:
    return json.dumps(value)  # a Milvus string literal, escapes included


# pymilvus pings every 10 s even with no call in flight; a gRPC server on its
# defaults (Milvus Lite's) allows one ping per 5 minutes without calls and
# answers an idle worker with GOAWAY "too_many_pings", logged on stderr each
# time. Ping only during calls, at the server's pace: a dead connection still
# shows on the next call, which has its own timeout.
GRPC_OPTIONS = {
    "grpc.keepalive_time_ms": 300_000,
    "grpc.keepalive_permit_without_calls": False,
}


class MilvusIndex:
    def __init__(self, uri: str, collection: str = "theow_index", dim: int = 384) -> None:
        self.uri = uri
        self.collection = collection
        self.dim = dim
        self._client: MilvusClient | None = None

    @property
    def client(self) -> MilvusClient:
        if self._client is None:
            self._client = MilvusClient(uri=self.uri, grpc_options=GRPC_OPTIONS)
            self._ensure_collection(self._client)
        return self._client

    def _ensure_collection(self, client: MilvusClient) -> None:
        if client.has_collection(self.collection):
            client.load_collection(self.collection)
            return
        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=512)
        schema.add_field("kind", DataType.VARCHAR, max_length=16)
        schema.add_field("name", DataType.VARCHAR, max_length=256)
        schema.add_field("content_hash", DataType.VARCHAR, max_length=128)
        for field in ("eq_keys", "eq_pairs"):
            schema.add_field(
                field,
                DataType.ARRAY,
                element_type=DataType.VARCHAR,
                max_capacity=MAX_ARRAY,
                max_length=MAX_PAIR,
            )
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=self.dim)
        index = client.prepare_index_params()
        index.add_index("vector", index_type="FLAT", metric_type="COSINE")
        client.create_collection(self.collection, schema=schema, index_params=index)
        client.load_collection(self.collection)

    def hashes(self) -> dict[str, str]:
        rows = self.client.query(
            self.collection,
            filter='id != ""',
            output_fields=["id", "content_hash"],
            limit=QUERY_LIMIT,
        )
        return {row["id"]: row["content_hash"] for row in rows}

    def sync(self, entries: Sequence[IndexEntry], embedder: Embedder) -> SyncReport:
        stored = self.hashes()
        wanted = {e.id for e in entries}
        changed = [e for e in entries if stored.get(e.id) != e.content_hash]
        removed = [i for i in stored if i not in wanted]
        for start in range(0, len(changed), BATCH):
            batch = changed[start : start + BATCH]
            vectors = embedder.embed([e.text for e in batch])
            self.client.upsert(
                self.collection, [self._row(e, v) for e, v in zip(batch, vectors, strict=True)]
            )
        if removed:
            self.client.delete(self.collection, ids=removed)
        added = sum(1 for e in changed if e.id not in stored)
        report = SyncReport(
            added=added,
            updated=len(changed) - added,
            removed=len(removed),
            unchanged=len(entries) - len(changed),
        )
        log.info("index synced: %s", report)
        return report

    def _row(self, entry: IndexEntry, vector: list[float]) -> JsonObject:
        pairs = [f"{k}={v}"[:MAX_PAIR] for k, v in entry.equals.items()][:MAX_ARRAY]
        return {
            "id": entry.id,
            "kind": entry.kind,
            "name": entry.name,
            "content_hash": entry.content_hash,
            "eq_keys": list(entry.equals)[:MAX_ARRAY],
            "eq_pairs": pairs,
            "vector": vector,
        }

    def search(
        self,
        vector: Sequence[float],
        *,
        kind: str = "rule",
        limit: int = 10,
        facts: dict[str, str] | None = None,
        names: Sequence[str] | None = None,
    ) -> list[Hit]:
        clauses = [f"kind == {_quote(kind)}"]
        for key, value in (facts or {}).items():
            clauses.append(
                f"(not array_contains(eq_keys, {_quote(key)}) "
                f"or array_contains(eq_pairs, {_quote(f'{key}={value}'[:MAX_PAIR])}))"
            )
        if names is not None:
            if not names:
                return []
            clauses.append(f"name in {json.dumps(list(names))}")
            limit = max(limit, len(names))
        result = self.client.search(
            self.collection,
            [list(vector)],
            limit=min(limit, QUERY_LIMIT),
            filter=" and ".join(clauses),
            output_fields=["name"],
            search_params={"metric_type": "COSINE"},
        )
        return [Hit(hit["entity"]["name"], float(hit["distance"])) for hit in result[0]]

    def vectors(self, names: Sequence[str], *, kind: str = "rule") -> dict[str, list[float]]:
        wanted = list(dict.fromkeys(names))
        found: dict[str, list[float]] = {}
        for start in range(0, len(wanted), QUERY_LIMIT):  # Milvus returns at most this many
            batch = wanted[start : start + QUERY_LIMIT]
            rows = self.client.query(
                self.collection,
                filter=f"kind == {_quote(kind)} and name in {json.dumps(batch)}",
                output_fields=["name", "vector"],
                limit=len(batch),
            )
            found.update({row["name"]: [float(x) for x in row["vector"]] for row in rows})
        return found

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
