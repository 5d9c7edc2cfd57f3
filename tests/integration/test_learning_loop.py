"""The loop the product exists for: unknown failure → proposal → review → resolved without the LLM.

Real resolver and explorer worker processes, on each provider in turn: the real
google-genai client against a fake Gemini server, the real openai client against
a fake OpenAI-compatible one; `theow review` and `theow meow` run as a user runs them.

The module's tests share one fleet (a resolver, an explorer and the fake) for each
provider on each database, each test with root causes of its own (an approved rule
resolves only its own cause); the exploration state is cleared between tests and
the store's totals are read as changes over the test.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from theow_client import Status
from theow_workers.store.explore import ExploreStore

from .conftest import PROVIDERS, Explorers, Fleet, explorers_reset, shared_explorers

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The acceptance path runs on PostgreSQL as well as SQLite, on each provider.
COMBINATIONS = [
    pytest.param((provider, database), id=f"{database}-{provider}")
    for database in ("sqlite", "postgresql")
    for provider in PROVIDERS
]

FLUX = re.compile(r"component (\w+) failed: code=(\d+)")


def restart_action(cause: str) -> str:
    """The proposed action for ``cause``: a file of its own, ``actions/restart_<cause>.py``."""
    return (
        "from theow_workers import action\n"
        "\n"
        "\n"
        f'@action("restart_{cause}")\n'
        f"def restart_{cause}(component: str, code: str) -> dict:\n"
        '    """Say how to restart a component that failed with an exit code."""\n'
        '    return {"status": "ok", "restart": component, "after_code": int(code)}\n'
    )


ECHO_CHANGED = '''\
"""Actions the tests' rules call (changed by a proposal)."""

from theow_workers import action


@action("echo")
def echo(**params: str) -> dict:
    """Return the params it was given, louder."""
    return {"status": "ok", "params": params, "loud": True}
