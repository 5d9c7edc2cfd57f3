"""The loop the product exists for: unknown failure → proposal → review → resolved without the LLM.

Real resolver and explorer worker processes, on each provider in turn: the real
google-genai client against a fake Gemini server, the real openai client against
a fake OpenAI-compatible one; `theow review` and `theow meow` run as a user runs them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from theow_client import Status

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The acceptance path runs on PostgreSQL as well as SQLite.
FLEET_DATABASES = ("sqlite", "postgresql")

FLUX = re.compile(r"component (\w+) failed: code=(\d+)")

RESTART_ACTION = '''\
from theow_workers import action


@action("restart_component")
def restart_component(component: str, code: str) -> dict:
    """Say how to restart a component that failed with an exit code."""
    return {"status": "ok", "restart": component, "after_code": int(code)}
'''

ECHO_CHANGED = '''\
"""Actions the tests' rules call (changed by a proposal)."""

from theow_workers import action


@action("echo")
def echo(**params: str) -> dict:
    """Return the params it was given, louder."""
    return {"status": "ok", "params": params, "loud": True}
'''


def rule_yaml(cause: str, action: str = "restart_component") -> str:
    params = '{component: "{component}", code: "{code}"}' if action == "restart_component" else "{}"
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
            rule_yaml=rule_yaml(cause),
            actions=[{"name": "restart_component", "code": RESTART_ACTION}],
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
    ticket = fleet.client().submit(failure(cause, code), explore=True)
    assert ticket.wait(60).status is Status.EXPLORING
    outcome = ticket.wait_exploration(120)
    assert outcome["outcome"] == "proposal", outcome
    return outcome["proposal_id"]


def test_an_approved_proposal_resolves_the_same_cause_without_the_llm(
    fleet, any_explorers, monkeypatch
):
    fake, start = any_explorers
    fake.brain = brain_of(fake.wire)
    model = any_explorers.model
    # The workers look at the rules directory on every failure, not every 0.5 s:
    # the first failure after the approval meets the new rule, no interval to wait out.
    monkeypatch.setenv("THEOW_RULES_POLL_SECONDS", "0")
    start()
    proposal_id = propose(fleet, "flux", 1)
    rules_dir, actions_dir = Path(fleet.settings.rules_dir), Path(fleet.settings.actions_dir)

    listed = json.loads(theow("review", "list", "--json").stdout)
    assert [p["id"] for p in listed] == [proposal_id]
    shown = theow("review", "show", proposal_id)
    assert (
        "component_flux_failure" in shown.stdout
        and "+++ b/actions/restart_component.py" in shown.stdout
    )

    approved = theow("review", "approve", proposal_id)
    assert approved.returncode == 0, approved.stderr
    assert (rules_dir / "component_flux_failure.rule.yaml").exists()
    assert (actions_dir / "restart_component.py").read_text() == RESTART_ACTION
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
    assert stats["llm_sessions"] == 1 and stats["explorations"] == {"proposal": 1}
    assert stats["llm_cost"] > 0
    change = stats["hit_rate_change"]
    assert change["before"] == {"failures": 1, "hit_rate": 0.0}
    assert change["after"] == {"failures": 10, "hit_rate": 1.0}
    assert "hit rate 0% before the last approval, 100% since" in theow("meow").stdout


def test_rejecting_leaves_no_file_and_a_changed_target_is_refused(fleet, any_explorers):
    fake, start = any_explorers
    fake.brain = brain_of(fake.wire)
    start()
    rules_dir, actions_dir = Path(fleet.settings.rules_dir), Path(fleet.settings.actions_dir)

    rejected_id = propose(fleet, "flux", 1)
    result = theow("review", "reject", rejected_id, "--reason", "restarting hides the real bug")
    assert result.returncode == 0, result.stderr
    assert not (rules_dir / "component_flux_failure.rule.yaml").exists()
    assert not (actions_dir / "restart_component.py").exists()
    assert json.loads(theow("review", "list", "--status", "rejected", "--json").stdout)[0][
        "review_reason"
    ] == ("restarting hides the real bug")

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
    fake, start = any_explorers
    fake.brain = brain_of(fake.wire)
    start()
    propose(fleet, "flux", 3)
    rows = json.loads(theow("failures", "list", "--json").stdout)
    assert rows[0]["status"] == "exploring"
    detail = json.loads(theow("failures", "show", rows[0]["id"], "--json").stdout)
    assert detail["explorations"][0]["outcome"] == "proposal"
    assert any("component flux failed" in line for line in detail["error_lines"])
    assert fake.wire.function_responses(fake.bodies(any_explorers.model)[0]) == []
