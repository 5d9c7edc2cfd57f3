"""Incidents derived from a history of runs: broken main, infrastructure, flaky causes."""

from __future__ import annotations

from itertools import count

from theow_workers.core.history.incident import TIMELINE_HEAD, TIMELINE_TAIL, Kind, Rules, State
from theow_workers.core.history.incidents import incidents
from theow_workers.core.history.model import Decision, Origin, Outcome, Run

CAUSE = "pytest|E   assert <n> == <n>"
_ids = count(1)


def run(
    sha: str,
    outcome: str,
    at: float,
    *,
    repo: str = "acme/app",
    job: str = "test",
    branch: str = "main",
    cause: str = CAUSE,
    pr: str | None = None,
    attempt: int = 1,
    took: float | None = None,
) -> Run:
    failed = outcome == "failed"
    return Run(
        id=f"r{next(_ids)}",
        repo=repo,
        job=job,
        branch=branch,
        sha=sha,
        outcome=Outcome(outcome),
        finished_at=at,
        cause=cause if failed else None,
        pr=pr,
        attempt=attempt,
        started_at=None if took is None else at - took,
    )


def of_kind(found, kind: Kind):
    return [i for i in found if i.kind is kind]


def test_given_main_breaks_and_is_fixed_i_expect_one_closed_incident_with_culprit_and_fix():
    runs = [
        run("a", "passed", 1),
        run("b", "failed", 2),
        run("c", "failed", 3),
        run("d", "failed", 4),
        run("e", "passed", 5),
    ]
    [incident] = incidents(runs)
    assert incident.kind is Kind.MAIN and incident.state is State.CLOSED
    assert (incident.culprit, incident.fixed_by) == ("b", "e")
    assert (incident.first_seen, incident.last_seen, incident.closed_at) == (2, 4, 5)
    assert incident.runs_affected == 3 and incident.confirmed
    assert [m.what for m in incident.timeline] == ["opened", "failed", "failed", "fixed"]


def test_given_main_still_failing_i_expect_the_incident_open_without_a_fix():
    [incident] = incidents([run("a", "passed", 1), run("b", "failed", 2), run("c", "failed", 3)])
    assert incident.state is State.OPEN and incident.fixed_by is None and incident.culprit == "b"


def test_the_id_stays_the_same_when_more_history_arrives():
    runs = [run("a", "passed", 1), run("b", "failed", 2), run("c", "failed", 3)]
    before = incidents(runs)[0]
    after = incidents([*runs, run("d", "failed", 4), run("e", "passed", 5)])[0]
    assert before.id == after.id and before.state is State.OPEN and after.state is State.CLOSED


def test_a_second_break_of_the_same_cause_after_a_fix_is_a_new_incident():
    runs = [
        run("a", "failed", 1),
        run("b", "failed", 2),
        run("c", "passed", 3),
        run("d", "failed", 4),
        run("e", "failed", 5),
    ]
    first, second = incidents(runs)
    assert first.id != second.id
    assert (first.culprit, first.fixed_by, second.culprit) == ("a", "c", "d")


def test_a_single_failure_on_main_is_not_confirmed_and_its_retry_passing_makes_none():
    runs = [run("a", "passed", 1), run("b", "failed", 2)]
    [incident] = incidents(runs)
    assert not incident.confirmed
    retried = incidents([*runs, run("b", "passed", 3, attempt=2)])
    assert of_kind(retried, Kind.MAIN) == []
    [flaky] = of_kind(retried, Kind.FLAKY)
    assert [m.what for m in flaky.timeline] == ["opened", "passed"]


def test_pull_request_failures_decided_main_count_as_runs_affected():
    broke = run("b", "failed", 2)
    again = run("c", "failed", 3)
    pr = run("p1", "failed", 4, branch="fix-x", pr="7")
    decisions = {pr.id: Decision(Origin.MAIN, "main fails so", culprit="b")}
    [incident] = incidents([run("a", "passed", 1), broke, again, pr], decisions)
    assert incident.runs_affected == 3
    assert incident.timeline[-1].what == "inherited" and incident.timeline[-1].branch == "fix-x"


def test_pull_request_failures_alone_make_no_main_incident():
    runs = [run("p1", "failed", 1, branch="x", pr="1"), run("p2", "failed", 2, branch="y", pr="2")]
    assert of_kind(incidents(runs), Kind.MAIN) == []


def test_a_failure_decided_change_or_flaky_on_main_opens_no_main_incident():
    a, b = run("a", "failed", 1), run("b", "failed", 2)
    decisions = {
        a.id: Decision(Origin.FLAKY, "passed on retry"),
        b.id: Decision(Origin.CHANGE, "x"),
    }
    assert of_kind(incidents([a, b], decisions), Kind.MAIN) == []


def test_the_decisions_culprit_is_kept_when_it_names_an_earlier_commit():
    failing = run("c", "failed", 3)
    decisions = {failing.id: Decision(Origin.MAIN, "main fails", culprit="b")}
    [incident] = incidents([run("a", "passed", 1), failing], decisions)
    assert incident.culprit == "b" and incident.confirmed


