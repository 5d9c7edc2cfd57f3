"""The ledger of runs in SQL, on SQLite and PostgreSQL: recorded once, failures win, agents
keep to their own rows, origins kept as decided and as revised, old runs purged."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from theow_workers.core.history.model import Decision, Origin, Outcome, Run
from theow_workers.core.ports import FailureRecord
from theow_workers.store.results import SqlStore
from theow_workers.store.runs import LedgerRun, SqlRuns, configured_branches

DAY = 86400.0


@pytest.fixture
def store(sql_url: str) -> Iterator[SqlStore]:
    sql = SqlStore(sql_url)
    yield sql
    sql.dispose()


@pytest.fixture
def runs(store: SqlStore) -> SqlRuns:
    return SqlRuns(store.engine)


def entry(run_id: str, outcome: Outcome, agent: str = "ci-1", at: float = 1_700_000_000.0,
          **given: object) -> LedgerRun:  # fmt: skip
    run = Run(id=run_id, repo="o/r", job="test", branch="main", sha="a" * 40, outcome=outcome,
              finished_at=at, cause="pytest|boom" if outcome is Outcome.FAILED else None)  # fmt: skip
    return LedgerRun(run, agent=agent, source="client", **given)  # type: ignore[arg-type]


def test_a_run_reported_twice_is_one_row_and_a_pass_never_undoes_a_failure(runs):
    assert runs.record(entry("r1", Outcome.FAILED, failure_id="f1")) == "recorded"
    assert runs.record(entry("r1", Outcome.FAILED, failure_id="f1")) == "duplicate"
    assert runs.record(entry("r1", Outcome.PASSED)) == "duplicate"

    (only,) = runs.listed()
    assert only.run.outcome is Outcome.FAILED and only.failure_id == "f1"


def test_a_failed_step_after_a_passed_one_turns_the_run_failed_with_its_failure(runs):
    runs.record(entry("r1", Outcome.PASSED))
    assert runs.record(entry("r1", Outcome.FAILED, failure_id="f9")) == "updated"

    found = runs.of_failure("f9")
    assert found is not None and found.run.outcome is Outcome.FAILED
    assert found.run.cause == "pytest|boom"


def test_an_agent_cannot_overwrite_another_agents_run_of_the_same_id(runs):
    runs.record(entry("r1", Outcome.PASSED, agent="team-a"))
    assert runs.record(entry("r1", Outcome.FAILED, agent="team-b")) == "recorded"

    assert {(e.agent, e.run.outcome) for e in runs.listed()} == {
        ("team-a", Outcome.PASSED), ("team-b", Outcome.FAILED),
    }  # fmt: skip
    assert [e.agent for e in runs.listed(agent="team-a")] == ["team-a"]


def test_the_origin_at_the_verdict_is_kept_when_a_later_run_revises_it(runs):
    runs.record(entry("r1", Outcome.FAILED, failure_id="f1"))
    runs.set_origin("ci-1", "r1", Decision(Origin.CHANGE, "no history says otherwise"), then=True)
    runs.set_origin("ci-1", "r1", Decision(Origin.MAIN, "main fails so", culprit="c" * 40),
                    then=False)  # fmt: skip

    found = runs.of_failure("f1")
    assert found is not None
    assert (found.origin_then, found.origin, found.culprit) == ("change", "main", "c" * 40)
    assert found.origin_reason == "main fails so"
    assert not runs.set_origin("ci-1", "nope", Decision(Origin.FLAKY, "x"), then=True)


def test_runs_past_the_retention_are_purged_and_newer_ones_kept(runs):
    now = 1_800_000_000.0
    runs.record(entry("old", Outcome.PASSED, at=now - 91 * DAY))
    runs.record(entry("new", Outcome.FAILED, at=now - 89 * DAY))

    assert runs.purge(90, now=now) == 1
    assert [e.run.id for e in runs.listed()] == ["new"]
    with pytest.raises(ValueError, match="positive number of days"):
        runs.purge(0)


def test_a_default_branch_is_configured_else_learned_from_the_forge_else_main(runs):
    configured = configured_branches(["Acme/Legacy=master"])
    assert runs.default_branch("acme/legacy", configured) == "master"
    assert runs.default_branch("ci-1@acme/legacy", configured) == "master"
    assert runs.default_branch("o/r", configured) == "main"

    assert runs.learn_default_branch("O/R", "trunk", "webhook")
    assert not runs.learn_default_branch("o/r", "trunk", "webhook")
    assert runs.default_branch("o/r", configured) == "trunk"
    assert runs.learn_default_branch("o/r", "develop", "webhook")
    assert runs.default_branch("o/r") == "develop"


def test_a_failures_run_fact_is_read_from_its_stored_facts(store, runs):
    facts = {"log": "x" * 5000, "job": "github:o/r/CI/test", "run": {"id": "r1", "sha": "a" * 40}}
    store.record_failure(FailureRecord(id="f1", fingerprint="v2:ab", facts=facts,
                                       problem_type=None, source="agent:ci-1",
                                       received_at=datetime.now(UTC)))  # fmt: skip

    assert runs.failure_run("f1") == ({"id": "r1", "sha": "a" * 40}, "github:o/r/CI/test", "v2:ab")
    assert runs.failure_run("missing") == (None, None, "")


def hooked(run_id: str, outcome: Outcome, **given: object) -> LedgerRun:
    """A forge webhook's report of run ``run_id`` (the id the client gives the same job)."""
    found = entry(run_id, outcome, agent="github-hooks", **given)
    return LedgerRun(found.run, agent="github-hooks", source="webhook", **given)  # type: ignore[arg-type]


