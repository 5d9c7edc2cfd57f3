"""What review and the console read back from the explore store, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.conftest import prepared_database
from theow_workers.core.ports import Exploration, FailureRecord
from theow_workers.store.explore import ExploreStore, Proposal

DIFF = {"path": "actions/fix.py", "diff": "+x = 1\n", "base_sha256": ""}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ExploreStore]:
    from theow_workers.store.results import SqlStore

    sql = SqlStore(prepared_database(request.param, tmp_path))
    yield ExploreStore(sql)
    sql.dispose()


def explored(store: ExploreStore, name: str) -> Exploration:
    """A failure, explored into a pending proposal for rule ``name``."""
    failure = FailureRecord(
        id=f"failure-{name}", fingerprint="fp", facts={"stderr": "boom"},
        problem_type="build_failure", source="test", received_at=datetime.now(UTC),
    )  # fmt: skip
    store.sql.record_failure(failure)
    exploration = Exploration(failure.id, "fp", "proposal", reason="proposed",
                              models=["m"], turns=3, tokens_in=120, tokens_out=40, cost=0.25,
                              proposal_id=f"p-{name}", transcript=[{"role": "model"}])  # fmt: skip
    proposal = {"id": f"p-{name}", "rule_name": name, "rule_yaml": f"name: {name}\n",
                "diffs": [DIFF], "status": "pending"}  # fmt: skip
    store.add_exploration(exploration, proposal)
    return exploration


def test_a_proposal_reads_back_with_the_exploration_and_failure_it_came_from(store):
    exploration = explored(store, "fussy")

    (proposal,) = store.proposals("pending")
    assert isinstance(proposal, Proposal)
    assert proposal.id == "p-fussy" and proposal.rule_name == "fussy"
    assert proposal.rule_yaml == "name: fussy\n" and proposal.diffs == [DIFF]
    assert proposal.reviewed_by is None
    record = store.exploration(proposal.exploration_id)
    assert record is not None and record.id == exploration.id
    assert record.turns == 3 and record.cost == 0.25
    assert record.tokens_in == 120 and record.tokens_out == 40
    assert record.models == ["m"] and record.transcript == [{"role": "model"}]
    assert record.finished_at >= record.started_at
    failure = store.failure(proposal.failure_id)
    assert failure is not None and failure.facts == {"stderr": "boom"}
    assert store.explorations(proposal.failure_id) == [record]
    assert store.proposal("no-such") is None and store.exploration("no-such") is None
    assert store.failure("no-such") is None


def test_a_review_shows_in_the_next_read_and_only_the_first_review_counts(store):
    explored(store, "fussy")
    explored(store, "picky")

    assert store.approve_proposal("p-fussy", "ada", "name: fussy_edited\n")
    assert not store.reject_proposal("p-fussy", "bob", "too late")
    assert store.reject_proposal("p-picky", "bob", "too broad")

    approved, rejected = store.proposal("p-fussy"), store.proposal("p-picky")
    assert approved is not None and rejected is not None
    assert (approved.status, approved.reviewed_by, approved.rule_yaml) == (
        "approved", "ada", "name: fussy_edited\n",
    )  # fmt: skip
    assert approved.review_reason is None and approved.reviewed_at is not None
    assert (rejected.status, rejected.reviewed_by, rejected.review_reason) == (
        "rejected", "bob", "too broad",
    )  # fmt: skip
    assert store.proposals("pending") == []
    assert [p.id for p in store.proposals()] == ["p-fussy", "p-picky"]
