"""A wrapper is not a cause: a failure only wrapper rules matched is unexplained.

``make: *** [all] Error 1`` says a step failed, not why. When only rules marked
``generic`` validate, the verdict names that wrapper and no rule, runs nothing,
moves no rule's track record, and is explored like a failure nothing matched.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import prepared_database
from theow_client.messages import SubmitRequest
from theow_client.verdict import Status
from theow_client.verdict_text import format_verdict
from theow_workers.adapters.memory import InMemoryStore
from theow_workers.core.resolve.library import Library
from theow_workers.core.resolve.plan import RuleBook
from theow_workers.core.resolve.service import ResolveService, ResolveSettings, Submission
from theow_workers.core.rules.schema import parse_rule

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

MAKE = parse_rule(
    r"""
name: make_failed
mode: track
generic: true
when:
  - fact: stderr
    regex: 'make: \*\*\* \[(?P<target>[^\]]+)\] Error (?P<code>\d+)'
"""
)
RAKE = parse_rule(
    r"""
name: rake_failed
mode: track
generic: true
when:
  - fact: stderr
    regex: 'rake aborted!\n(?P<message>[^\n]*\S)'
"""
)
WRAPPED = "compiling\nKeyError: 'DATABASE_URL'\nmake: *** [all] Error 2\n"


@pytest.fixture(scope="module")
def knowledge() -> Library:
    return Library.load(FIXTURES / "rules", FIXTURES / "actions")


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "memory":
        yield InMemoryStore()
        return
    from theow_workers.store.results import SqlStore

    sql = SqlStore(prepared_database("sqlite", tmp_path))
    yield sql
    sql.dispose()


def service_for(knowledge: Library, store, explored: list[str] | None = None) -> ResolveService:
    book = RuleBook((*knowledge.book.rules, MAKE, RAKE), "with-wrappers")

    def explore(sub: Submission, rule: str | None) -> str:
        assert explored is not None
        explored.append(sub.failure_id)
        return "sent to an explorer"

    return ResolveService(
        store,
        rulebook=lambda: book,
        actions=lambda: knowledge.actions,
        settings=ResolveSettings(action_timeout=1.0),
        explore=explore if explored is not None else None,
    )


def submit(service: ResolveService, stderr: str, failure_id: str = "f1", **extra):
    payload = {"failure_id": failure_id, "facts": {"stderr": stderr, "job": "build-7"}, **extra}
    return service.resolve(SubmitRequest.from_wire(payload), fallback_id=failure_id)


def test_only_a_wrapper_matched_is_unexplained_names_the_wrapper_and_runs_nothing(knowledge, store):
    verdict = submit(service_for(knowledge, store), WRAPPED)
    assert verdict.status is Status.UNEXPLAINED
    assert (verdict.rule, verdict.wrapper, verdict.mode) == (None, "make_failed", None)
    assert verdict.actions == () and verdict.attempts == 0 and verdict.evidence is None
    assert "only the wrapper make_failed matched at stderr line 3" in verdict.reason
    assert store.rule_stats().get("make_failed") is None  # a wrapper's match is no success
    print_ = format_verdict(verdict)
    assert print_.startswith("status:  unexplained (wrapper: make_failed)")


def test_a_stored_unexplained_verdict_still_names_its_wrapper(knowledge, store):
    service = service_for(knowledge, store)
    first = submit(service, WRAPPED)
    again = submit(service, WRAPPED)  # a redelivery: the verdict as stored
    assert (again.status, again.wrapper, again.rule) == (Status.UNEXPLAINED, "make_failed", None)
    assert again.to_dict() == first.to_dict()


def test_a_specific_rule_explains_a_wrapped_failure_and_the_wrapper_is_only_also(knowledge, store):
    verdict = submit(service_for(knowledge, store), "ECHO hello\nmake: *** [all] Error 1\n")
    assert (verdict.status, verdict.rule, verdict.wrapper) == (Status.RESOLVED, "tf_echo", None)
    assert verdict.also == ("make_failed",)


def test_an_unexplained_failure_is_explored_like_an_unmatched_one(knowledge, store):
    explored: list[str] = []
    service = service_for(knowledge, store, explored)
    verdict = submit(service, "rake aborted!\nCommand failed with status (1)\n", explore=True)
    assert verdict.status is Status.EXPLORING and explored == ["f1"]
    assert (verdict.rule, verdict.wrapper) == (None, "rake_failed")


def test_nothing_matched_is_still_unmatched_with_no_wrapper(knowledge, store):
    verdict = submit(service_for(knowledge, store), "compiling\nKeyError: 'DATABASE_URL'\n")
    assert (verdict.status, verdict.wrapper) == (Status.UNMATCHED, None)


def test_rules_eval_counts_an_unexplained_failure_as_not_found_and_names_its_wrapper(
    knowledge, tmp_path
):
    import json

    from theow_workers import evaluation

    corpus = tmp_path / "failures.jsonl"
    logs = {"wrapped": WRAPPED, "echo": "ECHO hi\nmake: *** [all] Error 1\n", "none": "boom\n"}
    lines = (json.dumps({"id": k, "stderr": v, "job": "build-7"}) + "\n" for k, v in logs.items())
    corpus.write_text("".join(lines))
    rows: list[dict] = []
    book = RuleBook((*knowledge.book.rules, MAKE, RAKE), "with-wrappers")
    summary = evaluation.run(book, corpus, emit=lambda outcome: rows.append(outcome.row()))
    report = summary.to_dict()
    assert (report["found"], report["unexplained"], report["failures"]) == (1, 1, 3)
    by_id = {row["id"]: row for row in rows}
    assert (by_id["wrapped"]["rule"], by_id["wrapped"]["wrapper"]) == (None, "make_failed")
    assert (by_id["none"]["rule"], by_id["none"]["wrapper"]) == (None, None)
    assert by_id["echo"]["wrapper"] is None and by_id["echo"]["rule"] is not None


def test_failures_list_and_show_filter_and_name_the_wrapper_of_an_unexplained_failure(
    knowledge, tmp_path
):
    from theow_workers.store.failures import detail, recent
    from theow_workers.store.results import SqlStore

    store = SqlStore(prepared_database("sqlite", tmp_path))
    service = service_for(knowledge, store)
    submit(service, WRAPPED, failure_id="wrapped")
    submit(service, "ECHO hello\n", failure_id="echo")
    listed = recent(store, status="unexplained")
    assert [(r["id"], r["rule"], r["wrapper"]) for r in listed] == [
        ("wrapped", None, "make_failed")
    ]
    shown = detail(store, "wrapped")
    assert shown is not None and shown["verdict"]["wrapper"] == "make_failed"
    assert detail(store, "echo")["verdict"]["wrapper"] is None  # type: ignore[index]
    store.dispose()
