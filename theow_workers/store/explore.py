"""Explorations and proposals in SQL, on the same engine as the result store.

Every exploration is a row (failure, models, turns, tool calls, tokens, cost,
outcome, transcript), whatever its outcome: a cache hit or a refusal by the
session limit is recorded as much as an LLM session. A proposal is the rule
YAML and one unified diff per action file, ``pending`` until a person reviews it.
Reads hand out dataclasses (``Proposal``, ``ExplorationRecord``,
``FailureRecord``), built inside the session: no ORM row leaves the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import and_, or_, select, update

from theow_client.jsontypes import JsonObject
from theow_client.verdict import Status
from theow_workers.core.ports import Exploration, FailureRecord
from theow_workers.store.results import SqlStore
from theow_workers.store.schema import (
    ExplorationRow,
    FailureRow,
    ProposalRow,
    ReplayExplorationRow,
    VerdictRow,
    expand_id,
)


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Proposal:
    """A proposed rule and its action diffs, as stored: ``pending`` until reviewed."""

    id: str
    exploration_id: str
    failure_id: str
    rule_name: str
    rule_yaml: str
    diffs: list[dict[str, str]]  # {"path", "diff", "base_sha256"} per action file
    status: str  # "pending" | "approving" (being written) | "approved" | "rejected"
    created_at: datetime
    reviewed_by: str | None = None
    reviewed_at: datetime | None = None
    review_reason: str | None = None


@dataclass(frozen=True)
class ExplorationRecord:
    """An exploration as stored (``Exploration`` is the one being run: it has no end yet)."""

    id: str
    failure_id: str
    fingerprint: str
    session_id: str
    rule: str | None
    models: list[str]
    turns: int
    tool_calls: int
    tokens_in: int
    tokens_out: int
    cost: float
    outcome: str
    reason: str
    proposal_id: str | None
    transcript: list[JsonObject]
    started_at: datetime
    finished_at: datetime


def _proposal(row: ProposalRow) -> Proposal:
    return Proposal(
        id=row.id,
        exploration_id=row.exploration_id,
        failure_id=row.failure_id,
        rule_name=row.rule_name,
        rule_yaml=row.rule_yaml,
        diffs=row.diffs or [],
        status=row.status,
        created_at=row.created_at,
        reviewed_by=row.reviewed_by,
        reviewed_at=row.reviewed_at,
        review_reason=row.review_reason,
    )


def _exploration(row: ExplorationRow) -> ExplorationRecord:
    return ExplorationRecord(
        id=row.id,
        failure_id=row.failure_id,
        fingerprint=row.fingerprint,
        session_id=row.session_id,
        rule=row.rule,
        models=row.models or [],
        turns=row.turns,
        tool_calls=row.tool_calls,
        tokens_in=row.tokens_in,
        tokens_out=row.tokens_out,
        cost=row.cost,
        outcome=row.outcome,
        reason=row.reason,
        proposal_id=row.proposal_id,
        transcript=row.transcript or [],
        started_at=row.started_at,
        finished_at=row.finished_at,
    )


def _failure(row: FailureRow) -> FailureRecord:
    return FailureRecord(
        id=row.id,
        fingerprint=row.fingerprint,
        facts=row.facts,
        problem_type=row.problem_type,
        source=row.source,
        received_at=row.received_at,
        explore=row.explore,
        notes=row.notes,
        agent=row.agent,  # the verified sender: what its explanation and budget are scoped on
        idempotency_key=row.idempotency_key,
    )


class ExploreStore:
    """Reads failures and writes explorations and proposals, on a SqlStore's engine."""

    def __init__(self, store: SqlStore) -> None:
        self.sql = store
        self.session = store.session

    def failure(self, failure_id: str) -> FailureRecord | None:
        with self.session() as s:
            row = s.get(FailureRow, failure_id)
            return _failure(row) if row is not None else None

    def add_exploration(self, exploration: Exploration, proposal: JsonObject | None = None) -> None:
        """One transaction: the exploration and, when there is one, its proposal."""
        with self.session.begin() as s:
            s.add(
                ExplorationRow(
                    id=exploration.id,
                    failure_id=exploration.failure_id,
                    fingerprint=exploration.fingerprint,
                    session_id=exploration.session_id,
                    rule=exploration.rule,
                    models=exploration.models,
                    turns=exploration.turns,
                    tool_calls=exploration.tool_calls,
                    tokens_in=exploration.tokens_in,
                    tokens_out=exploration.tokens_out,
                    cost=exploration.cost,
                    outcome=exploration.outcome,
                    reason=exploration.reason[:4000],
                    proposal_id=exploration.proposal_id,
                    transcript=exploration.transcript,
                    started_at=exploration.started_at,
                    finished_at=_now(),
                )
            )
            if exploration.outcome == "error":
                # The exploration could not run: the failure is no longer being
                # explored, so its verdict must not say `exploring` forever.
                # Explored with no rule chosen: back to unexplained when wrappers validated
                # (listed in `also`), else to unmatched.
                wrapped = s.execute(
                    select(VerdictRow.also).where(
                        VerdictRow.failure_id == exploration.failure_id,
                        VerdictRow.status == Status.EXPLORING.value,
                        VerdictRow.rule.is_(None),
                    )
                ).scalar_one_or_none()
                status, why = (
                    (Status.UNEXPLAINED, f"only the wrapper {wrapped[0]} matched")
                    if wrapped
                    else (Status.UNMATCHED, "no rule matched")
                )
                s.execute(
                    update(VerdictRow)
                    .where(VerdictRow.failure_id == exploration.failure_id)
                    .where(VerdictRow.status == Status.EXPLORING.value)
                    .values(
                        status=status.value,
                        reason=f"{why}; exploring failed: {exploration.reason}"[:4000],
                    )
                )
            if proposal is not None:
                s.flush()
                s.add(
                    ProposalRow(
                        exploration_id=exploration.id, failure_id=exploration.failure_id, **proposal
                    )
                )

    def explorations(self, failure_id: str | None = None) -> list[ExplorationRecord]:
        query = select(ExplorationRow).order_by(ExplorationRow.finished_at)
        if failure_id is not None:
            query = query.where(ExplorationRow.failure_id == failure_id)
        with self.session() as s:
            return [_exploration(row) for row in s.execute(query).scalars()]

    def proposals(self, status: str | None = None) -> list[Proposal]:
        query = select(ProposalRow).order_by(ProposalRow.created_at)
        if status is not None:
            query = query.where(ProposalRow.status == status)
        with self.session() as s:
            return [_proposal(row) for row in s.execute(query).scalars()]

    def exploration(self, exploration_id: str) -> ExplorationRecord | None:
        with self.session() as s:
            row = s.get(ExplorationRow, exploration_id)
            return _exploration(row) if row is not None else None

    def full_id(self, what: str, given: str) -> str | None:
        """The ``what`` ("proposal" or "failure") id ``given`` names, a unique prefix accepted.

        Raises AmbiguousId when the prefix names several.
        """
        column = ProposalRow.id if what == "proposal" else FailureRow.id
        return expand_id(self.session, column, given, what)

    def proposal(self, proposal_id: str) -> Proposal | None:
        with self.session() as s:
            row = s.get(ProposalRow, proposal_id)
            return _proposal(row) if row is not None else None

    def pending_rules(self) -> list[tuple[str, str]]:
        """``(proposal id, rule YAML)`` of every pending proposal."""
        query = select(ProposalRow.id, ProposalRow.rule_yaml).where(ProposalRow.status == "pending")
        with self.session() as s:
            return [(pid, text) for pid, text in s.execute(query).all()]

    def failure_facts(self, after: str, limit: int) -> list[tuple[str, JsonObject]]:
        """``(failure id, facts)`` of the next ``limit`` failures by id after ``after``."""
        query = (
            select(FailureRow.id, FailureRow.facts)
            .where(FailureRow.id > after)
            .order_by(FailureRow.id)
            .limit(limit)
        )
        with self.session() as s:
            return [(fid, facts or {}) for fid, facts in s.execute(query).all()]

    def verdict_rules(self, failure_ids: list[str]) -> dict[str, str | None]:
        """The rule each failure's verdict named (None: none did), for the ids that have one."""
        if not failure_ids:
            return {}
        query = select(VerdictRow.failure_id, VerdictRow.rule).where(
            VerdictRow.failure_id.in_(failure_ids)
        )
        with self.session() as s:
            return {fid: rule for fid, rule in s.execute(query).all()}

    def claim_proposal(self, proposal_id: str, by: str, stale: timedelta) -> bool:
        """Mark a pending proposal ``approving`` by ``by``; False if another review has it.

        Of approvals at once, one claims it; a claim older than ``stale`` (its
        approver died midway) may be taken over.
        """
        with self.session.begin() as s:
            done = s.execute(
                update(ProposalRow)
                .where(
                    ProposalRow.id == proposal_id,
                    or_(
                        ProposalRow.status == "pending",
                        and_(
                            ProposalRow.status == "approving",
                            ProposalRow.reviewed_at < _now() - stale,
                        ),
                    ),
                )
                .values(status="approving", reviewed_by=by, reviewed_at=_now())
            )
            return bool(done.rowcount)  # type: ignore[attr-defined]

    def release_proposal(self, proposal_id: str, by: str) -> None:
        """Give a claimed proposal back (the approval failed): pending again."""
        with self.session.begin() as s:
            s.execute(
                update(ProposalRow)
                .where(
                    ProposalRow.id == proposal_id,
                    ProposalRow.status == "approving",
                    ProposalRow.reviewed_by == by,
                )
                .values(status="pending", reviewed_by=None, reviewed_at=None)
            )

    def approve_proposal(self, proposal_id: str, by: str, rule_yaml: str) -> bool:
        """Mark a pending proposal, or one ``by`` claimed, approved; False if reviewed meanwhile."""
        with self.session.begin() as s:
            done = s.execute(
                update(ProposalRow)
                .where(
                    ProposalRow.id == proposal_id,
                    or_(
                        ProposalRow.status == "pending",
                        and_(ProposalRow.status == "approving", ProposalRow.reviewed_by == by),
                    ),
                )
                .values(status="approved", reviewed_by=by, reviewed_at=_now(), rule_yaml=rule_yaml)
            )
            return bool(done.rowcount)  # type: ignore[attr-defined]

    def edit_proposal(
        self, proposal_id: str, rule_name: str, rule_yaml: str, note: JsonObject | None = None
    ) -> bool:
        """A reviewer's edit of a pending proposal's rule (``note`` appended to its
        exploration's transcript: who edited, the tests re-run); False if it is not pending."""
        with self.session.begin() as s:
            done = s.execute(
                update(ProposalRow)
                .where(ProposalRow.id == proposal_id, ProposalRow.status == "pending")
                .values(rule_name=rule_name, rule_yaml=rule_yaml)
            )
            if not done.rowcount:  # type: ignore[attr-defined]
                return False
            if note is not None:
                row = s.execute(
                    select(ExplorationRow)
                    .join(ProposalRow, ProposalRow.exploration_id == ExplorationRow.id)
                    .where(ProposalRow.id == proposal_id)
                ).scalar_one()
                row.transcript = [*(row.transcript or []), note]  # a new list: JSON is rewritten
            return True

    def reject_proposal(self, proposal_id: str, by: str, reason: str) -> bool:
        """Mark a pending proposal rejected; False if it was reviewed meanwhile."""
        return self._review(proposal_id, "rejected", by, review_reason=reason)

    def _review(self, proposal_id: str, status: str, by: str, **values: str | None) -> bool:
        """Only a pending proposal is reviewed: of two reviews at once, one wins."""
        with self.session.begin() as s:
            done = s.execute(
                update(ProposalRow)
                .where(ProposalRow.id == proposal_id, ProposalRow.status == "pending")
                .values(status=status, reviewed_by=by, reviewed_at=_now(), **values)
            )
            return bool(done.rowcount)  # type: ignore[attr-defined]

    def replay_origin(self, failure_id: str) -> JsonObject | None:
        """The replay job and unmatched group a failure was explored for, if any."""
        query = select(ReplayExplorationRow).where(ReplayExplorationRow.failure_id == failure_id)
        with self.session() as s:
            row = s.execute(query.limit(1)).scalar_one_or_none()
        if row is None:
            return None
        return {"job": row.job_id, "group": row.rank, "failures": row.size}
