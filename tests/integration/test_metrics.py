"""`theow metrics` serves what the fleet learns, read from SQL at scrape time.

Failures go through the real ResolveService on an SQLite store (the workers'
code path, without workers: that part is the topology test's job); explorations
and a replay job are recorded as the explorer and `theow replay` record them.
Then Prometheus' view: an HTTP scrape of `theow metrics`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port, wait_port
from theow_client.messages import SubmitRequest
from theow_workers.core.ports import Exploration
from theow_workers.core.resolve.library import Library
from theow_workers.core.resolve.service import ResolveService, ResolveSettings
from theow_workers.store.explore import ExploreStore
from theow_workers.store.results import SqlStore
from theow_workers.store.schema import migrate

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def serve(database_url: str, tmp_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {**os.environ, "THEOW_DATABASE_URL": database_url, "THEOW_HOME": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "theow_workers.cli", "metrics", "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    wait_port(port, proc)
    return proc, port


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    url = f"sqlite:///{tmp_path / 'theow.db'}"
    migrate(url)
    store = SqlStore(url)
    yield store
    store.dispose()


def resolve(store: SqlStore, failures: list[dict[str, str]], source: str = "ci") -> None:
    knowledge = Library.load(FIXTURES / "rules", FIXTURES / "actions")
    service = ResolveService(
        store,
        rulebook=lambda: knowledge.book,
        actions=lambda: knowledge.actions,
        settings=ResolveSettings(action_timeout=2.0),
    )
    for facts in failures:
        failure_id = f"f-{time.monotonic_ns()}"
        service.resolve(
            SubmitRequest.from_wire({"failure_id": failure_id, "facts": facts, "source": source}),
            failure_id,
        )


def record_explorations(store: SqlStore) -> None:
    explore = ExploreStore(store)
    resolve(store, [{"stderr": "component zeta failed: code=3"}, {"stderr": "mystery 42"}])
    first, second = [f.id for f in _failures(store)][-2:]
    proposal = Exploration(
        first, "fp1", "proposal", models=["gemini-2.5-flash"], tokens_in=1000, tokens_out=200,
        cost=0.0008, proposal_id="p1",
    )  # fmt: skip
    explore.add_exploration(
        proposal,
        {
            "id": "p1",
            "rule_name": "component_zeta",
            "rule_yaml": "name: component_zeta",
            "diffs": [],
        },
    )
    explore.add_exploration(
        Exploration(second, "fp2", "gave_up", tokens_in=500, tokens_out=50, cost=0.0002)
    )


def _failures(store: SqlStore) -> list:
    from sqlalchemy import select

    from theow_workers.store.schema import FailureRow

    with store.session() as s:
        return list(s.execute(select(FailureRow).order_by(FailureRow.received_at)).scalars())


def record_replay(store: SqlStore) -> str:
    from theow_workers.store.replay import ItemRecord, ReplayStore

    replays = ReplayStore(store.engine)
    job = replays.create(
        kind="file", source="history.jsonl", source_key="k1", options={}, total=10, status="running"
    )
    items = [ItemRecord(f"line-{i}", "resolved", line=i, rule="tf_echo") for i in range(3)]
    replays.record(job.id, [*items, ItemRecord("line-3", "unmatched", line=3)])
    return job.id


def test_a_scrape_counts_failures_verdicts_explorations_tokens_cost_and_replay_progress(
    store, tmp_path
):
    resolve(
        store,
        [
            {"stderr": "ECHO one", "job": "a"},
            {"stderr": "ECHO two", "job": "b"},
            {"stderr": "EXPLODE now"},
            {"stderr": "nothing any rule knows"},
        ],
    )
    record_explorations(store)
    job = record_replay(store)
    # Replayed history goes through the same resolve path but is not received traffic.
    resolve(store, [{"stderr": "ECHO old", "job": "r"}, {"stderr": "old news"}], "replay:j1")
    proc, port = serve(store.url, tmp_path)
    try:
        samples = scrape(port)
        assert value(samples, "theow_sql_up") == 1
        assert value(samples, "theow_failures_received_total") == 6
        assert value(samples, "theow_verdicts_total", status="resolved", rule="tf_echo") == 2
        assert value(samples, "theow_verdicts_total", status="unmatched", rule="") == 3
        assert value(samples, "theow_attempts_total", rule="tf_echo", outcome="success") == 2
        assert value(samples, "theow_explorations_total", outcome="proposal") == 1
        assert value(samples, "theow_explorations_total", outcome="gave_up") == 1
        assert value(samples, "theow_llm_tokens_total", direction="input") == 1500
        assert value(samples, "theow_llm_tokens_total", direction="output") == 250
        assert value(samples, "theow_llm_cost_dollars_total") == pytest.approx(0.001)
        assert value(samples, "theow_proposals", status="pending") == 1
        assert value(samples, "theow_replay_jobs", status="running") == 1
        assert value(samples, "theow_replay_job_items", job=job, kind="processed") == 4
        assert value(samples, "theow_replay_job_items", job=job, kind="matched") == 3
        assert value(samples, "theow_replay_job_items", job=job, kind="total") == 10
        assert value(samples, "theow_replay_job_progress_ratio", job=job) == pytest.approx(0.4)

        resolve(store, [{"stderr": "ECHO three", "job": "c"}])  # read live, at scrape time
        again = scrape(port)
        assert value(again, "theow_failures_received_total") == 7
        assert value(again, "theow_verdicts_total", status="resolved", rule="tf_echo") == 3
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, output


def test_an_unreachable_database_is_a_zero_not_a_crash_and_its_password_stays_hidden(tmp_path):
    proc, port = serve("postgresql+psycopg://theow:metrics-secret-pw@127.0.0.1:1/theow", tmp_path)
    try:
        samples = scrape(port)
        assert value(samples, "theow_sql_up") == 0
        assert not any(name == "theow_failures_received_total" for name, _ in samples)
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert b"metrics-secret-pw" not in output


def test_dead_letters_and_rejections_are_counted_apart(store, tmp_path):
    knowledge = Library.load(FIXTURES / "rules", FIXTURES / "actions")
    service = ResolveService(
        store, rulebook=lambda: knowledge.book, actions=lambda: knowledge.actions
    )
    service.dead_letter(
        SubmitRequest.from_wire({"facts_json": "{}"}),
        "poison-1",
        "delivered 4 times without a verdict",
    )
    service.resolve(
        SubmitRequest.from_wire({"facts_json": "[" * 5000}), "bad-1"
    )  # rejected, not dead
    service.resolve(
        SubmitRequest.from_wire({"facts": {"stderr": "ECHO fine", "job": "j"}}), "fine-1"
    )
    proc, port = serve(store.url, tmp_path)
    try:
        samples = scrape(port)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    assert value(samples, "theow_dead_letters_total") == 1
    assert value(samples, "theow_verdicts_total", status="rejected", rule="") == 1
