"""An agent's runs for the ledger are bounded and its own: past `THEOW_RUNS_PER_MINUTE` a run is
refused with the reason and counted, over the broker and over the HTTP intake alike; a run lands
under the agent its token names, whatever the message says, and in a repository's history only
when the token may speak for that repository.

Real workers on the embedded stack, the Celery wire format as a build's code can use it, and the
web app's intake on that stack.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from pydantic import SecretStr
from starlette.testclient import TestClient

from tests.conftest import wait_until
from theow_client import config, names, signing
from theow_client.ci_run import CiRun
from theow_client.ledger import run_payload
from theow_workers.store.runs import SqlRuns
from theow_workers.store.schema import make_engine
from theow_workers.store.tokens import TokenStore

pytestmark = pytest.mark.integration

RATE = 3  # runs a minute, and so at most 3 at once
SHA = "a1" * 20


def token(fleet: Any, name: str, repos: tuple[str, ...] = ()) -> str:
    engine = make_engine(fleet.settings.store_url)
    try:
        return str(TokenStore(engine).add(name, "agent", repos=repos))
    finally:
        engine.dispose()


def run(n: int, repo: str = "acme/app") -> dict[str, Any]:
    where = CiRun(id=f"run-{n}", repo=repo, branch="main", sha=SHA, provider="github")
    return run_payload(where, job="github:acme/app/CI/test", started_at=None,
                       finished_at=time.time())  # fmt: skip


def send(fleet: Any, payload: dict[str, Any], agent_token: str | None = None) -> dict[str, Any]:
    """A `theow.run` message on the passing queue, signed with ``agent_token`` (as sent)."""
    if agent_token is not None:
        own = signing.AgentToken.parse(agent_token)
        payload = signing.sign(names.TASK_RUN, payload, own.name, own.signing_key)
    app = config.celery_app(fleet.settings.redis_url, timeout=5)
    try:
        return dict(app.send_task(names.TASK_RUN, args=[payload], queue=names.QUEUE_PASSING)
                    .get(timeout=60))  # fmt: skip
    finally:
        app.close()


def ledger(fleet: Any) -> list[Any]:
    engine = make_engine(fleet.settings.store_url)
    try:
        return SqlRuns(engine).listed()
    finally:
        engine.dispose()


def refused(redis_client: Any, reason: str | None = None) -> int:
    field = names.TASK_RUN if reason is None else f"{names.TASK_RUN} {reason}"
    return int(redis_client.hget(names.KEY_REFUSED, field) or 0)


@pytest.fixture
def bounded(fleet: Any, redis_client: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The fleet with a worker taking runs (the passing queue) at ``RATE`` runs a minute; the
    broker emptied before it starts."""
    monkeypatch.setenv("THEOW_RUNS_PER_MINUTE", str(RATE))
    fleet.stack.start_worker(["resolve", "passing"], concurrency=1, name="resolver")
    fleet.wait_for_worker("resolver")
    return fleet


def test_an_agent_past_its_run_rate_is_refused_with_the_reason_and_counted(bounded, redis_client):
    flood, quiet = token(bounded, "flood", ("acme/app",)), token(bounded, "quiet", ("acme/app",))

    answers = [send(bounded, run(n), flood) for n in range(RATE + 2)]

    assert [a["recorded"] for a in answers] == [True] * RATE + [False, False]
    assert all(
        a["reason"].startswith(f"refused: agent 'flood' reported more than {RATE} runs a minute "
                               "(THEOW_RUNS_PER_MINUTE); this run is not recorded")
        for a in answers[RATE:]
    )  # fmt: skip
    assert refused(redis_client, "rate_limited") == 2
    assert refused(redis_client) == 0  # none taken for an unverified sender
    # Another agent has a bucket of its own.
    assert send(bounded, run(100), quiet)["recorded"] is True
    assert sorted((e.agent, e.run.id) for e in ledger(bounded)) == [
        *(("flood", f"run-{n}") for n in range(RATE)), ("quiet", "run-100"),
    ]  # fmt: skip


def test_a_run_is_the_signing_agents_own_and_in_its_repositories_only(bounded, redis_client):
    ours = token(bounded, "ci-app", ("acme/app",))
    # The body names another agent and another repository's run: neither is believed.
    claimed = {**run(1), "agent": "ci-other", "via": "intake"}
    assert send(bounded, claimed, ours)["recorded"] is True
    assert send(bounded, run(2, repo="acme/billing"), ours)["recorded"] is True

    # A signature moved to another agent's name no longer verifies; an unsigned run is refused.
    signed = signing.sign(
        names.TASK_RUN, run(3), "ci-app", signing.AgentToken.parse(ours).signing_key
    )
    forged = {**signed, signing.AUTH: {**signed[signing.AUTH], "name": "ci-other"}}
    token(bounded, "ci-other", ("acme/app",))
    assert "bad signature for token 'ci-other'" in send(bounded, forged)["reason"]
    assert "unsigned" in send(bounded, run(4))["reason"]
    assert refused(redis_client) == 2

    found = {e.run.id: e for e in ledger(bounded)}
    assert sorted(found) == ["run-1", "run-2"]
    assert (found["run-1"].agent, found["run-1"].run.repo) == ("ci-app", "acme/app")
    # A repository its token does not speak for is the agent's own history, apart.
    assert (found["run-2"].agent, found["run-2"].run.repo) == ("ci-app", "ci-app@acme/billing")


def test_the_intake_refuses_runs_past_the_agents_rate_with_429_and_counts_them(
    bounded, redis_client
):
    from theow_workers.config import Settings
    from theow_workers.web.app import create_app

    http_token = token(bounded, "ci-http", ("acme/app",))
    headers = {"Authorization": f"Bearer {http_token}"}
    password = SecretStr("a-long-console-password-1")
    settings = Settings.load().model_copy(update={"web_password": password})
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as http:
        answers = [http.post("/api/v1/runs", json=run(n), headers=headers)
                   for n in range(RATE + 1)]  # fmt: skip

    assert [a.status_code for a in answers] == [202] * RATE + [429]
    error = answers[-1].json()["error"]
    assert error.startswith(f"agent 'ci-http' reported more than {RATE} runs a minute "
                            "(THEOW_RUNS_PER_MINUTE)")  # fmt: skip
    assert int(answers[-1].headers["Retry-After"]) >= 1
    assert refused(redis_client, "rate_limited") == 1
    # The ones taken were queued signed as the agent and recorded by the workers.
    wait_until(lambda: len(ledger(bounded)) == RATE, what=f"{RATE} runs recorded")
    assert {e.agent for e in ledger(bounded)} == {"ci-http"}
