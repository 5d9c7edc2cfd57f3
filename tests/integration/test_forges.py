"""The forge API adapter and the pull-request comment against a fake GitHub/GitLab on
loopback (real HTTP, httpx2) and real Redis: retries, Retry-After, one comment under
concurrency."""

from __future__ import annotations

import threading
import time

import pytest

from tests.fakes.forge_server import FakeForge
from theow_client import names
from theow_workers.adapters.forges import ForgeAPI, ForgeError, ForgeUnavailable, RepoLimiter
from theow_workers.integrations import feedback
from theow_workers.integrations.hooks import github_job, gitlab_job

pytestmark = pytest.mark.integration


def job(job_id: int, name: str = "test"):
    return github_job(
        {
            "action": "completed",
            "repository": {"full_name": "acme/app"},
            "workflow_job": {"id": job_id, "run_attempt": 1, "name": name, "workflow_name": "CI",
                             "conclusion": "failure", "head_sha": "feed01"},
        }
    )  # fmt: skip


def api(fake: FakeForge, redis, forge: str = "github", **kwargs) -> ForgeAPI:
    return ForgeAPI(forge, fake.url, fake.token, RepoLimiter(redis), **kwargs)


def test_a_429_is_waited_out_as_retry_after_asks_and_every_worker_waits(redis_client):
    with FakeForge() as fake:
        fake.logs["1"] = "the log"
        fake.throttle_once = 1.5
        started = time.monotonic()
        first = threading.Thread(target=api(fake, redis_client).job_log, args=(job(1),))
        first.start()
        time.sleep(0.3)  # the first worker has its 429 by now
        # Another worker's call to the same repository waits out the same Retry-After.
        assert api(fake, redis_client).job_log(job(1)) == "the log"
        assert time.monotonic() - started >= 1.4
        first.join(10)


def test_5xx_are_retried_then_given_up_and_4xx_are_not_retried(redis_client):
    with FakeForge() as fake:
        fake.logs["1"] = "x"
        fake.fail_first = 2
        assert api(fake, redis_client, sleep=lambda _: None).job_log(job(1)) == "x"
        fake.fail_first = 10
        with pytest.raises(ForgeUnavailable):
            api(fake, redis_client, sleep=lambda _: None, retries=2).job_log(job(1))
        fake.fail_first = 0
        calls = len(fake.requests)
        with pytest.raises(ForgeError) as missing:
            api(fake, redis_client).job_log(job(404))
        assert missing.value.status == 404 and len(fake.requests) == calls + 1


def test_the_token_never_follows_the_redirect_to_the_log_storage(redis_client):
    with FakeForge() as fake:
        fake.logs["5"] = "stored log"
        wrong = ForgeAPI("github", fake.url, "wrong", RepoLimiter(redis_client))
        with pytest.raises(ForgeError):
            wrong.job_log(job(5))
        assert api(fake, redis_client).job_log(job(5)) == "stored log"


def test_concurrent_failures_of_one_pull_request_make_one_comment(redis_client):
    with FakeForge() as fake:
        fake.pulls["feed01"] = [12]
        fake.delay = 0.05
        verdicts = [{"status": "unexplained", "failure_id": f"f{i}"} for i in range(6)]
        threads = [
            threading.Thread(
                target=feedback.post,
                args=(redis_client, api(fake, redis_client), job(100 + i, f"job{i}"), verdicts[i]),
            )
            for i in range(6)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        [comment] = fake.comments["12"]
        assert all(f"job{i}" in comment["body"] for i in range(6))


def test_a_comment_lost_from_redis_is_found_by_its_marker_not_made_twice(redis_client):
    with FakeForge() as fake:
        fake.pulls["feed01"] = [4]
        gitlab = gitlab_job(
            {"object_kind": "build", "build_id": 9, "build_name": "unit", "build_status": "failed",
             "project_id": 42, "sha": "feed01", "project": {"path_with_namespace": "acme/app"}}
        )  # fmt: skip
        client = api(fake, redis_client, "gitlab")
        feedback.post(redis_client, client, gitlab, {"status": "resolved", "rule": "r1"})
        redis_client.delete(names.key_hook_pr("gitlab", "acme/app", "4"))
        feedback.post(redis_client, client, gitlab, {"status": "resolved", "rule": "r2"})
        [note] = fake.comments["4"]
        assert "r2" in note["body"]


def test_a_comment_someone_deleted_is_made_again(redis_client):
    with FakeForge() as fake:
        fake.pulls["feed01"] = [8]
        client = api(fake, redis_client)
        feedback.post(redis_client, client, job(1, "first"), {"status": "unexplained"})
        fake.comments["8"].clear()
        feedback.post(redis_client, client, job(2, "second"), {"status": "unexplained"})
        [comment] = fake.comments["8"]
        assert "first" in comment["body"] and "second" in comment["body"]


def test_a_forge_refusing_the_comment_leaves_the_verdict_alone(redis_client):
    with FakeForge() as fake:
        fake.pulls["feed01"] = [9]
        refused = ForgeAPI("github", fake.url, "no-such-token", RepoLimiter(redis_client))
        feedback.post_or_log(redis_client, refused, job(1), {"status": "unexplained"})
        assert fake.comments == {}
        fake.fail_first = 100
        unavailable = api(fake, redis_client, sleep=lambda _: None, retries=1)
        with pytest.raises(ForgeUnavailable):  # the task retries it later
            feedback.post_or_log(redis_client, unavailable, job(1), {"status": "unexplained"})
