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


def job(job_id: int, name: str = "test", conclusion: str = "failure", attempt: int = 1,
        sha: str = "feed01"):  # fmt: skip
    return github_job(
        {
            "action": "completed",
            "repository": {"full_name": "acme/app"},
            "workflow_job": {"id": job_id, "run_attempt": attempt, "name": name,
                             "workflow_name": "CI", "conclusion": conclusion, "head_sha": sha,
                             "html_url": f"https://github.com/acme/app/actions/runs/1/job/{job_id}"},
        }
    )  # fmt: skip


def comment_calls(fake: FakeForge) -> list[tuple[str, str]]:
    """The calls that find pull requests or read or write their comments."""
    return [(m, p) for m, p in fake.requests if "/pulls" in p or "comments" in p or "notes" in p
            or "merge_requests" in p]  # fmt: skip


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


def test_the_gitlab_token_never_follows_a_trace_redirected_to_another_origin(redis_client):
    gitlab = gitlab_job(
        {"object_kind": "build", "build_id": 9, "build_name": "unit", "build_status": "failed",
         "project_id": 42, "sha": "feed01", "project": {"id": 42, "path_with_namespace": "acme/app"}}
    )  # fmt: skip
    with FakeForge() as fake, FakeForge() as storage:
        storage.logs["9"] = "stored trace"
        fake.trace_storage = storage.url
        assert api(fake, redis_client, "gitlab").job_log(gitlab) == "stored trace"
        assert fake.tokens_seen == [fake.token]  # the forge had it
        assert storage.tokens_seen == [] and storage.requests == [("GET", "/blob/9")]


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
             "project_id": 42, "sha": "feed01", "project": {"id": 42, "path_with_namespace": "acme/app"}}
        )  # fmt: skip
        client = api(fake, redis_client, "gitlab")
        feedback.post(redis_client, client, gitlab, {"status": "resolved", "rule": "r1"})
        redis_client.delete(names.key_hook_pr("gitlab", "acme/app", "4"))
        feedback.post(redis_client, client, gitlab, {"status": "resolved", "rule": "r2"})
        [note] = fake.comments["4"]
        assert "r2" in note["body"]


def test_a_comment_forging_the_marker_is_never_taken_for_theows_own(redis_client):
    with FakeForge() as fake:
        fake.pulls["feed01"] = [6]
        forged = [
            {"id": 1, "body": f"{feedback.MARKER}\nmine now", **fake.author("mallory", 5)},
            {"id": 2, "body": f"quoting Theow: {feedback.MARKER}", **fake.author()},
        ]
        fake.comments["6"] = list(forged)
        gitlab = gitlab_job(
            {"object_kind": "build", "build_id": 9, "build_name": "unit", "build_status": "failed",
             "project_id": 42, "sha": "feed01", "project": {"id": 42, "path_with_namespace": "acme/app"}}
        )  # fmt: skip
        # Another author's (GitHub: login, GitLab: id), or Theow's not starting with the marker.
        for forge, hooked in (("github", job(1)), ("gitlab", gitlab)):
            assert api(fake, redis_client, forge).find_comment(hooked, "6", feedback.MARKER) is None
        asked = fake.requests.count(("GET", "/user"))
        client = api(fake, redis_client)
        feedback.post(redis_client, client, job(1), {"status": "unexplained"})
        redis_client.delete(names.key_hook_pr("github", "acme/app", "6"))
        feedback.post(redis_client, client, job(2, "lint"), {"status": "unexplained"})
        assert fake.comments["6"][:2] == forged  # left as they were
        [mine] = fake.comments["6"][2:]  # made once, then found again by its author
        assert mine["body"].startswith(feedback.MARKER) and "CI / lint" in mine["body"]
        assert fake.requests.count(("GET", "/user")) == asked + 1  # asked once per client


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


