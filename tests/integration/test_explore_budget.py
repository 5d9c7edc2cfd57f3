"""The daily LLM budget, end to end: explorer workers started with one refuse the call that would pass it.

A setting of the workers' own, so its fleet is its own; the explorer's other
end-to-end tests share one fleet per provider (test_explore_workers.py).
"""

from __future__ import annotations

import pytest

from tests.integration.test_explore_workers import failure, proposing

pytestmark = pytest.mark.integration


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
