"""Explorations and proposals in SQL, on the same schema as the result store.

Every exploration is a row (failure, models, turns, tool calls, tokens, cost,
outcome, transcript), whatever its outcome: a cache hit or a refusal by the
session limit is recorded as much as an LLM session. A proposal is the rule
YAML and one unified diff per action file, ``pending`` until a person reviews it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Integer, String, Text, select, update
from sqlalchemy.orm import Mapped, mapped_column

from theow_client.verdict import Status
from theow_workers.adapters.sql import Base, FailureRow, SqlStore, VerdictRow
from theow_workers.core.explorer import Exploration


def _now() -> datetime:
    return datetime.now(UTC)


class ExplorationRow(Base):
    __tablename__ = "explorations"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    failure_id: Mapped[str] = mapped_column(ForeignKey("failures.id"), index=True)
    fingerprint: Mapped[str] = mapped_column(String(64), index=True)
    session_id: Mapped[str] = mapped_column(String(200), default="")
    rule: Mapped[str | None] = mapped_column(String(256))  # the probabilistic rule, if one drove it
    models: Mapped[list[str]] = mapped_column(JSON, default=list)
    turns: Mapped[int] = mapped_column(Integer, default=0)
    tool_calls: Mapped[int] = mapped_column(Integer, default=0)
    tokens_in: Mapped[int] = mapped_column(Integer, default=0)
    tokens_out: Mapped[int] = mapped_column(Integer, default=0)
    cost: Mapped[float] = mapped_column(Float, default=0.0)
    outcome: Mapped[str] = mapped_column(String(32), index=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    proposal_id: Mapped[str | None] = mapped_column(String(64), index=True)
    transcript: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
    finished_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, index=True)


class ProposalRow(Base):
    __tablename__ = "proposals"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    exploration_id: Mapped[str] = mapped_column(ForeignKey("explorations.id"), index=True)
    failure_id: Mapped[str] = mapped_column(ForeignKey("failures.id"), index=True)
    rule_name: Mapped[str] = mapped_column(String(256), index=True)
    rule_yaml: Mapped[str] = mapped_column(Text)
    diffs: Mapped[list[dict[str, str]]] = mapped_column(JSON, default=list)
    status: Mapped[str] = mapped_column(String(16), index=True, default="pending")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, index=True)
    reviewed_by: Mapped[str | None] = mapped_column(String(200))
    reviewed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    review_reason: Mapped[str | None] = mapped_column(Text)


class ExploreStore:
    """Reads failures and writes explorations and proposals, on a SqlStore's engine."""

    def __init__(self, store: SqlStore) -> None:
        self.sql = store
        self.session = store.session

    def failure(self, failure_id: str) -> FailureRow | None:
        with self.session() as s:
            return s.get(FailureRow, failure_id)

    def add_exploration(
        self, exploration: Exploration, proposal: dict[str, Any] | None = None
    ) -> None:
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
                s.execute(
                    update(VerdictRow)
                    .where(VerdictRow.failure_id == exploration.failure_id)
                    .where(VerdictRow.status == Status.EXPLORING.value)
                    .values(
                        status=Status.UNMATCHED.value,
                        reason=f"no rule matched; exploring failed: {exploration.reason}"[:4000],
                    )
                )
            if proposal is not None:
                s.flush()
                s.add(
                    ProposalRow(
                        exploration_id=exploration.id, failure_id=exploration.failure_id, **proposal
                    )
                )

    def explorations(self, failure_id: str | None = None) -> list[ExplorationRow]:
        with self.session() as s:
            query = select(ExplorationRow).order_by(ExplorationRow.finished_at)
            if failure_id is not None:
                query = query.where(ExplorationRow.failure_id == failure_id)
            return list(s.execute(query).scalars())

    def proposals(self, status: str | None = None) -> list[ProposalRow]:
        with self.session() as s:
            query = select(ProposalRow).order_by(ProposalRow.created_at)
            if status is not None:
                query = query.where(ProposalRow.status == status)
            return list(s.execute(query).scalars())

    def proposal(self, proposal_id: str) -> ProposalRow | None:
        with self.session() as s:
            return s.get(ProposalRow, proposal_id)
