"""A replay's explorations in SQL: one row per unmatched group sent or reused, and what became of it.

``replay_explorations`` holds one row per group a replay sent to the explorer
(``sending``, then ``sent``) or answered with an earlier exploration
(``reused``). What the explorer did is read from its own rows
(``explorations``, ``proposals``), by the failure investigated or by the
replay's session id.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select, update

from theow_workers.store.replay import ReplayStore
from theow_workers.store.schema import ExplorationRow, ProposalRow, ReplayExplorationRow

SENDING, SENT, REUSED = "sending", "sent", "reused"


@dataclass(frozen=True)
class GroupRecord:
    """One unmatched group a replay sent or reused, as recorded before its task was sent."""

    job_id: str
    failure_id: str  # the one investigated
    rank: int  # 1 = the largest group
    size: int
    sample: str
    fingerprints: list[str]
    status: str  # sending | sent | reused
    reused_from: str | None = None  # the failure whose exploration was reused
    sent_at: datetime | None = None


@dataclass(frozen=True)
class ExplorationOutcome:
    """One exploration the explorer recorded, with its proposal's review state."""

    failure_id: str
    session_id: str
    outcome: str
    reason: str
    models: list[str]
    tokens_in: int
    tokens_out: int
    cost: float
    finished_at: datetime
    proposal_id: str | None
    proposal_status: str | None = None
    rule_name: str | None = None


class ReplayExplorations:
    """The replay's exploration rows and the explorer's, on a ReplayStore's engine."""

    def __init__(self, store: ReplayStore) -> None:
        self.session = store.session

    def groups(self, job_id: str) -> dict[str, GroupRecord]:
        """The job's recorded groups, by the failure investigated."""
        query = select(ReplayExplorationRow).where(ReplayExplorationRow.job_id == job_id)
        with self.session() as s:
            return {r.failure_id: _group(r) for r in s.execute(query).scalars()}

    def add_group(self, group: GroupRecord) -> None:
        with self.session.begin() as s:
            s.add(
                ReplayExplorationRow(
                    job_id=group.job_id,
                    failure_id=group.failure_id,
                    rank=group.rank,
                    size=group.size,
                    sample=group.sample[:2000],
                    fingerprints=sorted(group.fingerprints),
                    status=group.status,
                    reused_from=group.reused_from,
                )
            )

    def mark_sent(self, job_id: str, failure_id: str) -> None:
        with self.session.begin() as s:
            s.execute(
                update(ReplayExplorationRow)
                .where(ReplayExplorationRow.job_id == job_id)
                .where(ReplayExplorationRow.failure_id == failure_id)
                .values(status=SENT, sent_at=datetime.now(UTC))
            )

    def settled(
        self, fingerprints: Iterable[str], outcomes: Sequence[str], other_than: str
    ) -> str | None:
        """The failure of an exploration of one of ``fingerprints`` that ended in one of
        ``outcomes`` under a session other than ``other_than``, if any."""
        query = (
            select(ExplorationRow.failure_id)
            .where(ExplorationRow.fingerprint.in_(sorted(fingerprints)))
            .where(ExplorationRow.outcome.in_(outcomes))
            .where(ExplorationRow.session_id != other_than)
            .limit(1)
        )
        with self.session() as s:
            return s.execute(query).scalar_one_or_none()

    def outcomes(self, failure_ids: Sequence[str]) -> list[ExplorationOutcome]:
        """Every exploration of these failures, with its proposal's status and rule name."""
        with self.session() as s:
            query = select(ExplorationRow).where(ExplorationRow.failure_id.in_(failure_ids))
            explorations = list(s.execute(query).scalars())
            proposal_ids = [e.proposal_id for e in explorations if e.proposal_id]
            proposals = {
                p.id: p
                for p in s.execute(
                    select(ProposalRow).where(ProposalRow.id.in_(proposal_ids))
                ).scalars()
            }
        out = []
        for e in explorations:
            proposal = proposals.get(e.proposal_id) if e.proposal_id else None
            out.append(
                ExplorationOutcome(
                    failure_id=e.failure_id,
                    session_id=e.session_id,
                    outcome=e.outcome,
                    reason=e.reason,
                    models=list(e.models or []),
                    tokens_in=e.tokens_in,
                    tokens_out=e.tokens_out,
                    cost=e.cost,
                    finished_at=e.finished_at,
                    proposal_id=e.proposal_id,
                    proposal_status=proposal.status if proposal else None,
                    rule_name=proposal.rule_name if proposal else None,
                )
            )
        return out

    def sessions(self, session_id: str) -> int:
        """LLM sessions spent under ``session_id``: explorations that called a model."""
        query = select(ExplorationRow.models).where(ExplorationRow.session_id == session_id)
        with self.session() as s:
            return sum(1 for (models,) in s.execute(query) if models)


def _group(row: ReplayExplorationRow) -> GroupRecord:
    return GroupRecord(
        job_id=row.job_id,
        failure_id=row.failure_id,
        rank=row.rank,
        size=row.size,
        sample=row.sample,
        fingerprints=list(row.fingerprints or []),
        status=row.status,
        reused_from=row.reused_from,
        sent_at=row.sent_at,
    )
