"""The read model (``views.ports.Reads``) on SQLite, PostgreSQL and in memory: the same answers.

Each test seeds the same failures and proposals through a ``World`` (the SQL
one writes through the store's own write paths, the memory one builds the
dataclasses) and reads them back through ``Reads``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

import pytest

from tests.conftest import prepared_database
from theow_client.jsontypes import JsonObject
from theow_workers.views.memory import MemoryReads
from theow_workers.views.ports import (
    AttemptDetail,
    Cursor,
    ExplorationCost,
    ExplorationSummary,
    FailureDetail,
    FailureFilter,
    ProposalEntry,
    Reads,
    ReplayJob,
    UnknownSource,
    VerdictDetail,
    Window,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@dataclass
class Seen:
    """A failure to seed: its verdict (status None: none yet), attempts and exploration."""

    id: str
    at: datetime
    source: str = "agent"
    repo: str = "acme/app"
    job: str = "build"
    status: str | None = "resolved"
    rule: str | None = "tf_echo"
    mode: str | None = "fix"
    wrapper: str | None = None
    attempts: list[tuple[str, str]] = field(default_factory=list)  # (rule, outcome)
    explored: tuple[str, float, int, int] | None = None  # (outcome, cost, tokens in, out)
    proposal: str | None = None  # the id of the proposal its exploration filed

    @property
    def facts(self) -> JsonObject:
        return {"repo": self.repo, "job": self.job, "stderr": "E: boom\n"}


class World(Protocol):
    reads: Reads

    def add(self, seen: Seen) -> None: ...

    def review(self, proposal_id: str, status: str, by: str) -> None: ...

    def replay(self, job_id: str, at: datetime, matched: int) -> None: ...


def replay_job(job_id: str, at: datetime, matched: int) -> ReplayJob:
    """A replay job of a file, as ``ReplayStore.create`` stores one (its columns' defaults)."""
    return ReplayJob(
        id=job_id,
        kind="file",
        source="/h.jsonl",
        source_key="k",
        options={},
        dry_run=True,
        explore=False,
        explore_budget=None,
        explore_status="",
        status="done",
        message="",
        rules=["tf_echo"],
        rules_version="",
        total=10,
        processed=10,
        matched=matched,
        unmatched=10 - matched,
        failed=0,
        errors=0,
        invalid=0,
        duplicates=0,
        created_at=at,
        heartbeat_at=None,
        finished_at=None,
    )


class SqlWorld:
    def __init__(self, url: str) -> None:
        from theow_workers.store.explore import ExploreStore
        from theow_workers.store.reads import SqlReads
        from theow_workers.store.results import SqlStore

        self.sql = SqlStore(url)
        self.store = ExploreStore(self.sql)
        self.reads: Reads = SqlReads(self.store)

    def add(self, seen: Seen) -> None:
        from theow_client.verdict import Verdict
        from theow_workers.core.ports import AttemptRecord, Exploration, FailureRecord

        self.sql.record_failure(
            FailureRecord(
                seen.id, "fp-" + seen.id, seen.facts, "build_failure", seen.source, seen.at
            )
        )
        if seen.status is not None:
            verdict = Verdict.from_dict(
                {
                    "failure_id": seen.id,
                    "status": seen.status,
                    "rule": seen.rule,
                    "mode": seen.mode,
                    "reason": "because",
                    "wrapper": seen.wrapper,
                }
            )
            attempts = [AttemptRecord(seen.id, r, [], o) for r, o in seen.attempts]
            self.sql.record_outcome(verdict, attempts)
        if seen.explored is not None:
            outcome, cost, tin, tout = seen.explored
            exploration = Exploration(
                seen.id,
                "fp-" + seen.id,
                outcome,
                reason="looked",
                session_id="s-" + seen.id,
                models=["m"],
                turns=2,
                tokens_in=tin,
                tokens_out=tout,
                cost=cost,
                proposal_id=seen.proposal,
                id="x-" + seen.id,
            )
            proposal = (
                {
                    "id": seen.proposal,
                    "rule_name": "rule_" + seen.id,
                    "rule_yaml": "name: r\n",
                    "diffs": [{"path": "actions/a.py", "diff": "+x\n", "base_sha256": ""}],
                    "status": "pending",
                }
                if seen.proposal
                else None
            )
            self.store.add_exploration(exploration, proposal)

    def replay(self, job_id: str, at: datetime, matched: int) -> None:
        from dataclasses import asdict

        from theow_workers.store.replay import ReplayStore

        ReplayStore(self.sql.engine).create(**asdict(replay_job(job_id, at, matched)))

    def review(self, proposal_id: str, status: str, by: str) -> None:
        if status == "approved":
            assert self.store.approve_proposal(proposal_id, by, "name: r\n")
        else:
            assert self.store.reject_proposal(proposal_id, by, "no")


class MemoryWorld:
    def __init__(self) -> None:
        self.memory = MemoryReads()
        self.reads: Reads = self.memory

    def add(self, seen: Seen) -> None:
        now = datetime.now(UTC)
        verdict = (
            None
            if seen.status is None
            else VerdictDetail(
                status=seen.status,
                rule=seen.rule,
                mode=seen.mode,
                actions=[],
                outputs=[],
                reason="because",
                evidence=None,
                also=[],
                seen_in_passing=[],
                where=[],
                wrapper=seen.wrapper,
                explanation=None,
                decided_at=now,
            )
        )
        attempts = tuple(
            AttemptDetail(r, [], o, "", 0.0, 1, None, created_at=now) for r, o in seen.attempts
        )
        explorations: tuple[ExplorationSummary, ...] = ()
        if seen.explored is not None:
            outcome, cost, tin, tout = seen.explored
            explorations = (
                ExplorationSummary(
                    "x-" + seen.id,
                    outcome,
                    "looked",
                    seen.proposal,
                    ["m"],
                    2,
                    tin,
                    tout,
                    cost,
                    finished_at=now,
                ),
            )
            if seen.proposal:
                self.memory.add_proposal(
                    ProposalEntry(
                        id=seen.proposal,
                        exploration_id="x-" + seen.id,
                        failure_id=seen.id,
                        rule_name="rule_" + seen.id,
                        rule_yaml="name: r\n",
                        diffs=[{"path": "actions/a.py", "diff": "+x\n", "base_sha256": ""}],
                        status="pending",
                        created_at=now,
                        exploration=ExplorationCost(
                            outcome, "s-" + seen.id, tin, tout, cost, ["m"]
                        ),
                    )
                )
        self.memory.add_failure(
            FailureDetail(
                id=seen.id,
                received_at=seen.at,
                source=seen.source,
                fingerprint="fp-" + seen.id,
                problem_type="build_failure",
                facts=seen.facts,
                notes={},
                verdict=verdict,
                attempts=attempts,
                explorations=explorations,
            )
        )

    def replay(self, job_id: str, at: datetime, matched: int) -> None:
        self.memory.add_replay(replay_job(job_id, at, matched))

    def review(self, proposal_id: str, status: str, by: str) -> None:
        self.memory.review(proposal_id, status, by, datetime.now(UTC))


@pytest.fixture(
    params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql), "memory"]
)
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    if request.param == "memory":
        yield MemoryWorld()
        return
    sql_world = SqlWorld(prepared_database(request.param, tmp_path))
    yield sql_world
    sql_world.sql.dispose()


