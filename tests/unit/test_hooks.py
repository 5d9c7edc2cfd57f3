"""What a webhook delivery says, read at the edge: signatures, the job it names, the comment."""

from __future__ import annotations

import hashlib
import hmac
import re

import pytest

from theow_workers.integrations import feedback
from theow_workers.integrations.hooks import (
    HookedJob,
    NotAJob,
    github_job,
    github_signature_ok,
    gitlab_job,
    gitlab_token_ok,
    repo_allowed,
)

EVENT = {
    "action": "completed",
    "repository": {"full_name": "o/r"},
    "workflow_job": {"id": 7, "run_id": 3, "run_attempt": 2, "name": "test",
                     "workflow_name": "CI", "conclusion": "failure", "head_sha": "abc"},
}  # fmt: skip


def test_only_the_body_signed_with_the_secret_passes():
    body = b'{"action": "completed"}'
    good = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert github_signature_ok("s3cret", body, good)
    assert not github_signature_ok("s3cret", body + b" ", good)
    assert not github_signature_ok("other", body, good)
    assert not github_signature_ok("s3cret", body, None)
    assert not github_signature_ok("s3cret", body, good.replace("sha256=", "sha1="))
    assert not github_signature_ok("", body, good)  # no secret: nothing is ever accepted


def test_gitlab_token_must_match_and_be_set():
    assert gitlab_token_ok("tok", "tok")
    assert not gitlab_token_ok("tok", "tok ")
    assert not gitlab_token_ok("", "")


def test_a_job_key_is_the_same_for_a_redelivery_and_differs_for_a_rerun():
    job = github_job(EVENT)
    assert (job.job, job.key, job.failed) == ("github:o/r/CI/test", "github:o/r:7:2", True)
    rerun = {**EVENT, "workflow_job": {**EVENT["workflow_job"], "run_attempt": 3}}
    assert github_job(rerun).key != job.key


def test_events_theow_does_not_read_are_not_jobs():
    with pytest.raises(NotAJob):
        github_job({**EVENT, "action": "in_progress"})
    cancelled = {**EVENT, "workflow_job": {**EVENT["workflow_job"], "conclusion": "cancelled"}}
    with pytest.raises(NotAJob):
        github_job(cancelled)
    with pytest.raises(NotAJob):
        gitlab_job({"object_kind": "build", "build_status": "running", "build_id": 1})
    with pytest.raises(NotAJob):
        github_job({**EVENT, "workflow_job": {**EVENT["workflow_job"], "id": "7; rm"}})


GITLAB = {
    "object_kind": "build", "build_id": 9, "build_name": "unit", "build_status": "failed",
    "retries_count": 0, "project_id": 42, "sha": "abc",
    "project": {"id": 42, "path_with_namespace": "g/p"},
}  # fmt: skip


def test_ids_and_attempts_are_ascii_numbers_and_gitlab_project_ids_agree():
    assert gitlab_job(GITLAB).project_id == "42"
    assert "²".isdigit()  # what str.isdigit() let through, and int() then refused
    for bad in (
        {"build_id": "9²"}, {"retries_count": "²"}, {"build_id": "1" * 21},
        {"project_id": "4²", "project": {"id": "4²", "path_with_namespace": "g/p"}},
        {"project_id": 43},  # not the project's own id
        {"project": {"path_with_namespace": "g/p"}},  # no id to agree with
    ):  # fmt: skip
        with pytest.raises(NotAJob):
            gitlab_job({**GITLAB, **bad})
    for field, value in (("run_attempt", "²"), ("id", "٣")):
        with pytest.raises(NotAJob):
            github_job({**EVENT, "workflow_job": {**EVENT["workflow_job"], field: value}})


def test_only_a_run_of_the_default_branch_is_marked_so():
    repo = {"full_name": "o/r", "default_branch": "main"}
    ran = {**EVENT["workflow_job"], "head_branch": "main"}
    assert github_job({**EVENT, "repository": repo, "workflow_job": ran}).default_branch
    forked = {**ran, "head_branch": "patch-1"}
    assert not github_job({**EVENT, "repository": repo, "workflow_job": forked}).default_branch
    assert not github_job(EVENT).default_branch  # not said: not learned from
    project = {**GITLAB["project"], "default_branch": "main"}
    assert gitlab_job({**GITLAB, "ref": "main", "project": project}).default_branch
    assert not gitlab_job({**GITLAB, "ref": "feature", "project": project}).default_branch
    assert not gitlab_job({**GITLAB, "ref": "main"}).default_branch  # no default_branch
    assert not gitlab_job({**GITLAB, "ref": "main", "tag": True, "project": project}).default_branch
    job = github_job({**EVENT, "repository": repo, "workflow_job": ran})
    assert HookedJob.from_wire(job.to_wire()) == job
    old = {k: v for k, v in job.to_wire().items() if k != "default_branch"}  # queued before
    assert not HookedJob.from_wire(old).default_branch


def test_the_repository_allowlist_is_empty_for_any_and_otherwise_exact():
    assert repo_allowed([], "o/r")
    assert repo_allowed(["x/y", "O/R"], "o/r")
    assert not repo_allowed(["x/y"], "o/r") and not repo_allowed(["o/r"], "o/r2")


def test_a_job_name_in_the_comment_mentions_nobody_and_links_nowhere():
    named = {**EVENT["workflow_job"], "workflow_name": "@acme/admins hi @bob",
             "name": "see https://evil.example/x or WWW.evil.example, mail a@b.example"}  # fmt: skip
    item = feedback.entry(github_job({**EVENT, "workflow_job": named}), {"status": "unexplained"})
    body = feedback.render([item])
    assert not re.search(r"@[\w-]", body), body  # GitHub and GitLab mention @name, @org/team
    assert "://" not in body and not re.search(r"(?i)www\\?\.", body)  # nor autolink
    shown = body.replace(feedback.ZWSP, "").replace("\\", "")
    assert "@acme/admins hi @bob / see https://evil.example/x or WWW.evil.example" in shown


def test_a_log_line_cannot_close_its_fence_or_leak_a_secret():
    line = "```\n# pwned <!-- theow --> token=ghp_" + "b" * 36
    item = feedback.entry(github_job(EVENT), {"status": "unexplained", "evidence": {"text": line}})
    body = feedback.render([item])
    assert "ghp_" + "b" * 36 not in body
    assert "\n# pwned" not in body  # one line, inside the block
    assert body.count(feedback.MARKER) == 1  # the only marker is Theow's own
    assert "````text" in body  # a fence longer than the line's backticks
    assert "unexplained" in body
