"""The read model (``views.ports.Reads``) on the SQL store: today's queries, typed.

``SqlReads(store).failures`` is the one failure list (``failure_list``) and
one failure; ``.proposals`` the review queue, the list and one proposal;
``.figures`` the counts of ``figures.Figures``; ``.replays`` the replay jobs. The views
(``theow_workers.views``) read these and nothing else; the in-memory twin is
``views.memory.MemoryReads``.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Select, select

from theow_workers.store.explore import ExploreStore
from theow_workers.store.failure_list import failure_page
from theow_workers.store.figures import Figures
from theow_workers.store.replay import ReplayStore
from theow_workers.store.schema import (
    AttemptRow,
    ExplorationRow,
    FailureRow,
    ProposalRow,
    RunRow,
    VerdictRow,
)
from theow_workers.views.ports import (
    ANY_TIME,
    AttemptCount,
    AttemptDetail,
    Cursor,
    ExplorationCost,
    ExplorationCount,
    ExplorationSummary,
    FailureDetail,
    FailureFilter,
    FailurePage,
    OriginDetail,
    ProposalEntry,
    ReplayJob,
    VerdictCount,
    VerdictDetail,
    Window,
)


class SqlFailureReads:
    def __init__(self, store: ExploreStore) -> None:
        self.store = store

    def page(
        self,
        where: FailureFilter,
        after: Cursor | None = None,
        limit: int = 50,
        window: Window = ANY_TIME,
    ) -> FailurePage:
        return failure_page(self.store, where, after, limit, window)

    def detail(self, failure_id: str) -> FailureDetail | None:
        with self.store.session() as s:
            failure = s.get(FailureRow, failure_id)
            if failure is None:
                return None
            verdict = s.get(VerdictRow, failure_id)
            attempts = s.execute(
                select(AttemptRow)
                .where(AttemptRow.failure_id == failure_id)
                .order_by(AttemptRow.id)
            ).scalars()
            explorations = s.execute(
                select(ExplorationRow).where(ExplorationRow.failure_id == failure_id)
            ).scalars()
            run = s.scalars(select(RunRow).where(RunRow.failure_id == failure_id).limit(1)).first()
            return FailureDetail(
                id=failure.id,
                received_at=failure.received_at,
                source=failure.source,
                fingerprint=failure.fingerprint,
                problem_type=failure.problem_type,
                facts=failure.facts,
                notes=failure.notes,
                verdict=None
                if verdict is None
                else VerdictDetail(
                    status=verdict.status,
                    rule=verdict.rule,
                    mode=verdict.mode,
                    actions=verdict.actions,
                    outputs=verdict.outputs,
                    reason=verdict.reason,
                    evidence=verdict.evidence,
                    also=verdict.also or [],
                    seen_in_passing=verdict.seen_in_passing or [],
                    where=verdict.where_lines or [],
                    wrapper=verdict.wrapper,
                    explanation=verdict.explanation,
                    decided_at=verdict.decided_at,
                ),
                attempts=tuple(
                    AttemptDetail(
                        rule=a.rule,
                        params=a.params,
                        outcome=a.outcome,
                        error=a.error,
                        duration_ms=a.duration_ms,
                        delivery=a.delivery,
                        evidence=a.evidence,
                        created_at=a.created_at,
                    )
                    for a in attempts
                ),
                explorations=tuple(
                    ExplorationSummary(
                        id=e.id,
                        outcome=e.outcome,
                        reason=e.reason,
                        proposal_id=e.proposal_id,
                        models=e.models,
                        turns=e.turns,
                        tokens_in=e.tokens_in,
                        tokens_out=e.tokens_out,
                        cost=e.cost,
                        finished_at=e.finished_at,
                    )
                    for e in explorations
                ),
                origin=_origin(run) if run is not None else None,
            )


def _origin(run: RunRow) -> OriginDetail:
    return OriginDetail(
        origin=run.origin,
        origin_then=run.origin_then,
        culprit=run.culprit,
        fixed_by=run.fixed_by,
        reason=run.origin_reason,
        repo=run.repo,
        branch=run.branch,
        sha=run.sha,
        pr=run.pr,
        attempt=run.attempt,
    )


def _entry(p: ProposalRow, e: ExplorationRow | None) -> ProposalEntry:
    return ProposalEntry(
        id=p.id,
        exploration_id=p.exploration_id,
        failure_id=p.failure_id,
        rule_name=p.rule_name,
        rule_yaml=p.rule_yaml,
        diffs=p.diffs or [],
        status=p.status,
        created_at=p.created_at,
        reviewed_by=p.reviewed_by,
        reviewed_at=p.reviewed_at,
        review_reason=p.review_reason,
        exploration=None
        if e is None
        else ExplorationCost(
            outcome=e.outcome,
            session_id=e.session_id,
            tokens_in=e.tokens_in or 0,
            tokens_out=e.tokens_out or 0,
            cost=e.cost or 0.0,
            models=e.models or [],
        ),
    )


class SqlProposalReads:
    def __init__(self, store: ExploreStore) -> None:
        self.store = store

    def _read(self, query: Select[ProposalRow, ExplorationRow]) -> list[ProposalEntry]:
        with self.store.session() as s:
            return [_entry(p, e) for p, e in s.execute(query).all()]

    def _joined(self) -> Select[ProposalRow, ExplorationRow]:
        return select(ProposalRow, ExplorationRow).outerjoin(
            ExplorationRow, ExplorationRow.id == ProposalRow.exploration_id
        )

    def by_status(self, status: str | None = None) -> list[ProposalEntry]:
        query = self._joined().order_by(ProposalRow.created_at)
        if status is not None:
            query = query.where(ProposalRow.status == status)
        return self._read(query)

    def one(self, proposal_id: str) -> ProposalEntry | None:
        found = self._read(self._joined().where(ProposalRow.id == proposal_id))
        return found[0] if found else None

    def queue(self) -> list[ProposalEntry]:
        query = (
            select(ProposalRow, ExplorationRow)
            .join(ExplorationRow, ExplorationRow.id == ProposalRow.exploration_id)
            .where(ProposalRow.status == "pending")
            .order_by(ProposalRow.created_at.desc())
        )
        return self._read(query)

    def reviewed(self, limit: int = 20) -> list[ProposalEntry]:
        query = (
            self._joined()
            .where(ProposalRow.status != "pending")
            .order_by(ProposalRow.reviewed_at.desc())
            .limit(limit)
        )
        return self._read(query)


class SqlFigureReads:
    """``Figures``' counts, each read on a connection of its own."""

    def __init__(self, store: ExploreStore) -> None:
        self.store = store

    def verdicts(
        self,
        since: datetime | None = None,
        live: bool = False,
        received: tuple[datetime | None, datetime | None] | None = None,
        demo: bool = False,
    ) -> list[VerdictCount]:
        with Figures.read(self.store.sql.engine) as figures:
            return figures.verdicts(since, live, received, demo)

    def attempts(
        self, since: datetime | None = None, live: bool = False, demo: bool = False
    ) -> list[AttemptCount]:
        with Figures.read(self.store.sql.engine) as figures:
            return figures.attempts(since, live, demo)

    def explorations(self, since: datetime | None = None) -> list[ExplorationCount]:
        with Figures.read(self.store.sql.engine) as figures:
            return figures.explorations(since)

    def proposals(self) -> dict[str, int]:
        with Figures.read(self.store.sql.engine) as figures:
            return figures.proposals()

    def last_approval(self, since: datetime | None = None) -> datetime | None:
        with Figures.read(self.store.sql.engine) as figures:
            return figures.last_approval(since)


class SqlReplayReads:
    """The replay store's jobs (its tables exist once ``theow db upgrade`` ran)."""

    def __init__(self, store: ExploreStore) -> None:
        self.store = store

    def recent(self, limit: int = 20) -> list[ReplayJob]:
        return ReplayStore(self.store.sql.engine).recent(limit)


class SqlReads:
    """The read model on an ExploreStore's database."""

    def __init__(self, store: ExploreStore) -> None:
        self.store = store
        self._failures = SqlFailureReads(store)
        self._proposals = SqlProposalReads(store)
        self._figures = SqlFigureReads(store)
        self._replays = SqlReplayReads(store)

    @property
    def failures(self) -> SqlFailureReads:
        return self._failures

    @property
    def proposals(self) -> SqlProposalReads:
        return self._proposals

    @property
    def figures(self) -> SqlFigureReads:
        return self._figures

    @property
    def replays(self) -> SqlReplayReads:
        return self._replays
