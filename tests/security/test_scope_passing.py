"""No key an agent can write: a passing run's sample is the worker's, with its TTL.

An agent's broker user could ``SET theow:passing:sample:<job>`` with no TTL,
and one such key stopped every agent's (and the webhook's) passing runs of
that job for good. Now the worker that learns a run takes its agent's sample.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from theow_client import names
from theow_workers.ops.acl import agent_url, create_agent_user
from theow_workers.stack import EmbeddedStack

pytestmark = pytest.mark.integration

AGENT, TOKEN = "ci-7", "tw1.ci-7.first-agents-secret"


def test_an_agent_can_write_no_sample_and_read_only_its_own(embedded_valkey: EmbeddedStack):
    create_agent_user(embedded_valkey.settings, AGENT, TOKEN)
    admin = redis.Redis.from_url(embedded_valkey.settings.redis_url)
    agent = redis.Redis.from_url(agent_url(embedded_valkey.settings.redis_url, AGENT, TOKEN))
    webhook = names.key_passing_sample(names.agent_job("github-hooks", "github:acme/app/CI/test"))
    own = names.key_passing_sample(names.agent_job(AGENT, "build"))
    for attempt in (
        lambda: agent.set(names.key_passing_sample("build"), "1"),
        lambda: agent.set(webhook, "1"),
        lambda: agent.set(own, "1"),  # not even its own: a key with no TTL, forever
        lambda: agent.set(own, "1", nx=True, ex=3600),
        lambda: agent.exists(webhook),  # nor may it see what the webhook sampled
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            attempt()
    assert admin.keys(names.key_passing_sample("*")) == []
    admin.set(own, "1", ex=60)
    assert agent.exists(own) == 1


def test_a_passing_run_is_sampled_by_the_worker_per_agent(fleet, redis_client):
    fleet.stack.start_worker(["passing"], concurrency=1, name="passing")
    fleet.wait_for_worker("passing")
    first, second = fleet.agent("first"), fleet.agent("second")
    job = "github:acme/app/CI/test"

    def run(client: Any, n: int) -> dict[str, Any]:
        payload = {"job": job, "run_id": f"r{n}", "facts_json": json.dumps({"stderr": "ok"})}
        app = client.app
        sent = app.send_task(
            names.TASK_PASSING,
            args=[client.signed(names.TASK_PASSING, payload)],
            queue=names.QUEUE_PASSING,
        )
        return dict(sent.get(timeout=60))

    learned = [run(first, 1), run(first, 2), run(second, 3)]

    assert [r["learned"] for r in learned] == [True, False, True]
    assert learned[1]["reason"] == "a passing run of this job was learned this interval"
    for agent in ("first", "second"):
        key = names.key_passing_sample(names.agent_job(agent, job))
        assert 0 < redis_client.ttl(key) <= 3600  # the worker's, with its TTL
    assert not redis_client.exists(names.key_passing_sample(job))  # nothing fleet-wide