def test_a_failed_job_that_passes_on_a_re_run_is_shown_passing_in_the_same_comment(redis_client):
    with FakeForge() as fake:
        fake.pulls["feed01"] = [12]
        client = api(fake, redis_client)
        feedback.post(redis_client, client, job(1, "test"), {"status": "resolved", "rule": "r1"})
        feedback.post(redis_client, client, job(2, "lint"), {"status": "unexplained"})
        [comment] = fake.comments["12"]
        made = comment["id"]
        assert "~~" not in comment["body"]
        before = len(comment_calls(fake))

        rerun = job(3, "test", conclusion="success", attempt=2)
        assert feedback.mark_passed(redis_client, client, rerun) == ["12"]
        [comment] = fake.comments["12"]
        assert comment["id"] == made  # edited in place
        test_line, lint_line = (
            next(line for line in comment["body"].splitlines() if f"CI / {name}" in line)
            for name in ("test", "lint")
        )
        assert "~~rule `r1` (resolved)~~" in test_line and "passed on attempt 2" in test_line
        assert "job/3" in test_line  # links the passing run
        assert "unexplained" in lint_line and "passed" not in lint_line
        # The same commit's re-run: no pull-request lookup, one edit only.
        assert comment_calls(fake)[before:] == [
            ("PATCH", f"/repos/acme/app/issues/comments/{made}")
        ]

        # A redelivery, or an older attempt's pass, changes nothing and calls nothing.
        calls = len(fake.requests)
        assert feedback.mark_passed(redis_client, client, rerun) == []
        assert feedback.mark_passed(redis_client, client, job(4, "test", "success", 1)) == []
        assert len(fake.requests) == calls

        # Failing again later: listed as failed again, in the same comment.
        feedback.post(redis_client, client, job(5, "test", attempt=3), {"status": "unexplained"})
        [comment] = fake.comments["12"]
        assert comment["id"] == made and "passed on attempt" not in comment["body"]


def test_a_passing_job_no_comment_lists_calls_nothing_and_never_makes_a_comment(redis_client):
    with FakeForge() as fake:
        fake.pulls["feed01"] = [12]
        client = api(fake, redis_client)
        assert feedback.mark_passed(redis_client, client, job(1, "test", "success")) == []
        assert fake.requests == [] and fake.comments == {}

        feedback.post(redis_client, client, job(2, "lint"), {"status": "unexplained"})
        calls = len(fake.requests)
        assert feedback.mark_passed(redis_client, client, job(3, "test", "success", 2)) == []
        assert len(fake.requests) == calls  # another job of the same pull request: nothing

        fake.comments["12"].clear()  # someone deleted Theow's comment
        assert feedback.mark_passed(redis_client, client, job(4, "lint", "success", 2)) == []
        assert fake.comments["12"] == []  # not made again only to say a job passed


def test_a_pass_of_another_commit_counts_only_for_the_pull_requests_it_belongs_to(redis_client):
    with FakeForge() as fake:
        fake.pulls["feed01"] = [12]
        client = api(fake, redis_client)
        feedback.post(redis_client, client, job(1, "test"), {"status": "unexplained"})
        # The main branch's run of the same job passes: not this pull request's.
        assert (
            feedback.mark_passed(redis_client, client, job(2, "test", "success", sha="ma1n")) == []
        )
        assert "passed" not in fake.comments["12"][0]["body"]
        assert ("GET", "/repos/acme/app/commits/ma1n/pulls") in fake.requests
        # A new push to the pull request passes it.
        fake.pulls["beef02"] = [12]
        pushed = job(3, "test", "success", sha="beef02")
        assert feedback.mark_passed(redis_client, client, pushed) == ["12"]
        [comment] = fake.comments["12"]
        assert "passed on attempt 1" in comment["body"]


def test_a_gitlab_job_retried_to_success_is_shown_passing_in_the_same_note(redis_client):
    def gitlab(job_id: int, status: str, retries: int):
        return gitlab_job(
            {"object_kind": "build", "build_id": job_id, "build_name": "unit",
             "build_status": status, "retries_count": retries, "project_id": 42, "sha": "feed01",
             "project": {"id": 42, "path_with_namespace": "acme/app",
                         "web_url": "https://gitlab.example.com/acme/app"}}
        )  # fmt: skip

    with FakeForge() as fake:
        fake.pulls["feed01"] = [4]
        client = api(fake, redis_client, "gitlab")
        feedback.post(redis_client, client, gitlab(9, "failed", 0), {"status": "unexplained"})
        [note] = fake.comments["4"]
        assert feedback.mark_passed(redis_client, client, gitlab(10, "success", 1)) == ["4"]
        assert [c["id"] for c in fake.comments["4"]] == [note["id"]]
        assert "~~unexplained~~ [passed on attempt 2]" in fake.comments["4"][0]["body"]
        assert ("PUT", f"/api/v4/projects/42/merge_requests/4/notes/{note['id']}") in fake.requests
