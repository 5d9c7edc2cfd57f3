"""A verdict decides its run's origin before the run is written: over the ledger with the run
added in memory (``ledger.origins.WithRun``), the same answer as once the run is written."""

from __future__ import annotations

from theow_workers.cli.review import origin_lines
from theow_workers.core.history.classify import decide
from theow_workers.core.history.memory import MemoryHistory
from theow_workers.core.history.model import Origin, Outcome, Run
from theow_workers.ledger.origins import WithRun


def run(rid: str, sha: str, outcome: str, at: float, **given: object) -> Run:
    cause = "c" if outcome == "failed" else None
    return Run(id=rid, repo="o/r", job="t", branch=str(given.pop("branch", "main")), sha=sha,
               outcome=Outcome(outcome), finished_at=at, cause=cause, **given)  # type: ignore[arg-type]  # fmt: skip


HISTORY = [
    run("1", "a", "passed", 1.0),
    run("2", "b", "failed", 2.0),
    run("3", "p", "failed", 3.0, branch="x", pr="7", base_sha="b"),
    run("4", "b", "passed", 4.0, attempt=2),
]


def test_each_run_is_decided_the_same_before_and_after_it_is_written():
    for at, new in enumerate(HISTORY):
        if not new.failed:
            continue
        before = MemoryHistory(HISTORY[:at])
        written = MemoryHistory(HISTORY[: at + 1])
        assert decide(new, WithRun(before, new), until=new.finished_at) == decide(
            new, written, until=new.finished_at
        )


def test_the_pull_requests_failure_is_main_where_its_base_fails_and_flaky_once_main_passed_again():
    history = MemoryHistory(HISTORY[:3])
    assert decide(HISTORY[2], history).origin is Origin.MAIN
    assert decide(HISTORY[1], MemoryHistory(HISTORY)).origin is Origin.FLAKY  # retried, passed


def test_a_revised_origin_reads_with_what_it_was_at_the_verdict():
    assert origin_lines({"origin": "flaky", "origin_then": "main", "culprit": None,
                         "fixed_by": None, "reason": "passed on the same commit"}) == [
        "origin: flaky (at the verdict: main): passed on the same commit"
    ]  # fmt: skip
    assert origin_lines({"origin": "change", "origin_then": "change", "reason": ""}) == [
        "origin: change"
    ]
