"""The incidents read model over the in-memory ledger: filters, ids, the window, the API's shape."""

from __future__ import annotations

import pytest

from theow_workers.core.history.model import Decision, Origin, Outcome, Run
from theow_workers.views.incidents import (
    WINDOW_DAYS,
    BadIncidentQuery,
    IncidentFilter,
    api_incidents,
    incident_detail,
    incident_list,
)
from theow_workers.views.memory import MemoryRunReads

DAY = 24 * 3600.0
NOW = 100 * DAY


def run(rid: str, sha: str, outcome: str, at: float, *, repo: str = "acme/app",
        branch: str = "main", cause: str = "pytest|E1") -> Run:  # fmt: skip
    failed = outcome == "failed"
    return Run(id=rid, repo=repo, job="test", branch=branch, sha=sha, outcome=Outcome(outcome),
               finished_at=at, cause=cause if failed else None)  # fmt: skip


def ledger() -> MemoryRunReads:
    runs = [
        # acme/app broke its main two days ago and fixed it a day later.
        run("a1", "a", "passed", NOW - 3 * DAY),
        run("a2", "b", "failed", NOW - 2 * DAY),
        run("a3", "c", "failed", NOW - 2 * DAY + 60),
        run("a4", "d", "passed", NOW - DAY),
        # acme/lib's default branch is trunk: broken there now.
        run("l1", "x", "failed", NOW - 600, repo="acme/lib", branch="trunk", cause="cargo|E0308"),
        run("l2", "y", "failed", NOW - 300, repo="acme/lib", branch="trunk", cause="cargo|E0308"),
    ]
    return MemoryRunReads(runs, default_branches={"acme/lib": "trunk"})


def test_the_list_is_newest_news_first_and_filters_by_state_and_kind():
    reads = ledger()
    found = incident_list(reads, IncidentFilter(), NOW)
    assert [(i.repo, i.state.value) for i in found] == [
        ("acme/lib", "open"),
        ("acme/app", "closed"),
    ]
    assert [i.repo for i in incident_list(reads, IncidentFilter(state="open"), NOW)] == ["acme/lib"]
    assert incident_list(reads, IncidentFilter(kind="infra"), NOW) == []


def test_a_repositorys_own_default_branch_is_what_breaks_there():
    [lib] = incident_list(ledger(), IncidentFilter(state="open"), NOW)
    assert lib.kind.value == "main" and lib.culprit == "x"


def test_an_unknown_state_or_kind_is_one_line_naming_the_choices():
    with pytest.raises(BadIncidentQuery, match="state 'shut': use open, closed"):
        incident_list(ledger(), IncidentFilter(state="shut"), NOW)
    with pytest.raises(BadIncidentQuery, match="kind 'x': use main, infra, flaky"):
        incident_list(ledger(), IncidentFilter(kind="x"), NOW)


def test_one_incident_is_found_by_its_id_or_a_prefix_of_it():
    reads = ledger()
    [first, _] = incident_list(reads, IncidentFilter(), NOW)
    assert incident_detail(reads, first.id, NOW) == first
    assert incident_detail(reads, first.id[:6].upper(), NOW) == first
    assert incident_detail(reads, "zzzz", NOW) is None
    with pytest.raises(BadIncidentQuery, match="first 4"):
        incident_detail(reads, "ab", NOW)


def test_runs_older_than_the_window_make_no_incident():
    later = NOW + WINDOW_DAYS * DAY - 3600  # acme/lib's runs are in the window, acme/app's not
    assert [i.repo for i in incident_list(ledger(), IncidentFilter(), later)] == ["acme/lib"]


def test_decided_origins_are_followed():
    runs = [run("p", "a", "passed", NOW - 10), run("f", "b", "failed", NOW - 5),
            run("g", "c", "failed", NOW - 1)]  # fmt: skip
    flaky = {rid: Decision(Origin.FLAKY, "intermittent") for rid in ("f", "g")}
    found = incident_list(MemoryRunReads(runs, flaky), IncidentFilter(), NOW)
    assert [i.kind.value for i in found] == ["flaky"]


def test_the_api_answer_lists_incidents_without_their_timelines():
    answer = api_incidents(ledger(), IncidentFilter(kind="main"), NOW)
    assert answer["kind"] == "main" and answer["state"] is None
    incidents = answer["incidents"]
    assert isinstance(incidents, list) and len(incidents) == 2
    assert all("timeline" not in i and i["culprit"] for i in incidents)