def ids(world: World, where: FailureFilter | None = None, **kw: object) -> list[str]:
    page = world.reads.failures.page(where or FailureFilter(), **kw)  # type: ignore[arg-type]
    return [r.id for r in page.rows]


def test_the_list_is_newest_first_and_live_unless_replays_are_asked_for(world):
    world.add(Seen("f-1", T0))
    world.add(Seen("f-2", T0 + timedelta(minutes=1)))
    world.add(Seen("f-3", T0 + timedelta(minutes=2), source="replay:job-1"))

    assert ids(world) == ["f-2", "f-1"]
    assert ids(world, FailureFilter(source="replay")) == ["f-3"]
    assert ids(world, FailureFilter(source="all")) == ["f-3", "f-2", "f-1"]
    with pytest.raises(UnknownSource):
        world.reads.failures.page(FailureFilter(source="nowhere"))


def test_the_demos_failures_are_listed_only_when_asked_for(world):
    world.add(Seen("f-1", T0, source="agent:ci"))
    world.add(Seen("f-2", T0 + timedelta(minutes=1), source="demo"))
    world.add(Seen("f-3", T0 + timedelta(minutes=2), source="replay:job-1"))

    assert ids(world) == ["f-1"]
    assert ids(world, FailureFilter(source="demo")) == ["f-2"]
    assert ids(world, FailureFilter(source="replay")) == ["f-3"]
    assert ids(world, FailureFilter(source="all")) == ["f-3", "f-2", "f-1"]


