"""Exploration end to end: client → resolver → explore queue → explorer workers → fake model → SQL.

Each test runs once per provider: the real google-genai client in each explorer
worker process talks to a fake Gemini server on loopback (THEOW_GEMINI_BASE_URL),
or the real openai client to a fake OpenAI-compatible one (THEOW_LLM_BASE_URL).
The fake's "brain" plays a model that reads the failure, proposes a rule for
it, and, when told that a submission was rejected, corrects it.
"""

from __future__ import annotations

import re

import pytest
from sqlalchemy import func, select

from theow_client import Status
from theow_workers.store.explore import ExploreStore
from theow_workers.store.schema import ExplorationRow, ProposalRow

pytestmark = pytest.mark.integration

CAUSE = re.compile(r"component (\w+) failed: code=(\d+)")


def rule_for(cause: str, regex: str | None = None) -> str:
    regex = regex or rf"component {cause} failed: code=(?P<code>\d+)"
    return (
        f"name: component_{cause}_failure\n"
        f"description: The {cause} component fails with an exit code.\n"
        "mode: track\n"
        "when:\n"
        "  - fact: stderr\n"
        f"    regex: '{regex}'\n"
    )


def proposing(wire):
    """A brain that submits a rule for the cause named in the log, fixed if it comes back rejected."""

    def brain(model: str, body: dict) -> dict:
        cause = CAUSE.search("\n".join(wire.user_texts(body))).group(1)
        rejected = [r for r in wire.function_responses(body) if "rejected" in str(r)]
        if cause == "fussy" and not rejected:  # first a rule that does not match, to be corrected
            return wire.function_call(
                "submit_rule", rule_yaml=rule_for(cause, "component fussy exploded"), actions=[]
            )
        return wire.function_call("submit_rule", rule_yaml=rule_for(cause), actions=[])

    return brain


def failure(cause: str, n: int) -> dict:
    return {
        "stderr": f"build step {n}\nERROR: component {cause} failed: code={n}\n",
        "job": f"job-{n}",
    }


def count(store, model, **where) -> int:
    with store.session() as s:
        query = select(func.count()).select_from(model)
        for key, value in where.items():
            query = query.where(getattr(model, key) == value)
        return int(s.execute(query).scalar_one())


def test_an_unknown_failure_is_explored_into_a_pending_proposal_after_one_correction(
    fleet, any_explorers
):
    fake, start = any_explorers
    fake.brain = proposing(fake.wire)
    start()
    ticket = fleet.client().submit(failure("fussy", 7), explore=True)
    verdict = ticket.wait(60)
    assert verdict.status is Status.EXPLORING
    outcome = ticket.wait_exploration(120)
    assert outcome["outcome"] == "proposal", outcome
    assert fake.sessions(any_explorers.model) == 1
    assert len(fake.bodies(any_explorers.model)) == 2  # the rejected submission, then the fix

    store = ExploreStore(fleet.store())
    (proposal,) = store.proposals(status="pending")
    assert proposal.id == outcome["proposal_id"]
    assert proposal.rule_name == "component_fussy_failure"
    assert "component fussy failed" in proposal.rule_yaml
    (exploration,) = store.explorations(ticket.failure_id)
    assert exploration.turns == 2 and exploration.tokens_in > 0 and exploration.cost > 0
    assert exploration.models == [any_explorers.model]
    assert "test-key-not-secret" not in str(exploration.transcript)


def test_fifty_failures_from_five_root_causes_cost_exactly_five_sessions(fleet, any_explorers):
    fake, start = any_explorers
    fake.brain = proposing(fake.wire)
    start(count=2)
    client = fleet.client()
    causes = ["alpha", "bravo", "charlie", "delta", "echo"]
    tickets = [client.submit(failure(causes[i % 5], i), explore=True) for i in range(50)]
    outcomes = [t.wait_exploration(240)["outcome"] for t in tickets]

    assert fake.sessions(any_explorers.model) == 5
    assert outcomes.count("proposal") == 5
    assert set(outcomes) <= {"proposal", "deduplicated", "cache_hit"}
    store = fleet.store()
    assert count(store, ProposalRow) == 5
    assert count(store, ExplorationRow) == 50  # every failure has its recorded outcome


def test_a_per_day_quota_stops_exploring_and_says_why(fleet, any_explorers):
    fake, start = any_explorers
    quota = fake.wire.quota_error
    fake.brain = lambda model, body: quota(per_day=True, retry_delay="3600s", model=model)
    start()
    client = fleet.client()
    first = client.submit(failure("alpha", 1), explore=True)
    assert first.wait_exploration(120)["outcome"] == "rate_limited"
    requests_after_first = len(fake.requests)
    second = client.submit(failure("bravo", 2), explore=True)
    outcome = second.wait_exploration(120)
    assert outcome["outcome"] == "rate_limited"
    assert "quota" in outcome["reason"].lower()
    # Nothing to wait for: an exploration records its outcome after any request it sent.
    assert len(fake.requests) == requests_after_first  # no request reached the model


def test_the_daily_budget_stops_exploring_before_a_request_is_sent_and_says_until_when(
    fleet, any_explorers, monkeypatch
):
    fake, start = any_explorers
    fake.brain = proposing(fake.wire)
    # Less than the first turn's most (its prompt and every output token it may write).
    monkeypatch.setenv("THEOW_LLM_DAILY_BUDGET", "0.0005")
    start()
    outcome = fleet.client().submit(failure("alpha", 1), explore=True).wait_exploration(120)
    assert outcome["outcome"] == "rate_limited"
    assert "daily LLM budget of $0.0005 is reached" in outcome["reason"]
    assert "no model call is sent until" in outcome["reason"]
    assert fake.requests == []  # the call that would pass the budget was never sent


def test_a_probabilistic_rule_runs_its_own_prompt_and_tools_and_succeeds_only_when_done(
    fleet, any_explorers
):
    fake, start = any_explorers
    wire = fake.wire

    def investigator(model: str, body: dict) -> dict:
        if not wire.function_responses(body):
            assert "Investigate this unusual failure" in "\n".join(wire.user_texts(body))
            return wire.function_call("read_log", start_line=-5, lines=5)
        return wire.text("The widget ran out of pressure.\nDONE")

    fake.brain = investigator
    start()
    ticket = fleet.client().submit(
        {"stderr": "boot\nNEEDS_INVESTIGATION: widget 4\n"}, explore=True
    )
    verdict = ticket.wait(60)
    assert (verdict.status, verdict.rule, verdict.mode) == (
        Status.EXPLORING,
        "tf_investigate",
        "explore",
    )
    outcome = ticket.wait_exploration(120)
    assert outcome["outcome"] == "done"
    assert outcome["rule"] == "tf_investigate"
    offered = set(wire.declared(fake.bodies(any_explorers.model)[0]))
    assert offered == {"test_rule", "submit_rule", "give_up", "read_log"}

    ungated = fleet.client().submit({"stderr": "NEEDS_INVESTIGATION again"}).wait(60)
    assert ungated.status is Status.UNMATCHED  # without explore=True no LLM session runs