def test_each_repository_has_its_own_default_branch():
    rules = Rules(default_branches={"acme/old": "master"})
    runs = [run("a", "failed", 1, repo="acme/old", branch="master"), run("b", "failed", 2,
            repo="acme/old", branch="master")]  # fmt: skip
    [incident] = incidents(runs, rules=rules)
    assert incident.kind is Kind.MAIN and incident.repo == "acme/old"
    assert of_kind(incidents(runs), Kind.MAIN) == []  # with main the default, master is a branch


def test_one_cause_failing_three_repositories_within_the_hour_is_one_infra_incident():
    cause = "runner|No space left on device"
    runs = [
        run("a", "failed", 100, repo="acme/one", cause=cause),
        run("b", "failed", 200, repo="acme/two", branch="feature", pr="3", cause=cause),
        run("c", "failed", 900, repo="acme/three", cause=cause),
        run("d", "failed", 1000, repo="acme/one", cause=cause),
    ]
    found = incidents(runs, now=1500)
    [infra] = found
    assert infra.kind is Kind.INFRA and infra.state is State.OPEN
    assert infra.repos == ("acme/one", "acme/three", "acme/two") and infra.runs_affected == 4
    assert infra.opened_by == runs[0].id
    # Its failures on main open no main incident: the fleet's trouble is not a commit's.
    assert of_kind(found, Kind.MAIN) == []
    [closed] = incidents(runs, now=1000 + 3601)
    assert closed.state is State.CLOSED and closed.closed_at == 1000 + 3600


def test_the_same_cause_in_repositories_hours_apart_is_no_infra_incident():
    cause = "runner|lost communication with the server"
    runs = [
        run(s, "failed", at, repo=r, branch="f", pr="1", cause=cause)
        for s, at, r in (("a", 0, "o/1"), ("b", 5000, "o/2"), ("c", 10000, "o/3"))
    ]
    assert of_kind(incidents(runs), Kind.INFRA) == []


def test_a_cause_failing_between_passes_is_flaky_with_its_flip_rate_and_cost():
    runs = [
        run("a", "passed", 1),
        run("b", "failed", 2, took=120),
        run("c", "passed", 3),
        run("d", "passed", 4),
        run("e", "failed", 5, took=60),
        run("f", "passed", 6),
    ]
    flaky = of_kind(incidents(runs), Kind.FLAKY)
    assert len(flaky) == 1
    [incident] = flaky
    assert incident.state is State.OPEN and incident.failed_runs == 2
    assert incident.minutes_lost == 3.0
    assert incident.flip_rate == 4 / 5


def test_runs_failing_another_way_say_nothing_of_a_causes_flips():
    runs = [
        run("a", "passed", 1),
        run("b", "failed", 2),
        run("c", "failed", 3, cause="npm|ERR! 404"),
        run("d", "passed", 4),
    ]
    assert of_kind(incidents(runs), Kind.FLAKY) == []  # one lone failure is not yet flaky
    later = [*runs, run("e", "failed", 5), run("f", "passed", 6)]
    [incident] = [i for i in of_kind(incidents(later), Kind.FLAKY) if i.cause == CAUSE]
    assert incident.flip_rate == 1.0  # pass, fail, pass, fail, pass: the npm failure skipped


def test_a_flaky_cause_quiet_for_enough_runs_is_closed():
    rules = Rules(flaky_quiet_runs=3)
    runs = [run("a", "failed", 1, branch="f", pr="1"), run("a", "passed", 2, branch="f", pr="1")]
    runs += [run(f"s{i}", "passed", 10 + i) for i in range(3)]
    [incident] = of_kind(incidents(runs, rules=rules), Kind.FLAKY)
    # Three runs of the job since its last failure: the passing retry, then two more.
    assert incident.state is State.CLOSED and incident.closed_at == 11
    assert of_kind(incidents(runs[:-2], rules=rules), Kind.FLAKY)[0].state is State.OPEN


def test_the_timeline_stays_bounded_and_says_how_much_it_left_out():
    runs = [run("a", "passed", 0)] + [run(f"s{i}", "failed", i + 1) for i in range(100)]
    [incident] = incidents(runs)
    assert len(incident.timeline) == TIMELINE_HEAD + TIMELINE_TAIL
    assert incident.omitted == 100 - TIMELINE_HEAD - TIMELINE_TAIL
    assert incident.timeline[-1].sha == "s99" and incident.runs_affected == 100


def test_an_incident_reads_as_json():
    [incident] = incidents([run("a", "failed", 1), run("b", "failed", 2)])
    shown = incident.to_dict()
    assert shown["kind"] == "main" and shown["state"] == "open" and shown["culprit"] == "a"
    assert shown["timeline"][0]["what"] == "opened"


def test_a_pull_request_that_keeps_failing_while_others_pass_is_not_flaky():
    runs = []
    for n in range(3):  # pull request 1 fails on each push; pull request 2 passes in between
        runs.append(run(f"one{n}", "failed", 10 * n, branch="one", pr="1"))
        runs.append(run(f"two{n}", "passed", 10 * n + 5, branch="two", pr="2"))
    assert of_kind(incidents(runs), Kind.FLAKY) == []