def test_the_demos_failures_count_in_figures_only_when_asked_for(world):
    world.add(Seen("f-1", T0, source="agent:ci", attempts=[("tf_echo", "success")]))
    world.add(
        Seen("f-2", T0, source="demo", status="suggested", attempts=[("tf_echo", "client_pending")])
    )
    figures = world.reads.figures

    def verdicts(**kw: object) -> set[tuple[str, str | None, int]]:
        return {(v.status, v.rule, v.count) for v in figures.verdicts(**kw)}  # type: ignore[arg-type]

    def attempts(**kw: object) -> set[tuple[str, str, int]]:
        return {(a.rule, a.outcome, a.count) for a in figures.attempts(**kw)}  # type: ignore[arg-type]

    assert verdicts() == verdicts(live=True) == {("resolved", "tf_echo", 1)}
    assert verdicts(received=(T0, None)) == {("resolved", "tf_echo", 1)}
    assert verdicts(demo=True) == {("resolved", "tf_echo", 1), ("suggested", "tf_echo", 1)}
    assert attempts() == attempts(live=True) == {("tf_echo", "success", 1)}
    assert attempts(demo=True) == {("tf_echo", "success", 1), ("tf_echo", "client_pending", 1)}


def test_a_row_carries_the_failure_and_its_verdict(world):
    world.add(
        Seen(
            "f-1",
            T0,
            repo="acme/web",
            job="test",
            status="unexplained",
            rule=None,
            mode=None,
            wrapper="gradle",
        )
    )
    world.add(Seen("f-2", T0 + timedelta(seconds=1), status=None))

    no_verdict, row = world.reads.failures.page(FailureFilter()).rows
    assert (row.id, row.received_at, row.source, row.problem_type) == (
        "f-1",
        T0,
        "agent",
        "build_failure",
    )
    assert (row.repo, row.job, row.outcome, row.rule, row.mode, row.reason, row.wrapper) == (
        "acme/web",
        "test",
        "unexplained",
        None,
        None,
        "because",
        "gradle",
    )
    assert (no_verdict.id, no_verdict.outcome, no_verdict.rule) == ("f-2", None, None)


def test_the_filters_keep_what_they_name(world):
    world.add(
        Seen("abc-1", T0, repo="acme/web", job="test", status="tracked", rule="r1", mode="track")
    )
    world.add(Seen("abc-2", T0 + timedelta(minutes=1), status="unmatched", rule=None, mode=None))
    world.add(Seen("xyz-3", T0 + timedelta(minutes=2)))

    assert ids(world, FailureFilter(repo="acme/web")) == ["abc-1"]
    assert ids(world, FailureFilter(job="build")) == ["xyz-3", "abc-2"]
    assert ids(world, FailureFilter(rule="tf_echo")) == ["xyz-3"]
    assert ids(world, FailureFilter(mode="track")) == ["abc-1"]
    assert ids(world, FailureFilter(outcome="unmatched")) == ["abc-2"]
    assert ids(world, FailureFilter(q="abc")) == ["abc-2", "abc-1"]
    assert ids(world, FailureFilter(q="%")) == []
    window = Window(T0 + timedelta(seconds=30), T0 + timedelta(minutes=2))
    assert ids(world, window=window) == ["abc-2"]


def test_pages_walk_every_row_once_even_within_one_microsecond(world):
    for n in range(5):
        world.add(Seen(f"f-{n}", T0 if n < 3 else T0 + timedelta(minutes=n)))

    seen, after = [], None
    while True:
        page = world.reads.failures.page(FailureFilter(), after=after, limit=2)
        seen += [r.id for r in page.rows]
        if page.next is None:
            break
        after = page.next
    assert seen == ["f-4", "f-3", "f-2", "f-1", "f-0"]
    # A time alone (the console's old `before`) keeps what was received strictly earlier.
    assert ids(world, after=Cursor(T0 + timedelta(minutes=3))) == ["f-2", "f-1", "f-0"]


def test_one_failure_reads_back_with_its_verdict_attempts_and_exploration(world):
    world.add(Seen("f-1", T0, attempts=[("tf_echo", "success")], explored=("gave_up", 0.5, 10, 5)))
    world.add(Seen("f-2", T0, status=None))

    detail = world.reads.failures.detail("f-1")
    assert detail is not None
    assert (detail.id, detail.source, detail.fingerprint) == ("f-1", "agent", "fp-f-1")
    assert detail.received_at.replace(tzinfo=UTC) == T0
    assert detail.facts["repo"] == "acme/app" and detail.notes == {}
    assert detail.verdict is not None
    assert (detail.verdict.status, detail.verdict.rule, detail.verdict.reason) == (
        "resolved",
        "tf_echo",
        "because",
    )
    assert (detail.verdict.also, detail.verdict.where, detail.verdict.seen_in_passing) == (
        [],
        [],
        [],
    )
    ((attempt,),) = (detail.attempts,)
    assert (attempt.rule, attempt.outcome, attempt.error, attempt.delivery) == (
        "tf_echo",
        "success",
        "",
        1,
    )
    (exploration,) = detail.explorations
    assert (exploration.id, exploration.outcome, exploration.cost, exploration.tokens_in) == (
        "x-f-1",
        "gave_up",
        0.5,
        10,
    )
    bare = world.reads.failures.detail("f-2")
    assert bare is not None and bare.verdict is None and bare.attempts == ()
    assert world.reads.failures.detail("no-such") is None


