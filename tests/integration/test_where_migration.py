"""The lines a verdict points at are stored: verdicts from before keep reading, new ones keep them."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import insert

from tests.conftest import reset_postgres
from theow_client.verdict import Status, Verdict, Where
from theow_workers.core.ports import FailureRecord
from theow_workers.store.explore import ExploreStore
from theow_workers.store.failures import detail
from theow_workers.store.results import SqlStore
from theow_workers.store.schema import FailureRow, VerdictRow, migrate

pytestmark = pytest.mark.integration


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def before_where(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database migrated up to the revision before ``where``, and no further."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'theow.db'}"
    else:
        url = os.environ.get("THEOW_TEST_DATABASE_URL", "")
        if not url:
            pytest.skip("THEOW_TEST_DATABASE_URL not set")
        reset_postgres(url)
    migrate(url, "0008")
    return url


def test_a_verdict_stored_before_reads_with_no_lines_and_a_new_one_keeps_its_own(before_where):
    url = before_where
    store = SqlStore(url)
    now = datetime.now(UTC)
    with store.engine.begin() as conn:  # rows as revision 0008's columns hold them
        conn.execute(insert(FailureRow).values(
            id="old", fingerprint="fp", facts={"log": "x"}, problem_type=None, source="s",
            received_at=now, explore=False, notes={}, agent=None, idempotency_key=None,
        ))  # fmt: skip
        conn.execute(insert(VerdictRow).values(
            failure_id="old", status="unmatched", rule=None, mode=None, actions=[], outputs=[],
            reason="no rule matched", attempts=0, evidence=None, also=[], seen_in_passing=[],
            decided_at=now,
        ))  # fmt: skip

    migrate(url)

    old = store.verdict("old")
    assert old is not None and (old.status, old.where, old.wrapper) == (Status.UNMATCHED, (), None)
    store.add_failure(FailureRecord("new", "fp", {"log": "x"}, None, "s", now))
    lines = (
        Where("log", 399_990, "KeyError: 'DATABASE_URL'"),
        Where("log", 12, "make: *** Error 1"),
    )
    store.add_verdict(Verdict("new", Status.UNEXPLAINED, where=lines, wrapper="make_recipe_failed"))
    again = store.verdict("new")
    assert again is not None and again.where == lines and again.wrapper == "make_recipe_failed"
    shown = detail(ExploreStore(store), "new")
    assert shown is not None and shown["verdict"]["where"][0]["line"] == 399_990
    store.dispose()