'''


def rule_yaml(cause: str, action: str) -> str:
    params = '{component: "{component}", code: "{code}"}' if action != "echo" else "{}"
    return (
        f"name: component_{cause}_failure\n"
        f"description: The {cause} component failed with an exit code; restart it.\n"
        "when:\n"
        "  - fact: stderr\n"
        f"    regex: 'component (?P<component>{cause}) failed: code=(?P<code>\\d+)'\n"
        "then:\n"
        f"  - action: {action}\n"
        f"    params: {params}\n"
    )


def brain_of(wire):
    """The model: proposes a rule for the cause its prompt names, through ``wire``'s provider."""

    def brain(model: str, body: dict) -> dict:
        cause = FLUX.search("\n".join(wire.user_texts(body))).group(1)
        if cause == "shadow":  # proposes a change to an existing action file
            return wire.function_call(
                "submit_rule",
                rule_yaml=rule_yaml(cause, "echo"),
                actions=[{"name": "echo", "code": ECHO_CHANGED}],
            )
        return wire.function_call(
            "submit_rule",
            rule_yaml=rule_yaml(cause, f"restart_{cause}"),
            actions=[{"name": f"restart_{cause}", "code": restart_action(cause)}],
        )

    return brain


def failure(cause: str, code: int) -> dict:
    return {
        "stderr": f"deploy step\nERROR: component {cause} failed: code={code}\n",
        "job": f"deploy-{code}",
    }


def theow(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def propose(fleet, cause: str, code: int = 1) -> str:
    return proposed(fleet, cause, code)[0]


def proposed(fleet, cause: str, code: int = 1) -> tuple[str, str]:
    """The proposal the model made for a new failure of ``cause``, and the failure's id."""
    ticket = fleet.client().submit(failure(cause, code), explore=True)
    assert ticket.wait(60).status is Status.EXPLORING
    outcome = ticket.wait_exploration(120)
    assert outcome["outcome"] == "proposal", outcome
    return outcome["proposal_id"], ticket.failure_id


@pytest.fixture(scope="module", params=COMBINATIONS)
def loop_fleet(
    request, tmp_path_factory, redis_url, milvus_uri
) -> Iterator[tuple[Fleet, Explorers]]:
    provider, database = request.param
    base = tmp_path_factory.mktemp(f"loop-{database}-{provider}")
    # The workers look at the rules directory on every failure, not every 0.5 s:
    # the first failure after an approval meets the new rule, no interval to wait out.
    with shared_explorers(
        base, redis_url, milvus_uri, provider, count=1, database=database,
        THEOW_RULES_POLL_SECONDS="0",
    ) as running:  # fmt: skip
        yield running


@pytest.fixture
def fleet(loop_fleet) -> Fleet:
    return loop_fleet[0]


@pytest.fixture
def any_explorers(loop_fleet) -> Iterator[Explorers]:
    """The module's explorers with nothing left of the tests before, the brain proposing."""
    fleet, found = loop_fleet
    explorers_reset(fleet, found)
    found.fake.brain = brain_of(found.fake.wire)
    yield found


def pending_ids(fleet) -> set[str]:
    return {p.id for p in ExploreStore(fleet.store()).proposals(status="pending")}


def totals(fleet) -> dict:
    """What `theow meow --json` says now (read in this process: one command fewer to start)."""
    from theow_workers.store.reads import SqlReads
    from theow_workers.views.stats import meow

    return meow(SqlReads(ExploreStore(fleet.store())))


def test_an_approved_proposal_resolves_the_same_cause_without_the_llm(fleet, any_explorers):
    fake = any_explorers.fake
    model = any_explorers.model
    before = totals(fleet)
    assert before["resolves"] == 0  # every earlier failure of the module was a cause unknown
    pending_before = pending_ids(fleet)
    proposal_id = propose(fleet, "flux", 1)
    rules_dir, actions_dir = Path(fleet.settings.rules_dir), Path(fleet.settings.actions_dir)

    listed = json.loads(theow("review", "list", "--json").stdout)
    assert {p["id"] for p in listed} - pending_before == {proposal_id}
    shown = theow("review", "show", proposal_id)
    assert (
        "component_flux_failure" in shown.stdout and "+++ b/actions/restart_flux.py" in shown.stdout
    )

    approved = theow("review", "approve", proposal_id)
    assert approved.returncode == 0, approved.stderr
    assert (rules_dir / "component_flux_failure.rule.yaml").exists()
    assert (actions_dir / "restart_flux.py").read_text() == restart_action("flux")
    again = theow("review", "approve", proposal_id)
    assert again.returncode == 0 and "already approved" in again.stdout

    sessions_before = fake.sessions(model)
    client = fleet.client()
    tickets = [client.submit(failure("flux", code), explore=True) for code in range(100, 110)]
    verdicts = [t.wait(60) for t in tickets]
    assert {(v.status, v.rule) for v in verdicts} == {(Status.RESOLVED, "component_flux_failure")}
    assert sorted(v.outputs[0]["output"]["after_code"] for v in verdicts) == list(range(100, 110))
    assert fake.sessions(model) == sessions_before  # no LLM call for any of the ten

    stats = json.loads(theow("meow", "--json").stdout)
    rule = next(r for r in stats["top_rules"] if r["rule"] == "component_flux_failure")
    assert (rule["successes"], rule["failures"]) == (10, 0)
    assert stats["llm_sessions"] - before["llm_sessions"] == 1  # the one exploration, no more
    proposals = before["explorations"].get("proposal", 0)
    assert stats["explorations"] == {**before["explorations"], "proposal": proposals + 1}
    assert stats["llm_cost"] > before["llm_cost"]
    change = stats["hit_rate_change"]
    # Before the approval: every failure so far, none matched; since: the ten, all resolved.
    assert change["before"] == {"failures": before["failures"] + 1, "hit_rate": 0.0}
    assert change["after"] == {"failures": 10, "hit_rate": 1.0}
    assert "hit rate 0% before the last approval, 100% since" in theow("meow").stdout


def test_rejecting_leaves_no_file_and_a_changed_target_is_refused(fleet, any_explorers):
    rules_dir, actions_dir = Path(fleet.settings.rules_dir), Path(fleet.settings.actions_dir)

    rejected_id = propose(fleet, "drift", 1)
    result = theow("review", "reject", rejected_id, "--reason", "restarting hides the real bug")
    assert result.returncode == 0, result.stderr
    assert not (rules_dir / "component_drift_failure.rule.yaml").exists()
    assert not (actions_dir / "restart_drift.py").exists()
    rejected = json.loads(theow("review", "list", "--status", "rejected", "--json").stdout)
    (reason,) = [p["review_reason"] for p in rejected if p["id"] == rejected_id]
    assert reason == "restarting hides the real bug"

    changed_id = propose(fleet, "shadow", 2)
    target = actions_dir / "fixture_actions.py"
    before_edit = target.read_text() + "\n# a teammate's edit after the proposal was made\n"
    target.write_text(before_edit)
    refused = theow("review", "approve", changed_id)
    assert refused.returncode == 1
    assert "fixture_actions.py changed since the proposal was made" in refused.stderr
    assert target.read_text() == before_edit
    assert not (rules_dir / "component_shadow_failure.rule.yaml").exists()


def test_failures_list_and_show_explain_what_happened(fleet, any_explorers):
    fake = any_explorers.fake
    _, failure_id = proposed(fleet, "quark", 3)
    rows = json.loads(theow("failures", "list", "--json").stdout)
    assert rows[0]["id"] == failure_id  # the newest first
    assert rows[0]["status"] == "exploring"
    detail = json.loads(theow("failures", "show", failure_id, "--json").stdout)
    assert detail["explorations"][0]["outcome"] == "proposal"
    assert any("component quark failed" in line for line in detail["error_lines"])
    assert fake.wire.function_responses(fake.bodies(any_explorers.model)[0]) == []
