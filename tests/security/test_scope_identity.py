"""What failures share is shared within what the worker verified, never what a fact claims.

Reproductions on the embedded stack (real resolve and explain workers, a fake
model server on loopback): the explanation cache's scope, and the explorer's
hourly session budget, follow the agent a signature proved and the
repositories its token may speak for (``theow tokens add --repo``).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.conftest import wait_until
from tests.integration.test_explain import explainers, failure_log  # noqa: F401  (a fixture)
from theow_client import names
from theow_client.client import build_payload
from theow_workers.store.tokens import TokenStore

pytestmark = pytest.mark.integration

SECRET_REPO = "acme/secret-repo"


def quoting(model: str, body: dict[str, Any], wire: Any) -> dict[str, Any]:
    """The fake model: its answer quotes the request its prompt's error line names."""
    (prompt,) = wire.user_texts(body)
    said = re.search(r"the frobnicator (\w+) refused request (\d+)", prompt)
    assert said is not None, prompt[-800:]
    answer = {
        "explanation": f"The frobnicator {said.group(1)} refused request {said.group(2)}.",
        "cause": "infrastructure",
        "next_step": "Look at that request.",
    }
    return wire.text(json.dumps(answer))


def agent_with_repos(fleet: Any, name: str, repos: list[str]) -> Any:
    """A client of agent ``name``, whose token may speak for ``repos``."""
    store = TokenStore.at(fleet.settings.store_url)
    try:
        token = str(store.add(name, "agent", repos))
    finally:
        store.close()
    return fleet.client(token=token)


def explained(stack: Any, client: Any, run: int, repo: str = SECRET_REPO) -> dict[str, Any]:
    """Agent ``client``'s failure claiming ``repo``: resolved by a worker, then its explanation."""
    log = failure_log("kilo", run)
    verdict = client.submit({"log": log, "repo": repo}).wait(60)
    store = stack.fleet.store()

    def shown() -> dict[str, Any] | None:
        found = store.verdict(verdict.failure_id).explanation
        return found if found and found.get("state") != "pending" else None

    return {"said": log, **wait_until(shown, 120, "the explanation")}


def request_of(log: str) -> str:
    found = re.search(r"refused request (\d+)", log)
    assert found is not None
    return found.group(1)


@pytest.fixture
def stack(explainers):  # noqa: F811  (the fixture imported above)
    explainers.fake.brain = lambda model, body: quoting(model, body, explainers.wire)
    explainers.fleet.start_worker()
    explainers.start_workers(concurrency=1)
    return explainers


def test_an_agent_naming_another_s_repository_gets_no_explanation_of_its_failures(stack):
    first, second = stack.fleet.agent("ci-a"), stack.fleet.agent("ci-b")

    theirs = explained(stack, first, 1)
    mine = explained(stack, second, 2)  # the same cause, claiming the same repository

    assert request_of(theirs["said"]) in theirs["text"]
    assert request_of(theirs["said"]) not in mine["text"]  # nothing of the first agent's
    assert request_of(mine["said"]) in mine["text"]
    assert len(stack.fake.requests) == 2  # a cause seen in two scopes is asked twice


def test_agents_whose_tokens_list_a_repository_share_its_explanations_and_no_one_else(stack):
    first = agent_with_repos(stack.fleet, "ci-c", [SECRET_REPO])
    second = agent_with_repos(stack.fleet, "ci-d", ["Acme/Secret-Repo", "acme/other"])
    outsider = agent_with_repos(stack.fleet, "ci-e", ["acme/other"])

    asked = explained(stack, first, 1)
    shared = explained(stack, second, 2)
    own = explained(stack, outsider, 3)

    assert shared["text"] == asked["text"]  # one scope, the repository: paid once
    assert request_of(asked["said"]) not in own["text"]
    assert len(stack.fake.requests) == 2


def test_an_agent_s_session_budget_is_its_own_whatever_session_id_it_sends(
    fleet, explorers, monkeypatch
):
    """A fresh ``session_id`` per submission was a fresh hourly budget: now it is ignored."""
    from sqlalchemy import select

    from theow_workers.store.schema import ExplorationRow

    monkeypatch.setenv("THEOW_SESSION_LIMIT", "1")
    fake, start = explorers
    fake.brain = lambda model, body: fake.wire.text("No idea.\nDONE")
    start(1)
    attacker = fleet.agent("ci-f")

    for n in range(3):  # three causes, three session ids of its choosing
        facts = {"stderr": f"the gizmo {'xyz'[n]} fell over"}
        payload = build_payload(facts, agent=attacker.agent, explore=True)
        signed = attacker.signed(names.TASK_RESOLVE, {**payload, "session_id": f"fresh-{n}"})
        sent = attacker.app.send_task(names.TASK_RESOLVE, args=[signed], queue=names.QUEUE_RESOLVE)
        assert sent.get(timeout=60)["status"] == "exploring"

    def explored() -> list[ExplorationRow] | None:
        with fleet.store().session() as s:
            rows = list(s.execute(select(ExplorationRow)).scalars())
        return rows if len(rows) == 3 else None

    rows = wait_until(explored, 120, "three explorations")
    limited = [r for r in rows if r.outcome == "session_limit"]
    assert len(limited) == 2, [(r.outcome, r.reason) for r in rows]
    assert all("session limit of 1 reached for hour:ci-f:" in r.reason for r in limited)
    assert len(fake.requests) >= 1 and {r.session_id for r in rows} == {
        rows[0].session_id
    }  # one budget: the agent's own hour


def test_the_explorer_reads_the_normal_its_failure_s_agent_taught(fleet, explorers, redis_client):
    """The job normal is the verified agent's own, for the explorer as for the resolver."""
    from theow_client.passing import report_passing
    from theow_workers.adapters.normals import RedisNormals

    fake, start = explorers
    prompts: list[str] = []

    def brain(model: str, body: dict[str, Any]) -> Any:
        prompts.extend(fake.wire.user_texts(body))
        return fake.wire.text("No idea.\nDONE")

    fake.brain = brain
    start(1)
    fleet.stack.start_worker(["passing"], concurrency=1, name="passing")
    fleet.wait_for_worker("passing")
    agent, job = fleet.agent("ci-n"), "github:acme/app/CI/test"
    assert report_passing(agent, {"stderr": "fetching mirror 3\nall good"}, job=job)
    normals = RedisNormals(redis_client, ttl=3600)
    wait_until(lambda: normals.runs(names.agent_job("ci-n", job)), 60, "the passing run learned")

    facts = {"stderr": "fetching mirror 3\nthe gizmo fell over", "job": job}
    assert agent.submit(facts, explore=True).wait(60).status == "exploring"
    wait_until(lambda: prompts, 120, "the explorer's prompt")

    assert "lines this job's recent passing runs print are left out" in prompts[0]
