"""The read model in memory: the twin of ``store.reads.SqlReads`` for the views' unit tests.

Fill it with ``add_failure`` (a ``FailureDetail``: its verdict, attempts and
explorations) and ``add_proposal`` and ``add_replay``; it answers every read as the SQL one
does (``tests/contract/test_reads.py`` runs the same tests on both).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime

from theow_workers.core.history.model import Decision, Run
from theow_workers.views.incidents import RecentRuns
from theow_workers.views.ports import (
    ALL,
    ANY_TIME,
    DEMO,
    DEMO_SOURCE,
    LIVE,
    REPLAY,
    REPLAY_PREFIX,
    AttemptCount,
    Cursor,
    ExplorationCount,
    FailureDetail,
    FailureFilter,
    FailurePage,
    FailureSummary,
    ProposalEntry,
    ReplayJob,
    UnknownSource,
    VerdictCount,
    Window,
    aware,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _at(value: datetime | None) -> datetime:
    return aware(value) or _EPOCH


def _source_kind(source: str) -> str:
    """Which of LIVE, REPLAY and DEMO a failure's stored ``source`` is."""
    if source.startswith(REPLAY_PREFIX):
        return REPLAY
    return DEMO if source == DEMO_SOURCE else LIVE


def _of_source(source: str) -> str | None:
    """The kind of failure ``source`` keeps (LIVE, REPLAY or DEMO); None: all."""
    if source in (LIVE, REPLAY, DEMO):
        return source
    if source == ALL:
        return None
    raise UnknownSource(source)


def _text(facts: dict[str, object], key: str) -> str:
    value = facts.get(key)
    return value if isinstance(value, str) else ""


def summary_of(failure: FailureDetail) -> FailureSummary:
    """The failure's row in the list."""
    v = failure.verdict
    return FailureSummary(
        id=failure.id,
        received_at=_at(failure.received_at),
        source=failure.source,
        problem_type=failure.problem_type,
        repo=_text(failure.facts, "repo"),
        job=_text(failure.facts, "job"),
        outcome=v.status if v else None,
        rule=v.rule if v else None,
        mode=v.mode if v else None,
        reason=v.reason if v else None,
        wrapper=v.wrapper if v else None,
        origin=failure.origin.origin if failure.origin else None,
    )


class MemoryFailureReads:
    def __init__(self, failures: dict[str, FailureDetail]) -> None:
        self._failures = failures

    def page(
        self,
        where: FailureFilter,
        after: Cursor | None = None,
        limit: int = 50,
        window: Window = ANY_TIME,
    ) -> FailurePage:
        kind = _of_source(where.source)
        rows: list[FailureSummary] = []
        for failure in self._failures.values():
            row = summary_of(failure)
            if kind is not None and _source_kind(row.source) != kind:
                continue
            if after is not None and not (
                row.received_at < after.at
                or (after.id is not None and row.received_at == after.at and row.id < after.id)
            ):
                continue
            if window.since is not None and row.received_at < window.since:
                continue
            if window.until is not None and row.received_at >= window.until:
                continue
            wanted = (
                (where.repo, row.repo),
                (where.job, row.job),
                (where.rule, row.rule),
                (where.mode, row.mode),
                (where.outcome, row.outcome),
                (where.origin, row.origin),
            )
            if any(given and given != found for given, found in wanted):
                continue
            if where.q and not row.id.startswith(where.q.strip()):
                continue
            rows.append(row)
        rows.sort(key=lambda r: (r.received_at, r.id), reverse=True)
        page = tuple(rows[:limit])
        if len(rows) <= limit or not page:
            return FailurePage(page, None)
        return FailurePage(page, Cursor(page[-1].received_at, page[-1].id))

    def detail(self, failure_id: str) -> FailureDetail | None:
        return self._failures.get(failure_id)


class MemoryProposalReads:
    def __init__(self, proposals: dict[str, ProposalEntry]) -> None:
        self._proposals = proposals

    def by_status(self, status: str | None = None) -> list[ProposalEntry]:
        found = [p for p in self._proposals.values() if status is None or p.status == status]
        return sorted(found, key=lambda p: _at(p.created_at))

    def one(self, proposal_id: str) -> ProposalEntry | None:
        return self._proposals.get(proposal_id)

    def queue(self) -> list[ProposalEntry]:
        found = [
            p
            for p in self._proposals.values()
            if p.status == "pending" and p.exploration is not None
        ]
        return sorted(found, key=lambda p: _at(p.created_at), reverse=True)

    def reviewed(self, limit: int = 20) -> list[ProposalEntry]:
        found = [p for p in self._proposals.values() if p.status != "pending"]
        return sorted(found, key=lambda p: _at(p.reviewed_at), reverse=True)[:limit]


