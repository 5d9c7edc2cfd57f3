"""One job run reported twice, by GitHub's `workflow_job` webhook and by `theow-client run` in the
job, is one run of the ledger: counted once, its first failure kept, the client's pull request
and start kept, whichever report came first. A retry is a run of its own.

A real worker, the real client under GitHub Actions' variables, the real web app taking the
webhook, and a fake GitHub serving the jobs' logs; one fleet for the module.
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
from tests.integration.test_origins_run import BROKEN, TIMED_OUT, GitHub, repo_token, verdict_of
from theow_workers.config import Settings
from theow_workers.web.app import create_app

pytestmark = pytest.mark.integration

SECRET, TOKEN = "hook-secret-for-tests", "forge-api-token"
MAIN_A, HEAD, NEXT = "a1" * 20, "c3" * 20, "d4" * 20
PASSING = "echo 'collected 12 items'; echo '12 passed'"


@pytest.fixture(scope="module")
def both(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, milvus_uri: str
) -> Iterator[tuple[Fleet, FakeForge]]:
    """A worker taking failures and runs, a GitHub webhook, and agents that speak for acme/shop."""
    import redis

    from tests.conftest import prepared_database

    base = tmp_path_factory.mktemp("runs-merged")
    broker = redis.Redis.from_url(redis_url)
    broker.flushdb()
    broker.close()
    with pytest.MonkeyPatch.context() as monkeypatch, FakeForge(token=TOKEN) as forge:
        env = fleet_environment(base, redis_url, milvus_uri, prepared_database("sqlite", base))
        env.update(THEOW_GITHUB_WEBHOOK_SECRET=SECRET, THEOW_GITHUB_TOKEN=TOKEN,
                   THEOW_GITHUB_API_URL=forge.url,
                   THEOW_WEB_PASSWORD="a-long-console-password-1")  # fmt: skip
        with running_fleet(env, monkeypatch) as fleet:
            monkeypatch.setenv("THEOW_AGENT_TOKEN", repo_token(fleet, ("acme/shop",)))
            fleet.stack.start_worker(["resolve", "passing"], concurrency=1, name="resolver")
            fleet.wait_for_worker("resolver")
            yield fleet, forge


def deliver(fleet: Fleet, forge: FakeForge, *, run_id: int, sha: str, branch: str,
            conclusion: str, log: str, attempt: int = 1) -> None:  # fmt: skip
    """GitHub's `workflow_job` delivery of job `test` of workflow `CI` in run ``run_id``, as
    the client in it names the same job (GITHUB_WORKFLOW, GITHUB_JOB); waits until handled."""
    job_id = run_id * 10 + attempt
    forge.logs[str(job_id)] = log
    body = json.dumps({
        "action": "completed",
        "repository": {"full_name": "acme/shop", "default_branch": "main"},
        "workflow_job": {
            "id": job_id, "run_id": run_id, "run_attempt": attempt, "name": "test",
            "head_branch": branch, "workflow_name": "CI", "conclusion": conclusion,
            "head_sha": sha, "html_url": f"https://github.com/acme/shop/actions/jobs/{job_id}",
        },
    }).encode()  # fmt: skip
    digest = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {"X-Hub-Signature-256": f"sha256={digest}", "X-GitHub-Event": "workflow_job",
               "X-GitHub-Delivery": f"d-{job_id}", "Content-Type": "application/json"}  # fmt: skip
    handled = fleet.worker_log().count("Task theow.hook[")
    with TestClient(create_app(Settings.load()), base_url="http://127.0.0.1") as http:
        assert http.post("/hooks/github", content=body, headers=headers).status_code == 202
    # Celery's two lines for the task: received, then succeeded.
    wait_until(lambda: fleet.worker_log().count("Task theow.hook[") >= handled + 2,
               what="the webhook's job handled")  # fmt: skip


def theow(*args: str) -> Any:
    from theow_workers.cli import app

    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def runs() -> list[dict[str, Any]]:
    return list(theow("runs", "list", "--repo", "acme/shop"))


def test_a_job_reported_by_the_webhook_and_the_client_is_one_run(
    both, tmp_path, monkeypatch, capsys
):
    fleet, forge = both
    job = GitHub("acme/shop", tmp_path, monkeypatch)

    # Main passes: the client says so at the step's end, the webhook at the job's.
    assert job.run(PASSING, sha=MAIN_A, run_id=1) == 0
    wait_until(lambda: len(runs()) == 1, what="the client's passed run")
    deliver(fleet, forge, run_id=1, sha=MAIN_A, branch="main", conclusion="success",
            log="Run make test\n12 passed")  # fmt: skip
    [passed] = runs()
    assert (passed["outcome"], passed["source"]) == ("passed", "client")

    # A pull request fails: the client's failure first, then the webhook's of the same job.
    assert job.run(BROKEN, sha=HEAD, run_id=2, pr=7, base=MAIN_A) == 1
    ours = verdict_of(capsys)["failure_id"]
    wait_until(lambda: any(r["failure_id"] == ours for r in runs()), what="the failed run")
    deliver(fleet, forge, run_id=2, sha=HEAD, branch="change-7", conclusion="failure",
            log="Run make test\n" + BROKEN.replace("echo ", "").replace("'", ""))  # fmt: skip
    found = runs()
    assert len(found) == 2
    failed = next(r for r in found if r["outcome"] == "failed")
    assert (failed["failure_id"], failed["pr"], failed["source"]) == (ours, "7", "client")
    hooked = [f["id"] for f in theow("failures", "list") if f["id"] != ours]
    assert hooked, "the webhook's job was resolved as a failure of its own"

    # The webhook first this time (its job of a pull request names none), then the client:
    # the pull request's next push times out.
    deliver(fleet, forge, run_id=3, sha=NEXT, branch="change-7", conclusion="failure",
            log="Run make test\n" + TIMED_OUT.replace("echo ", "").replace("'", ""))  # fmt: skip
    [first] = [r for r in runs() if r["sha"] == NEXT]
    assert (first["source"], first["pr"], first["started_at"]) == ("webhook", None, None)
    assert job.run(TIMED_OUT, sha=NEXT, run_id=3, pr=7, base=MAIN_A) == 1
    verdict_of(capsys)
    merged = wait_until(
        lambda: (r := next(r for r in runs() if r["id"] == first["id"]))["pr"] == "7" and r,
        what="the client's report merged into the webhook's run",
    )
    assert len(runs()) == 3
    assert merged["failure_id"] == first["failure_id"]  # the first failure linked stays
    assert (merged["base_sha"], merged["source"]) == (MAIN_A, "webhook")
    assert merged["started_at"] is not None  # the client's start: the job's only one

    # A retry of that job is a run of its own, and its passing makes the failure flaky.
    deliver(fleet, forge, run_id=3, attempt=2, sha=NEXT, branch="change-7",
            conclusion="success", log="Run make test\n31 passed")  # fmt: skip
    assert len(runs()) == 4
    flaky = wait_until(
        lambda: (r := next(r for r in runs() if r["id"] == first["id"]))["origin"] == "flaky"
        and r, what="the failure revised: its retry passed",
    )  # fmt: skip
    assert flaky["culprit"] is None
