"""Exploration end to end: client → resolver → explore queue → explorer workers → fake model → SQL.

Each test runs once per provider: the real google-genai client in each explorer
worker process talks to a fake Gemini server on loopback (THEOW_GEMINI_BASE_URL),
or the real openai client to a fake OpenAI-compatible one (THEOW_LLM_BASE_URL).
The fake's "brain" plays a model that reads the failure, proposes a rule for
it, and, when told that a submission was rejected, corrects it.

The module's tests share one fleet per provider (a resolver, two explorers and
the fake), each test with failures and root causes of its own: a worker's model
loads once for the module instead of once a test. Between tests the broker's
exploration state and the fake's records are cleared (``explorers_reset``). The
daily budget, a worker setting, has its fleet of its own (test_explore_budget.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from sqlalchemy import func, select

from theow_client import Status
from theow_workers.store.explore import ExploreStore
from theow_workers.store.schema import ExplorationRow, ProposalRow

from .conftest import PROVIDERS, Explorers, Fleet, explorers_reset, shared_explorers

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


@pytest.fixture(scope="module", params=PROVIDERS)
def provider_fleet(
    request, tmp_path_factory, redis_url, milvus_uri
) -> Iterator[tuple[Fleet, Explorers]]:
    base = tmp_path_factory.mktemp(f"explore-{request.param}")
    with shared_explorers(base, redis_url, milvus_uri, request.param, count=2) as running:
        yield running


@pytest.fixture
def fleet(provider_fleet) -> Fleet:
    return provider_fleet[0]


@pytest.fixture
def any_explorers(provider_fleet) -> Iterator[Explorers]:
    """The module's explorers, with nothing left of the tests before."""
    fleet, found = provider_fleet
    explorers_reset(fleet, found)
    yield found


def test_an_unknown_failure_is_explored_into_a_pending_proposal_after_one_correction(
    fleet, any_explorers
):
    fake = any_explorers.fake
    fake.brain = proposing(fake.wire)
    store = ExploreStore(fleet.store())
    pending_before = {p.id for p in store.proposals(status="pending")}
    ticket = fleet.client().submit(failure("fussy", 7), explore=True)
    verdict = ticket.wait(60)
    assert verdict.status is Status.EXPLORING
    outcome = ticket.wait_exploration(120)
    assert outcome["outcome"] == "proposal", outcome
    assert fake.sessions(any_explorers.model) == 1
    assert len(fake.bodies(any_explorers.model)) == 2  # the rejected submission, then the fix

    (proposal,) = [p for p in store.proposals(status="pending") if p.id not in pending_before]
    assert proposal.id == outcome["proposal_id"]
    assert proposal.rule_name == "component_fussy_failure"
    assert "component fussy failed" in proposal.rule_yaml
    (exploration,) = store.explorations(ticket.failure_id)
    assert exploration.turns == 2 and exploration.tokens_in > 0 and exploration.cost > 0
    assert exploration.models == [any_explorers.model]
    assert "test-key-not-secret" not in str(exploration.transcript)


def test_fifty_failures_from_five_root_causes_cost_exactly_five_sessions(fleet, any_explorers):
    fake = any_explorers.fake  # two explorers
    fake.brain = proposing(fake.wire)
    store = fleet.store()
    proposals, explorations = count(store, ProposalRow), count(store, ExplorationRow)
    client = fleet.client()
    causes = ["alpha", "bravo", "charlie", "delta", "echo"]
    tickets = [client.submit(failure(causes[i % 5], i), explore=True) for i in range(50)]
    outcomes = [t.wait_exploration(240)["outcome"] for t in tickets]

    assert fake.sessions(any_explorers.model) == 5
    assert outcomes.count("proposal") == 5
    assert set(outcomes) <= {"proposal", "deduplicated", "cache_hit"}
    assert count(store, ProposalRow) - proposals == 5
    # every failure has its recorded outcome
    assert count(store, ExplorationRow) - explorations == 50


def test_a_per_day_quota_stops_exploring_and_says_why(fleet, any_explorers):
    fake = any_explorers.fake
    quota = fake.wire.quota_error
    fake.brain = lambda model, body: quota(per_day=True, retry_delay="3600s", model=model)
    client = fleet.client()
    first = client.submit(failure("kilo", 1), explore=True)
    assert first.wait_exploration(120)["outcome"] == "rate_limited"
    requests_after_first = len(fake.requests)
    second = client.submit(failure("lima", 2), explore=True)
    outcome = second.wait_exploration(120)
    assert outcome["outcome"] == "rate_limited"
    assert "quota" in outcome["reason"].lower()
    # Nothing to wait for: an exploration records its outcome after any request it sent.
    assert len(fake.requests) == requests_after_first  # no request reached the model


def test_a_probabilistic_rule_runs_its_own_prompt_and_tools_and_succeeds_only_when_done(
    fleet, any_explorers
):
    fake = any_explorers.fake
    wire = fake.wire

    def investigator(model: str, body: dict) -> dict:
        if not wire.function_responses(body):
            assert "Investigate this unusual failure" in "\n".join(wire.user_texts(body))
            return wire.function_call("read_log", start_line=-5, lines=5)
        return wire.text("The widget ran out of pressure.\nDONE")

    fake.brain = investigator
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
