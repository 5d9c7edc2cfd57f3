"""A bad rule file does not turn workers into error machines: they serve the last good rules."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest

from theow_client import Status, names
from theow_workers.ops.checks import FAIL, WARN, Context, check_redis
from theow_workers.ops.metrics import registry_for

pytestmark = pytest.mark.integration

BROKEN = "name: broken\nwhen: [this is not a rule\n"


def rules_findings(fleet) -> list:
    return [f for f in check_redis(Context(fleet.settings)) if f.check == "rules.workers"]


def rules_invalid_metric(fleet) -> str:
    text = generate_latest(registry_for(fleet.settings)).decode()
    return next(line for line in text.splitlines() if line.startswith("theow_rules_invalid "))


def test_a_new_worker_serves_the_last_good_rules_and_reports_the_bad_file(fleet, monkeypatch):
    # The workers look at the rules directory on every failure, not every 0.5 s:
    # the first failure after the fix sees it, with no interval to wait out.
    monkeypatch.setenv("THEOW_RULES_POLL_SECONDS", "0")
    first = fleet.start_worker(name="first")
    client = fleet.client()
    assert client.submit({"stderr": "ECHO before", "job": "j"}).wait(60).status is Status.RESOLVED
    first.terminate()
    first.wait(30)

    broken = fleet.settings.rules_dir / "sub" / "broken.rule.yaml"
    broken.parent.mkdir()
    broken.write_text(BROKEN)
    fleet.start_worker(name="fresh")  # no rules of its own: only the fleet's last good version

    verdict = client.submit({"stderr": "ECHO after", "job": "j"}).wait(60)
    assert (verdict.status, verdict.rule) == (Status.RESOLVED, "tf_echo")
    assert "serving the last valid version" in fleet.worker_log("fresh")
    (finding,) = rules_findings(fleet)
    assert finding.status == WARN and "broken.rule.yaml" in finding.detail
    assert rules_invalid_metric(fleet) == "theow_rules_invalid 1.0"

    broken.unlink()
    assert client.submit({"stderr": "ECHO fixed", "job": "j"}).wait(60).status is Status.RESOLVED
    assert rules_findings(fleet) == []
    assert rules_invalid_metric(fleet) == "theow_rules_invalid 0.0"


def test_with_no_valid_version_ever_a_failure_waits_instead_of_a_final_error(
    fleet, redis_client, monkeypatch
):
    redis_client.delete(names.KEY_RULES_LAST_GOOD)
    broken = fleet.settings.rules_dir / "broken.rule.yaml"
    broken.write_text(BROKEN)
    monkeypatch.setenv("THEOW_RULES_WAIT_SECONDS", "1")  # the worker's environment
    fleet.start_worker()
    client = fleet.client()

    ticket = client.submit({"stderr": "ECHO waiting", "job": "j"})
    with pytest.raises(TimeoutError):
        ticket.wait(4)
    assert fleet.store().verdict(ticket.failure_id) is None  # nothing final was stored
    assert "waits for valid rules" in fleet.worker_log()
    (finding,) = rules_findings(fleet)
    assert finding.status == FAIL and "failures wait for valid rules" in finding.detail

    broken.unlink()
    verdict = ticket.wait(60)
    assert (verdict.status, verdict.rule) == (Status.RESOLVED, "tf_echo")