def test_a_job_the_webhook_and_an_agent_both_report_is_one_run_merged_into_the_first(runs):
    assert runs.record(hooked("r1", Outcome.FAILED, failure_id="f-hook", origin="change")) == (
        "recorded"
    )
    client = entry("r1", Outcome.FAILED, failure_id="f-client", origin="flaky")
    started = LedgerRun(
        replace(client.run, pr="7", base_sha="b" * 40, started_at=1_699_999_000.0),
        agent="ci-1", source="client", failure_id="f-client", origin="flaky",
    )  # fmt: skip
    assert runs.record(started) == "merged"

    (only,) = runs.listed()
    assert (only.agent, only.source, only.failure_id, only.origin) == (
        "github-hooks", "webhook", "f-hook", "change",
    )  # fmt: skip
    assert (only.run.pr, only.run.base_sha, only.run.started_at) == ("7", "b" * 40, 1_699_999_000.0)
    assert runs.of_failure("f-client") is None  # the run keeps its first failure


def test_a_failure_the_webhook_reports_turns_the_agents_passed_run_failed(runs):
    runs.record(entry("r1", Outcome.PASSED))
    assert runs.record(hooked("r1", Outcome.FAILED, failure_id="f-hook", origin="main")) == "merged"

    (only,) = runs.listed()
    assert (only.agent, only.run.outcome, only.failure_id) == ("ci-1", Outcome.FAILED, "f-hook")
    assert (only.origin, only.run.cause) == ("main", "pytest|boom")
    assert runs.record(hooked("r1", Outcome.PASSED)) == "merged"  # a pass undoes nothing
    assert runs.listed()[0].run.outcome is Outcome.FAILED


def test_only_a_webhook_and_an_agent_speaking_for_the_repository_merge(runs):
    runs.record(hooked("r1", Outcome.PASSED))
    apart = entry("r1", Outcome.FAILED)
    # An agent whose token does not speak for o/r keeps its runs in its own history.
    own = LedgerRun(replace(apart.run, repo="ci-9@o/r"), agent="ci-9", source="client")
    assert runs.record(own) == "recorded"
    # Another job, or another commit, of the same id is not the same run.
    assert runs.record(LedgerRun(replace(apart.run, job="lint"), "ci-1", "client")) == "recorded"
    assert runs.record(LedgerRun(replace(apart.run, sha="c" * 40), "ci-2", "client")) == "recorded"

    assert sorted((e.agent, e.run.repo, e.run.outcome.value) for e in runs.listed()) == [
        ("ci-1", "o/r", "failed"), ("ci-2", "o/r", "failed"), ("ci-9", "ci-9@o/r", "failed"),
        ("github-hooks", "o/r", "passed"),
    ]  # fmt: skip


def test_the_webhook_and_the_agent_reporting_at_once_still_make_one_run(runs):
    from concurrent.futures import ThreadPoolExecutor

    reports = [r for n in range(20) for r in (hooked(f"r{n}", Outcome.PASSED),
                                               entry(f"r{n}", Outcome.PASSED))]  # fmt: skip
    with ThreadPoolExecutor(max_workers=4) as pool:
        done = list(pool.map(runs.record, reports))

    assert sorted(set(done)) == ["merged", "recorded"]
    assert len(runs.listed(limit=100)) == 20
