"""An exact repeat reuses its plan while the order follows from the facts alone."""

from __future__ import annotations

import pytest

from theow_client.messages import SubmitRequest
from theow_client.verdict import Status
from theow_workers.adapters.memory import InMemoryStore
from theow_workers.core.ports import RuleStats
from theow_workers.core.resolve import service as service_mod
from theow_workers.core.resolve.plan import RuleBook
from theow_workers.core.resolve.service import ResolveService
from theow_workers.core.rules.schema import parse_rule

LOG = "Downloading deps\nnpm ERR! code ERESOLVE\nnpm ERR! ERESOLVE could not resolve\nmake: *** [ci] Error 1\n"


def rule(name: str, contains: str, generic: bool = False) -> object:
    return parse_rule(
        f"name: {name}\nmode: track\ndescription: {name}\ngeneric: {str(generic).lower()}\n"
        f"when:\n  - {{fact: log, contains: '{contains}'}}\n"
    )


def service_for(book: RuleBook, store: InMemoryStore, similarity=None) -> ResolveService:
    return ResolveService(store, rulebook=lambda: book, actions=dict, similarity=similarity)


def counting_scans(book: RuleBook) -> list[int]:
    scans, scan = [], book.scanner.scan

    def counted(facts):
        scans.append(1)
        return scan(facts)

    book.scanner.scan = counted  # type: ignore[method-assign]
    return scans


def test_a_repeat_ordered_by_specificity_gets_the_same_verdict_without_a_second_scan():
    book = RuleBook(
        (rule("make_failed", "make: ***", generic=True), rule("npm_eresolve", "ERESOLVE")), "v1"
    )
    scans = counting_scans(book)
    service = service_for(book, InMemoryStore())

    first = service.resolve(
        SubmitRequest.from_wire({"failure_id": "a", "facts": {"log": LOG}}), "a"
    )
    again = service.resolve(
        SubmitRequest.from_wire({"failure_id": "b", "facts": {"log": LOG}}), "b"
    )

    assert (first.status, first.rule, first.also) == (
        Status.TRACKED,
        "npm_eresolve",
        ("make_failed",),
    )
    assert (again.rule, again.also, again.evidence) == (first.rule, first.also, first.evidence)
    assert len(scans) == 1


# Without the rules' vectors (an index not synced yet) only track records order a tie.
@pytest.mark.parametrize("sims", [{"npm_peer": 0.9, "npm_lock": 0.8}, {}])
def test_a_tie_decided_by_track_records_is_decided_again_when_they_move(monkeypatch, sims):
    monkeypatch.setattr(service_mod, "STATS_TTL", 0.0)  # read the track records every time
    book = RuleBook((rule("npm_peer", "ERESOLVE"), rule("npm_lock", "ERESOLVE")), "v1")
    store = InMemoryStore()
    service = service_for(book, store, similarity=lambda facts: lambda names: sims)

    first = service.resolve(
        SubmitRequest.from_wire({"failure_id": "a", "facts": {"log": LOG}}), "a"
    )
    store.stats.update(npm_peer=RuleStats(0, 9), npm_lock=RuleStats(9, 0))
    again = service.resolve(
        SubmitRequest.from_wire({"failure_id": "b", "facts": {"log": LOG}}), "b"
    )

    assert (first.rule, again.rule) == ("npm_peer", "npm_lock")


@pytest.mark.parametrize("facts", [{"log": LOG}, {"log": LOG + "one more line\n"}])
def test_different_facts_are_planned_afresh(facts):
    book = RuleBook(
        (rule("npm_eresolve", "ERESOLVE"), rule("make_failed", "make: ***", generic=True)), "v1"
    )
    scans = counting_scans(book)
    service = service_for(book, InMemoryStore())
    service.resolve(
        SubmitRequest.from_wire({"failure_id": "a", "facts": {"log": LOG, "job": "x"}}), "a"
    )
    service.resolve(SubmitRequest.from_wire({"failure_id": "b", "facts": facts}), "b")
    assert len(scans) == 2
