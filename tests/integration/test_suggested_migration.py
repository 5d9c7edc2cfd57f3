"""Upgrading a database recorded before ``suggested`` existed: fixes that never ran stop being resolved."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import insert, select

from tests.conftest import reset_postgres
from theow_client.verdict import Status
from theow_workers.core.ports import AttemptRecord
from theow_workers.store.replay import ItemRecord, ReplayStore
from theow_workers.store.results import SqlStore
from theow_workers.store.schema import AttemptRow, FailureRow, ReplayItemRow, VerdictRow, migrate

pytestmark = pytest.mark.integration


def recorded_before(store: SqlStore, failure_id: str, source: str, rule: str, outcome: str) -> None:
    """A fix rule's match as releases before ``suggested`` stored it: resolved."""
    # The failure row as that revision's columns hold it (later revisions add more).
    with store.engine.begin() as conn:
        conn.execute(insert(FailureRow).values(
            id=failure_id, fingerprint="fp", facts={"stderr": "x"}, problem_type=None,
            source=source, received_at=datetime.now(UTC), explore=False, notes={},
        ))  # fmt: skip
        conn.execute(insert(VerdictRow).values(
            failure_id=failure_id, status="resolved", rule=rule, mode="fix", actions=[],
            outputs=[], reason="", attempts=0, decided_at=datetime.now(UTC),
        ))  # fmt: skip
    store.add_attempt(AttemptRecord(failure_id, rule, [], outcome))  # counts are seeded apart


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def before_suggested(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database migrated up to the revision before ``suggested``, and no further."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'theow.db'}"
    else:
        url = os.environ.get("THEOW_TEST_DATABASE_URL", "")
        if not url:
            pytest.skip("THEOW_TEST_DATABASE_URL not set")
        reset_postgres(url)
    migrate(url, "0006")
    return url


def test_upgrading_relabels_fixes_that_never_ran_and_keeps_those_that_did(before_suggested):
    url = before_suggested
    store = SqlStore(url)
    jobs = ReplayStore(store.engine)
    jobs.create(id="dry", kind="file", source="h.jsonl", source_key="k", dry_run=True)
    jobs.create(id="ran", kind="file", source="h.jsonl", source_key="k", dry_run=False)
    recorded_before(store, "waiting", "theow-client", "on_agent", "client_pending")
    recorded_before(store, "worked", "theow-client", "worker_fix", "success")
    recorded_before(store, "dry-1", "replay:dry", "worker_fix", "success")
    jobs.record("dry", [ItemRecord("1", "resolved", failure_id="dry-1", rule="worker_fix")])
    # An executed replay counted the client-side fix it could not run as a failure.
    recorded_before(store, "ran-1", "replay:ran", "on_agent", "client_pending")
    store.count_attempt("on_agent", False)
    store.count_attempt("on_agent", False)  # and one real failure, kept
    store.count_attempt("worker_fix", True)  # "worked"; a dry run counts nothing

    migrate(url)

    status = {f: store.verdict(f).status for f in ("waiting", "worked", "dry-1", "ran-1")}
    assert status == {"waiting": Status.SUGGESTED, "worked": Status.RESOLVED,
                      "dry-1": Status.SUGGESTED, "ran-1": Status.SUGGESTED}  # fmt: skip
    with store.session() as s:
        dry_attempt = s.execute(select(AttemptRow.outcome).where(AttemptRow.failure_id == "dry-1"))
        assert dry_attempt.scalar_one() == "suggested"
        assert s.execute(select(ReplayItemRow.status)).scalar_one() == "suggested"
    stats = store.rule_stats()
    assert (stats["on_agent"].successes, stats["on_agent"].failures) == (0, 1)
    assert (stats["worker_fix"].successes, stats["worker_fix"].failures) == (1, 0)
    store.dispose()
