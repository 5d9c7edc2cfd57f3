"""A ledger row as the code reads it: ``LedgerRun`` (the run, who sent it, its origin so far),
and the conversions between it and the ``runs`` table's rows and values."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from theow_client.jsontypes import JsonObject
from theow_workers.core.history.model import Outcome, Run
from theow_workers.store.schema import RunRow

MAX_CAUSE = 500


# A Run's fields as columns, in its order.
RUN_COLUMNS = (
    RunRow.id,
    RunRow.repo,
    RunRow.job,
    RunRow.branch,
    RunRow.sha,
    RunRow.outcome,
    RunRow.finished_at,
    RunRow.cause,
    RunRow.category,
    RunRow.pr,
    RunRow.base_sha,
    RunRow.attempt,
    RunRow.started_at,
)


@dataclass(frozen=True)
class LedgerRun:
    """A run as the ledger keeps it: the run, who reported it, how, and its origin so far."""

    run: Run
    agent: str
    source: str  # one of SOURCES
    failure_id: str | None = None
    origin_then: str | None = None
    origin: str | None = None
    culprit: str | None = None
    fixed_by: str | None = None
    origin_reason: str | None = None

    def to_dict(self) -> JsonObject:
        run = self.run
        return {
            "id": run.id,
            "agent": self.agent,
            "repo": run.repo,
            "job": run.job,
            "branch": run.branch,
            "sha": run.sha,
            "pr": run.pr,
            "base_sha": run.base_sha,
            "attempt": run.attempt,
            "outcome": run.outcome.value,
            "started_at": run.started_at,
            "finished_at": run.finished_at,
            "cause": run.cause,
            "category": run.category,
            "failure_id": self.failure_id,
            "origin_then": self.origin_then,
            "origin": self.origin,
            "culprit": self.culprit,
            "fixed_by": self.fixed_by,
            "origin_reason": self.origin_reason,
            "source": self.source,
        }


def run_of_columns(row: Sequence[Any]) -> Run:
    """A run from its ``RUN_COLUMNS`` values."""
    rid, repo, job, branch, sha, outcome, finished, cause, category, pr, base, attempt, started = (
        row
    )
    return Run(
        rid,
        repo,
        job,
        branch,
        sha,
        Outcome(outcome),
        finished,
        cause,
        category,
        pr,
        base,
        attempt,
        started,
    )


def run_of(row: RunRow) -> Run:
    """A ledger row as the classification and the incidents read it."""
    return Run(
        id=row.id,
        repo=row.repo,
        job=row.job,
        branch=row.branch,
        sha=row.sha,
        outcome=Outcome(row.outcome),
        finished_at=row.finished_at,
        cause=row.cause,
        category=row.category,
        pr=row.pr,
        base_sha=row.base_sha,
        attempt=row.attempt,
        started_at=row.started_at,
    )


def entry_of(row: RunRow) -> LedgerRun:
    """A ledger row with who sent it and its origin so far."""
    return LedgerRun(
        run=run_of(row),
        agent=row.agent,
        source=row.source,
        failure_id=row.failure_id,
        origin_then=row.origin_then,
        origin=row.origin,
        culprit=row.culprit,
        fixed_by=row.fixed_by,
        origin_reason=row.origin_reason,
    )


def values_of(entry: LedgerRun) -> dict[str, object]:
    """The row's column values of a run to record."""
    run = entry.run
    return {
        "agent": entry.agent,
        "id": run.id,
        "repo": run.repo,
        "job": run.job,
        "branch": run.branch,
        "sha": run.sha,
        "pr": run.pr,
        "base_sha": run.base_sha,
        "attempt": run.attempt,
        "outcome": run.outcome.value,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "cause": run.cause[:MAX_CAUSE] if run.cause else None,
        "category": run.category,
        "failure_id": entry.failure_id,
        "origin_then": entry.origin_then,
        "origin": entry.origin,
        "culprit": entry.culprit,
        "fixed_by": entry.fixed_by,
        "origin_reason": entry.origin_reason,
        "source": entry.source,
        "created_at": datetime.now(UTC),
    }
