"""One contract for the incidents' read of the ledger (``views.incidents.RunReads``): the
in-memory twin and the SQL ledger (SQLite, PostgreSQL).

Given the same runs and origins, I expect both to give the newest runs since a time, oldest
first, with the failed runs' origins as last revised and each repository's default branch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import prepared_database
from theow_workers.core.history.model import Decision, Origin, Outcome, Run
from theow_workers.views.incidents import RunReads
from theow_workers.views.memory import MemoryRunReads

Adder = Callable[[Run, Decision | None], None]


def run(rid: str, at: float, outcome: Outcome = Outcome.FAILED, repo: str = "acme/app") -> Run:
    return Run(id=rid, repo=repo, job="test", branch="main", sha=f"{rid}sha", outcome=outcome,
               finished_at=at, cause="c" if outcome is Outcome.FAILED else None)  # fmt: skip


@pytest.fixture(
    params=["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)]
)
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[RunReads, Adder]]:
    if request.param == "memory":
        memory = MemoryRunReads([], default_branches={"acme/lib": "trunk"})

        def remember(r: Run, decision: Decision | None) -> None:
            memory.runs.append(r)
            if decision is not None:
                memory.decisions[r.id] = decision

        yield memory, remember
        return
    from theow_workers.store.run_reads import SqlRunReads
    from theow_workers.store.runs import LedgerRun, SqlRuns
    from theow_workers.store.schema import make_engine

    engine = make_engine(prepared_database(request.param, tmp_path))
    runs = SqlRuns(engine)
    runs.learn_default_branch("acme/lib", "trunk", "webhook")

    def record(r: Run, decision: Decision | None) -> None:
        runs.record(LedgerRun(r, agent="ci-1", source="client"))
        if decision is not None:
            runs.set_origin("ci-1", r.id, decision, then=True)

    yield SqlRunReads(engine), record
    engine.dispose()


def test_the_newest_runs_since_a_time_come_oldest_first_and_say_when_some_were_left_out(ledger):
    reads, add = ledger
    for n in (5, 1, 4, 2, 3):
        add(run(f"r{n}", float(n)), None)
    recent = reads.recent(since=2.0, limit=10)
    assert [r.id for r in recent.runs] == ["r2", "r3", "r4", "r5"] and not recent.truncated
    newest = reads.recent(since=0.0, limit=2)
    assert [r.id for r in newest.runs] == ["r4", "r5"] and newest.truncated


def test_a_failed_runs_origin_is_given_with_its_culprit_and_a_passed_run_has_none(ledger):
    reads, add = ledger
    add(run("f", 1.0), Decision(Origin.MAIN, "main fails so", culprit="abc", fixed_by="def"))
    add(run("p", 2.0, Outcome.PASSED), None)
    add(run("u", 3.0), None)
    recent = reads.recent(since=0.0, limit=10)
    assert set(recent.decisions) == {"f"}
    decided = recent.decisions["f"]
    assert (decided.origin, decided.culprit, decided.fixed_by) == (Origin.MAIN, "abc", "def")


def test_each_repositorys_default_branch_is_given(ledger):
    reads, add = ledger
    add(run("a", 1.0), None)
    add(run("l", 2.0, repo="acme/lib"), None)
    branches = reads.recent(since=0.0, limit=10).default_branches
    assert branches.get("acme/lib") == "trunk"
    assert branches.get("acme/app", "main") == "main"
