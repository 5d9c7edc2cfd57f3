"""Webhook intake end to end: a forge's delivery to the web app, a real resolve worker
reading the job's log from a fake GitHub/GitLab API on loopback, one failure, one
verdict, and one pull-request comment kept up to date."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

import pytest
from pydantic import SecretStr
from sqlalchemy import create_engine, func, select
from starlette.testclient import TestClient

from tests.conftest import wait_until
from tests.fakes.forge_server import FakeForge
from theow_workers.config import Settings
from theow_workers.store.schema import FailureRow, VerdictRow
from theow_workers.web.app import create_app

pytestmark = pytest.mark.integration

SECRET = "hook-secret-for-tests"
TOKEN = "forge-api-token"
RULE = """\
name: tf_hook_echo
description: The job printed HOOKSAYS and a word.
mode: track
when:
  - fact: log
    regex: 'HOOKSAYS (?P<word>\\w+)'
    examples: ["HOOKSAYS hello"]
"""
SHA = "abc123def"


def github_event(
    job_id: int, name: str, conclusion: str = "failure", attempt: int = 1, branch: str = "main"
) -> bytes:
    return json.dumps(
        {
            "action": "completed",
            "repository": {"full_name": "acme/app", "default_branch": "main"},
            "workflow_job": {
                "id": job_id, "run_id": 9000, "run_attempt": attempt, "name": name,
                "head_branch": branch,
                "workflow_name": "CI", "conclusion": conclusion, "head_sha": SHA,
                "html_url": f"https://github.com/acme/app/actions/runs/9000/job/{job_id}",
            },
        }
    ).encode()  # fmt: skip


def gitlab_event(job_id: int, name: str, status: str = "failed") -> bytes:
    return json.dumps(
        {
            "object_kind": "build", "build_id": job_id, "build_name": name,
            "build_status": status, "build_allow_failure": False, "retries_count": 0,
            "pipeline_id": 77, "project_id": 42, "sha": SHA, "ref": "main",
            "project": {"id": 42, "path_with_namespace": "acme/app", "default_branch": "main",
                        "web_url": "https://gitlab.example.com/acme/app"},
        }
    ).encode()  # fmt: skip


def signed(body: bytes, secret: str = SECRET) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature-256": f"sha256={digest}", "X-GitHub-Event": "workflow_job",
            "X-GitHub-Delivery": "d-1", "Content-Type": "application/json"}  # fmt: skip


def gitlab_headers(token: str = SECRET) -> dict[str, str]:
    return {"X-Gitlab-Token": token, "X-Gitlab-Event": "Job Hook"}


@pytest.fixture
def forge(fleet, monkeypatch) -> Any:
    (fleet.settings.rule_layers[-1] / "tf_hook_echo.rule.yaml").write_text(RULE)
    with FakeForge(token=TOKEN) as fake:
        for key, value in {
            "THEOW_GITHUB_WEBHOOK_SECRET": SECRET, "THEOW_GITHUB_TOKEN": TOKEN,
            "THEOW_GITHUB_API_URL": fake.url, "THEOW_GITLAB_WEBHOOK_TOKEN": SECRET,
            "THEOW_GITLAB_TOKEN": TOKEN, "THEOW_GITLAB_URL": fake.url,
            "THEOW_PR_COMMENTS": "on", "THEOW_WEB_PASSWORD": "a-long-console-password-1",
        }.items():  # fmt: skip
            monkeypatch.setenv(key, value)
        fleet.start_worker()
        yield fake


def web() -> TestClient:
    return TestClient(create_app(Settings.load()), base_url="http://127.0.0.1")


def rows(fleet) -> list[tuple[str, str | None, str | None]]:
    engine = create_engine(fleet.settings.store_url)
    try:
        with engine.connect() as conn:
            query = select(FailureRow.agent, FailureRow.idempotency_key, VerdictRow.rule).join(
                VerdictRow, VerdictRow.failure_id == FailureRow.id, isouter=True
            )
            return [tuple(r) for r in conn.execute(query)]
    finally:
        engine.dispose()


def failures(fleet) -> int:
    engine = create_engine(fleet.settings.store_url)
    try:
        with engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(FailureRow)).scalar_one())
    finally:
        engine.dispose()


def test_a_github_failed_job_is_resolved_once_and_commented_on_its_pull_request(fleet, forge):
    forge.logs["501"] = "Run tests\nHOOKSAYS broken token=ghp_" + "a" * 36 + "\nexit 1"
    forge.logs["502"] = "Run lint\nnothing theow knows\nexit 2"
    forge.pulls[SHA] = [7]
    forge.fail_first = 1  # the first API call meets a 503: retried
    with web() as http:
        bad = github_event(501, "test")
        refused = http.post("/hooks/github", content=bad, headers=signed(bad, "wrong-secret"))
        assert refused.status_code == 401
        unsigned = {k: v for k, v in signed(bad).items() if k != "X-Hub-Signature-256"}
        assert http.post("/hooks/github", content=bad, headers=unsigned).status_code == 401

        body = github_event(501, "test")
        assert http.post("/hooks/github", content=body, headers=signed(body)).status_code == 202
        # GitHub's redelivery of the same job and attempt, under a new delivery id.
        again = {**signed(body), "X-GitHub-Delivery": "d-2"}
        assert http.post("/hooks/github", content=body, headers=again).status_code == 200

        wait_until(lambda: forge.comments.get("7"), what="the pull request's comment")
        assert rows(fleet) == [("github-hooks", "github:acme/app:501:1", "tf_hook_echo")]
        [comment] = forge.comments["7"]
        assert comment["body"].startswith("<!-- theow -->")
        assert "tf_hook_echo" in comment["body"] and "HOOKSAYS broken" in comment["body"]
        assert "ghp_" + "a" * 36 not in comment["body"]  # masked as the client masks

        second = github_event(502, "lint")
        assert http.post("/hooks/github", content=second, headers=signed(second)).status_code == 202
        wait_until(lambda: "lint" in forge.comments["7"][0]["body"], what="the comment updated")
    [comment] = forge.comments["7"]  # updated in place, not a second comment
    assert "unexplained" in comment["body"] and "tf_hook_echo" in comment["body"]
    assert failures(fleet) == 2
    assert forge.refused == 0


def test_a_bad_signature_stores_nothing_and_an_unset_secret_turns_the_hook_off(fleet, forge):
    forge.logs["601"] = "HOOKSAYS x"
    with web() as http:
        body = github_event(601, "test")
        tampered = body.replace(b"601", b"602")
        assert http.post("/hooks/github", content=tampered, headers=signed(body)).status_code == 401
        ping = {**signed(body), "X-GitHub-Event": "ping"}
        assert http.post("/hooks/github", content=body, headers=ping).status_code == 204
    off = Settings.load().model_copy(update={"github_webhook_secret": SecretStr("")})
    with TestClient(create_app(off), base_url="http://127.0.0.1") as http:
        assert http.post("/hooks/github", content=body, headers=signed(body)).status_code == 404
    assert failures(fleet) == 0
    assert ("GET", "/repos/acme/app/actions/jobs/601/logs") not in forge.requests


def test_a_repository_not_in_the_allowlist_is_answered_204_and_stores_nothing(
    fleet, forge, monkeypatch, redis_client
):
    from theow_client import names

    forge.logs["611"] = forge.logs["811"] = "HOOKSAYS x"
    monkeypatch.setenv("THEOW_HOOK_REPOS", "acme/lib, group/other")
    with web() as http:
        body = github_event(611, "test")
        assert http.post("/hooks/github", content=body, headers=signed(body)).status_code == 204
        note = gitlab_event(811, "unit")
        assert http.post("/hooks/gitlab", content=note, headers=gitlab_headers()).status_code == 204
        time.sleep(0.5)
    assert failures(fleet) == 0 and forge.requests == []
    assert not redis_client.keys(names.key_hook_seen("*"))
    monkeypatch.setenv("THEOW_HOOK_REPOS", "acme/lib,Acme/App")  # listed: read as before
    with web() as http:
        assert http.post("/hooks/github", content=body, headers=signed(body)).status_code == 202
        wait_until(lambda: failures(fleet) == 1, what="the listed repository's failure")


def test_a_gitlab_failed_job_is_resolved_once_and_noted_on_its_merge_request(fleet, forge):
    forge.logs["801"] = "HOOKSAYS gitlab\nERROR: Job failed: exit code 1"
    forge.logs["802"] = "something else\nERROR: Job failed: exit code 1"
    forge.pulls[SHA] = [3]
    with web() as http:
        body = gitlab_event(801, "unit")
        wrong = gitlab_headers("not-the-token")
        assert http.post("/hooks/gitlab", content=body, headers=wrong).status_code == 401
        assert http.post("/hooks/gitlab", content=body, headers=gitlab_headers()).status_code == 202
        assert http.post("/hooks/gitlab", content=body, headers=gitlab_headers()).status_code == 200
        wait_until(lambda: forge.comments.get("3"), what="the merge request's note")
        assert rows(fleet) == [("gitlab-hooks", "gitlab:acme/app:801:0", "tf_hook_echo")]
        second = gitlab_event(802, "integration")
        assert (
            http.post("/hooks/gitlab", content=second, headers=gitlab_headers()).status_code == 202
        )
        wait_until(lambda: "integration" in forge.comments["3"][0]["body"], what="note updated")
    assert len(forge.comments["3"]) == 1
    assert failures(fleet) == 2


def test_passing_jobs_of_the_default_branch_teach_their_normal_once_per_interval(
    fleet, forge, redis_client
):
    from theow_client import names
    from theow_workers.adapters.normals import RedisNormals

    forge.logs["700"] = "Run tests\nwhat a fork's workflow prints\nall passed"
    forge.logs["701"] = "Run tests\ncurl: (56) Recv failure (retrying on mirror 2)\nall passed"
    forge.logs["702"] = "Run tests\nall passed"
    normals = RedisNormals(redis_client, ttl=3600)
    own_job = names.agent_job("github-hooks", "github:acme/app/CI/test")
    with web() as http:
        fork = github_event(700, "test", conclusion="success", branch="fork-feature")
        assert http.post("/hooks/github", content=fork, headers=signed(fork)).status_code == 202
        wait_until(lambda: redis_client.llen(names.QUEUE_RESOLVE) == 0, what="the fork's run")
        time.sleep(0.5)
        for job_id in (701, 702):  # two runs within the interval: the second is not read
            body = github_event(job_id, "test", conclusion="success")
            assert http.post("/hooks/github", content=body, headers=signed(body)).status_code == 202
        wait_until(lambda: normals.runs(own_job) >= 1, what="the passing run learned")
        wait_until(lambda: redis_client.llen(names.QUEUE_RESOLVE) == 0, what="the queue drained")
        time.sleep(0.5)
    assert normals.runs(own_job) == 1
    assert ("GET", "/repos/acme/app/actions/jobs/700/logs") not in forge.requests  # not read
    assert ("GET", "/repos/acme/app/actions/jobs/701/logs") in forge.requests  # learned
    assert ("GET", "/repos/acme/app/actions/jobs/702/logs") not in forge.requests
    assert failures(fleet) == 0


def test_a_failed_job_passing_on_a_re_run_is_shown_passing_in_the_same_comment(
    fleet, forge, redis_client
):
    from theow_client import names
    from theow_workers.adapters.normals import RedisNormals

    forge.logs["521"] = "Run tests\nHOOKSAYS flaky\nexit 1"
    forge.logs["522"] = "Run tests\nall passed"
    forge.logs["531"] = "Run build\nall built"
    forge.pulls[SHA] = [7]
    normals = RedisNormals(redis_client, ttl=3600)
    own_job = names.agent_job("github-hooks", "github:acme/app/CI/test")
    # A passing run of this job was learned this interval: the re-run is not learned,
    # and the comment is updated all the same.
    redis_client.set(names.key_passing_sample(own_job), "1", ex=3600)
    with web() as http:
        body = github_event(521, "test")
        assert http.post("/hooks/github", content=body, headers=signed(body)).status_code == 202
        wait_until(lambda: forge.comments.get("7"), what="the pull request's comment")
        [failed] = forge.comments["7"]
        made = failed["id"]
        assert "tf_hook_echo" in failed["body"] and "passed" not in failed["body"]

        rerun = github_event(522, "test", conclusion="success", attempt=2)
        assert http.post("/hooks/github", content=rerun, headers=signed(rerun)).status_code == 202
        # The re-run's pass is said twice: the job struck through, and its failure's origin
        # revised to flaky (a pass on the same commit); both before the other job is sent.
        wait_until(lambda: "passed on attempt 2" in (body := forge.comments["7"][0]["body"])
                   and "Flaky: retry them" in body,
                   what="the comment showing the re-run passed, and the failure flaky")  # fmt: skip
        [comment] = forge.comments["7"]
        assert comment["id"] == made
        assert "~~rule `tf_hook_echo` (" in comment["body"]
        assert "HOOKSAYS flaky" not in comment["body"]  # no line to look at any more

        calls = len(forge.requests)
        other = github_event(531, "build", conclusion="success")  # listed by no comment
        assert http.post("/hooks/github", content=other, headers=signed(other)).status_code == 202
        build = names.agent_job("github-hooks", "github:acme/app/CI/build")
        wait_until(lambda: normals.runs(build) >= 1, what="the passing build learned")
    assert forge.requests[calls:] == [
        ("GET", "/repos/acme/app/actions/jobs/531/logs"),
        ("GET", "/blob/531"),
    ]  # its log only: no pull-request lookup, no comment call
    assert len(forge.comments["7"]) == 1
    assert normals.runs(own_job) == 0  # the sampling said no; the comment did not wait on it
    assert failures(fleet) == 1


def test_an_unreachable_broker_answers_503_so_the_forge_redelivers(tmp_path):
    from tests.conftest import free_port

    settings = Settings.load(
        env={
            "THEOW_HOME": str(tmp_path),
            "THEOW_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",  # nothing listens
            "THEOW_GITHUB_WEBHOOK_SECRET": SECRET,
            "THEOW_WEB_PASSWORD": "a-long-console-password-1",
        },
        path=tmp_path / "none.yaml",
    )
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as http:
        body = github_event(901, "test")
        answer = http.post("/hooks/github", content=body, headers=signed(body))
        assert answer.status_code == 503 and answer.headers["retry-after"]
        huge = b"{" + b" " * (2 * 1024 * 1024) + b"}"
        assert http.post("/hooks/github", content=huge, headers=signed(huge)).status_code == 413
