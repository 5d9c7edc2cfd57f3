"""Whose failure it is with no client at all: GitHub's workflow_job deliveries alone (a webhook
and a token to read logs) give every failed job its origin, revised as later jobs arrive.

One fleet and one fake GitHub for the module.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

from tests.conftest import wait_until
from tests.fakes.forge_server import FakeForge
from tests.integration.conftest import Fleet, fleet_environment, running_fleet
from theow_workers.config import Settings
from theow_workers.web.app import create_app

pytestmark = pytest.mark.integration

SECRET, TOKEN = "hook-secret-for-tests", "forge-api-token"
MAIN_A, MAIN_B, HEAD = "a1" * 20, "b2" * 20, "c3" * 20
BROKEN = "Run make test\nsrc/cart.c:41:7: error: 'total' undeclared\nError: Process completed with exit code 2."


@pytest.fixture(scope="module")
def hooked(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, milvus_uri: str
) -> Iterator[tuple[Fleet, FakeForge]]:
    import redis

    from tests.conftest import prepared_database

    base = tmp_path_factory.mktemp("origins-hooks")
    broker = redis.Redis.from_url(redis_url)
    broker.flushdb()
    broker.close()
    with pytest.MonkeyPatch.context() as monkeypatch, FakeForge(token=TOKEN) as forge:
        env = fleet_environment(base, redis_url, milvus_uri, prepared_database("sqlite", base))
        env.update(THEOW_GITHUB_WEBHOOK_SECRET=SECRET, THEOW_GITHUB_TOKEN=TOKEN,
                   THEOW_GITHUB_API_URL=forge.url,
                   THEOW_WEB_PASSWORD="a-long-console-password-1")  # fmt: skip
        with running_fleet(env, monkeypatch) as fleet:
            fleet.start_worker()
            yield fleet, forge


def deliver(http: TestClient, job_id: int, sha: str, branch: str, conclusion: str,
            attempt: int = 1) -> None:  # fmt: skip
    body = json.dumps({
        "action": "completed",
        "repository": {"full_name": "acme/app", "default_branch": "main"},
        "workflow_job": {
            "id": job_id, "run_id": 9000 + job_id, "run_attempt": attempt, "name": "build",
            "head_branch": branch, "workflow_name": "CI", "conclusion": conclusion,
            "head_sha": sha, "html_url": f"https://github.com/acme/app/actions/jobs/{job_id}",
        },
    }).encode()  # fmt: skip
    digest = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {"X-Hub-Signature-256": f"sha256={digest}", "X-GitHub-Event": "workflow_job",
               "X-GitHub-Delivery": f"d-{job_id}-{attempt}", "Content-Type": "application/json"}  # fmt: skip
    assert http.post("/hooks/github", content=body, headers=headers).status_code == 202


def theow(*args: str) -> Any:
    from theow_workers.cli import app

    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def runs(count: int) -> list[dict[str, Any]]:
    return list(wait_until(lambda: len(found := theow("runs", "list")) >= count and found,
                           what=f"{count} runs in the ledger"))  # fmt: skip


def test_workflow_job_deliveries_alone_give_each_failed_job_its_origin(hooked):
    _, forge = hooked
    forge.logs["901"] = forge.logs["904"] = "Run make test\nall 40 tests passed"
    forge.logs["902"] = (
        "Run make test\nsrc/feed.c:9:3: error: expected ';' before 'return'\nError: Process completed with exit code 2."
    )
    forge.logs["903"] = BROKEN
    with TestClient(create_app(Settings.load()), base_url="http://127.0.0.1") as http:
        deliver(http, 901, MAIN_A, "main", "success")
        runs(1)
        deliver(http, 902, HEAD, "fix-feed", "failure")  # a branch of someone's change
        [change] = [r for r in runs(2) if r["outcome"] == "failed"]
        assert (change["repo"], change["origin"], change["origin_then"]) == (
            "acme/app",
            "change",
            "change",
        )

        deliver(http, 903, MAIN_B, "main", "failure")  # main breaks
        broken = next(r for r in runs(3) if r["sha"] == MAIN_B)
        assert (broken["origin"], broken["culprit"]) == ("main", MAIN_B)
        shown = theow("failures", "show", broken["failure_id"])["origin"]
        assert (shown["origin"], shown["culprit"], shown["branch"]) == ("main", MAIN_B, "main")

        # Re-run: the same job, attempt 2, passes on the same commit: it was flaky.
        deliver(http, 903, MAIN_B, "main", "success", attempt=2)
        revised = wait_until(
            lambda: (o := theow("failures", "show", broken["failure_id"])["origin"])["origin"]
            == "flaky" and o, what="main's failure revised to flaky",
        )  # fmt: skip
    assert revised["origin_then"] == "main"
    assert [r["id"] for r in theow("failures", "list", "--origin", "flaky")] == [
        broken["failure_id"]
    ]