class MemoryFigureReads:
    def __init__(
        self, failures: dict[str, FailureDetail], proposals: dict[str, ProposalEntry]
    ) -> None:
        self._failures = failures
        self._proposals = proposals

    def _of(self, live: bool, demo: bool) -> list[FailureDetail]:
        left_out = {REPLAY} if live else set()
        if not demo:
            left_out.add(DEMO)
        return [f for f in self._failures.values() if _source_kind(f.source) not in left_out]

    def verdicts(
        self,
        since: datetime | None = None,
        live: bool = False,
        received: tuple[datetime | None, datetime | None] | None = None,
        demo: bool = False,
    ) -> list[VerdictCount]:
        counts: Counter[tuple[str, str | None]] = Counter()
        for f in self._of(live, demo):
            v = f.verdict
            if v is None or (since is not None and _at(v.decided_at) < since):
                continue
            if received is not None:
                start, end = received
                at = _at(f.received_at)
                if (start is not None and at < start) or (end is not None and at >= end):
                    continue
            counts[v.status, v.rule] += 1
        return [VerdictCount(status, rule, n) for (status, rule), n in counts.items()]

    def attempts(
        self, since: datetime | None = None, live: bool = False, demo: bool = False
    ) -> list[AttemptCount]:
        counts: Counter[tuple[str, str]] = Counter(
            (a.rule, a.outcome)
            for f in self._of(live, demo)
            for a in f.attempts
            if since is None or _at(a.created_at) >= since
        )
        return [AttemptCount(rule, outcome, n) for (rule, outcome), n in counts.items()]

    def explorations(self, since: datetime | None = None) -> list[ExplorationCount]:
        found: dict[str, ExplorationCount] = {}
        for f in self._failures.values():
            for e in f.explorations:
                if since is not None and _at(e.finished_at) < since:
                    continue
                old = found.get(e.outcome, ExplorationCount(e.outcome, 0, 0.0, 0, 0))
                found[e.outcome] = ExplorationCount(
                    e.outcome,
                    old.count + 1,
                    old.cost + e.cost,
                    old.tokens_in + e.tokens_in,
                    old.tokens_out + e.tokens_out,
                )
        return list(found.values())

    def proposals(self) -> dict[str, int]:
        return dict(Counter(p.status for p in self._proposals.values()))

    def last_approval(self, since: datetime | None = None) -> datetime | None:
        times = [
            _at(p.reviewed_at)
            for p in self._proposals.values()
            if p.status == "approved" and p.reviewed_at is not None
        ]
        return max((t for t in times if since is None or t >= since), default=None)


class MemoryReplayReads:
    def __init__(self, jobs: list[ReplayJob]) -> None:
        self._jobs = jobs

    def recent(self, limit: int = 20) -> list[ReplayJob]:
        return sorted(self._jobs, key=lambda j: j.created_at, reverse=True)[:limit]


class MemoryReads:
    """The read model over failures and proposals held in dictionaries."""

    def __init__(self) -> None:
        self._failure_map: dict[str, FailureDetail] = {}
        self._proposal_map: dict[str, ProposalEntry] = {}
        self._failures = MemoryFailureReads(self._failure_map)
        self._proposals = MemoryProposalReads(self._proposal_map)
        self._figures = MemoryFigureReads(self._failure_map, self._proposal_map)
        self._jobs: list[ReplayJob] = []
        self._replays = MemoryReplayReads(self._jobs)

    def add_failure(self, failure: FailureDetail) -> None:
        self._failure_map[failure.id] = failure

    def add_proposal(self, proposal: ProposalEntry) -> None:
        self._proposal_map[proposal.id] = proposal

    def add_replay(self, job: ReplayJob) -> None:
        self._jobs.append(job)

    def review(self, proposal_id: str, status: str, by: str, at: datetime) -> None:
        self._proposal_map[proposal_id] = replace(
            self._proposal_map[proposal_id], status=status, reviewed_by=by, reviewed_at=at
        )

    @property
    def failures(self) -> MemoryFailureReads:
        return self._failures

    @property
    def proposals(self) -> MemoryProposalReads:
        return self._proposals

    @property
    def figures(self) -> MemoryFigureReads:
        return self._figures

    @property
    def replays(self) -> MemoryReplayReads:
        return self._replays


class MemoryRunReads:
    """The ledger's runs in memory (``views.incidents.RunReads``): runs, decisions, branches."""

    def __init__(
        self,
        runs: list[Run],
        decisions: dict[str, Decision] | None = None,
        default_branches: dict[str, str] | None = None,
    ) -> None:
        self.runs = runs
        self.decisions = decisions or {}
        self.default_branches = default_branches or {}

    def recent(self, since: float, limit: int) -> RecentRuns:
        kept = sorted(
            (r for r in self.runs if r.finished_at >= since), key=lambda r: (r.finished_at, r.id)
        )
        newest = kept[-limit:] if limit > 0 else []
        return RecentRuns(
            runs=newest,
            decisions={r.id: self.decisions[r.id] for r in newest if r.id in self.decisions},
            default_branches=dict(self.default_branches),
            truncated=len(newest) < len(kept),
        )