def test_proposals_list_queue_and_reviewed(world):
    world.add(Seen("f-1", T0, explored=("proposal", 0.25, 120, 40), proposal="p-1"))
    world.add(Seen("f-2", T0, explored=("proposal", 0.5, 10, 4), proposal="p-2"))
    world.add(Seen("f-3", T0, explored=("proposal", 0.5, 10, 4), proposal="p-3"))
    world.review("p-3", "rejected", "bob")

    assert [p.id for p in world.reads.proposals.by_status()] == ["p-1", "p-2", "p-3"]
    assert [p.id for p in world.reads.proposals.by_status("pending")] == ["p-1", "p-2"]
    assert [p.id for p in world.reads.proposals.queue()] == ["p-2", "p-1"]
    (reviewed,) = world.reads.proposals.reviewed()
    assert (reviewed.id, reviewed.status, reviewed.reviewed_by) == ("p-3", "rejected", "bob")
    one = world.reads.proposals.one("p-1")
    assert one is not None and one.exploration is not None
    assert (one.rule_name, one.failure_id, one.exploration_id, one.files) == (
        "rule_f-1",
        "f-1",
        "x-f-1",
        ["actions/a.py"],
    )
    cost = one.exploration
    assert (cost.tokens_in, cost.tokens_out, cost.cost, cost.models, cost.session_id) == (
        120,
        40,
        0.25,
        ["m"],
        "s-f-1",
    )
    assert world.reads.proposals.one("no-such") is None


def test_figures_count_verdicts_attempts_explorations_and_proposals(world):
    start = datetime.now(UTC) - timedelta(hours=1)
    world.add(Seen("f-1", T0, attempts=[("tf_echo", "success")]))
    world.add(Seen("f-2", T0 + timedelta(days=1), attempts=[("tf_echo", "error")]))
    world.add(
        Seen(
            "f-3",
            T0,
            source="replay:j",
            status="unmatched",
            rule=None,
            explored=("proposal", 0.25, 100, 10),
            proposal="p-1",
        )
    )
    world.add(Seen("f-4", T0, status=None, explored=("cache_hit", 0.0, 0, 0)))
    figures = world.reads.figures

    def verdicts(**kw: object) -> set[tuple[str, str | None, int]]:
        return {(v.status, v.rule, v.count) for v in figures.verdicts(**kw)}  # type: ignore[arg-type]

    assert verdicts() == {("resolved", "tf_echo", 2), ("unmatched", None, 1)}
    assert verdicts(live=True) == {("resolved", "tf_echo", 2)}
    assert verdicts(since=start) == verdicts()
    assert verdicts(since=datetime.now(UTC) + timedelta(hours=1)) == set()
    assert verdicts(received=(T0, T0 + timedelta(hours=1))) == {
        ("resolved", "tf_echo", 1),
        ("unmatched", None, 1),
    }
    assert verdicts(received=(T0 + timedelta(hours=1), None)) == {("resolved", "tf_echo", 1)}
    attempts = {(a.rule, a.outcome, a.count) for a in figures.attempts(since=start)}
    assert attempts == {("tf_echo", "success", 1), ("tf_echo", "error", 1)}
    explored = {
        (e.outcome, e.count, e.cost, e.tokens_in, e.tokens_out) for e in figures.explorations()
    }
    assert explored == {("proposal", 1, 0.25, 100, 10), ("cache_hit", 1, 0.0, 0, 0)}
    assert figures.proposals() == {"pending": 1}
    assert figures.last_approval() is None
    world.review("p-1", "approved", "ada")
    assert figures.proposals() == {"approved": 1}
    approved = figures.last_approval(since=start)
    assert approved is not None and approved.tzinfo is not None and approved >= start


def test_replays_are_listed_newest_first_with_their_counters(world):
    world.replay("j-old", T0, 3)
    world.replay("j-new", T0 + timedelta(hours=1), 7)
    world.replay("j-mid", T0 + timedelta(minutes=1), 5)

    jobs = world.reads.replays.recent(2)
    assert [j.id for j in jobs] == ["j-new", "j-mid"]
    newest = jobs[0]
    assert (newest.matched, newest.total, newest.status, newest.rules) == (
        7,
        10,
        "done",
        ["tf_echo"],
    )
    assert newest.created_at == T0 + timedelta(hours=1) and newest.hit_rate == 0.7
    assert newest.to_dict()["created_at"] == (T0 + timedelta(hours=1)).isoformat()
    assert [j.id for j in world.reads.replays.recent()] == ["j-new", "j-mid", "j-old"]
