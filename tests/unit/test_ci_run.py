"""Given a CI system's variables, I expect the client to know where its run ran; given bad
values, a clear line naming them and no ledger row built on them; outside CI, nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from theow_client.ci_run import RunFact, RunValueError, ci_run

SHA, BASE = "a" * 40, "b" * 40
JOB = "github:o/r/CI/test"


def github_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({
        "pull_request": {"number": 12, "head": {"sha": "c" * 40}, "base": {"sha": BASE}},
        "repository": {"default_branch": "trunk"},
    }))  # fmt: skip
    env = {"GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": "o/r", "GITHUB_SHA": "d" * 40,
           "GITHUB_REF": "refs/pull/12/merge", "GITHUB_REF_NAME": "12/merge",
           "GITHUB_HEAD_REF": "fix-it", "GITHUB_BASE_REF": "trunk", "GITHUB_RUN_ID": "777",
           "GITHUB_RUN_ATTEMPT": "3", "GITHUB_EVENT_PATH": str(event)}  # fmt: skip
    return {**env, **extra}


def test_a_github_pull_request_run_is_its_head_commit_on_its_own_branch_with_its_base(tmp_path):
    where = ci_run(github_env(tmp_path), job=JOB)

    assert where is not None and where.provider == "github"
    assert (where.repo, where.branch, where.pr) == ("o/r", "fix-it", "12")
    assert (where.sha, where.base_sha, where.attempt) == ("c" * 40, BASE, 3)
    assert where.default_branch == "trunk"


def test_every_report_of_one_job_attempt_has_one_id_and_a_retry_another(tmp_path):
    first = ci_run(github_env(tmp_path), job=JOB)
    again = ci_run(github_env(tmp_path), job=JOB)
    retry = ci_run(github_env(tmp_path, GITHUB_RUN_ATTEMPT="4"), job=JOB)
    other_job = ci_run(github_env(tmp_path), job="github:o/r/CI/lint")

    assert first is not None and again is not None and retry is not None and other_job is not None
    assert first.id == again.id
    assert len({first.id, retry.id, other_job.id}) == 3


def test_a_github_push_run_is_on_its_branch_without_a_pull_request(tmp_path):
    env = {"GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": "o/r", "GITHUB_SHA": SHA,
           "GITHUB_REF": "refs/heads/main", "GITHUB_REF_NAME": "main", "GITHUB_RUN_ID": "1",
           "GITHUB_EVENT_PATH": str(tmp_path / "missing.json")}  # fmt: skip
    where = ci_run(env, job=JOB)

    assert where is not None
    assert (where.branch, where.sha, where.pr, where.base_sha, where.attempt) == (
        "main", SHA, None, None, 1,
    )  # fmt: skip


def test_a_gitlab_merge_request_pipeline(tmp_path):
    env = {"GITLAB_CI": "true", "CI_PROJECT_PATH": "grp/sub/proj", "CI_COMMIT_SHA": SHA,
           "CI_COMMIT_REF_NAME": "feature", "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME": "feature",
           "CI_MERGE_REQUEST_IID": "42", "CI_MERGE_REQUEST_DIFF_BASE_SHA": BASE,
           "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main", "CI_DEFAULT_BRANCH": "main",
           "CI_JOB_ID": "99"}  # fmt: skip
    where = ci_run(env, job="gitlab:grp/sub/proj/test")

    assert where is not None and where.provider == "gitlab"
    assert (where.repo, where.branch, where.pr, where.base_sha) == (
        "grp/sub/proj",
        "feature",
        "42",
        BASE,
    )
    assert (where.attempt, where.default_branch) == (1, "main")


def test_a_buildkite_retry_counts_from_one_and_a_false_pull_request_is_none():
    env = {"BUILDKITE": "true", "BUILDKITE_REPO": "git@github.com:acme/api.git",
           "BUILDKITE_COMMIT": SHA, "BUILDKITE_BRANCH": "main", "BUILDKITE_PULL_REQUEST": "false",
           "BUILDKITE_RETRY_COUNT": "2", "BUILDKITE_JOB_ID": "j-1",
           "BUILDKITE_PIPELINE_DEFAULT_BRANCH": "main"}  # fmt: skip
    where = ci_run(env, job="buildkite:api/test")

    assert where is not None
    assert (where.repo, where.branch, where.pr, where.attempt) == ("acme/api", "main", None, 3)


def test_jenkins_multibranch_change_requests_use_the_real_branch_and_change_id():
    env = {"JENKINS_URL": "https://ci/", "GIT_URL": "https://github.com/acme/api.git",
           "GIT_COMMIT": SHA, "BRANCH_NAME": "PR-24", "CHANGE_BRANCH": "fix-it",
           "CHANGE_ID": "24", "CHANGE_TARGET": "main", "BUILD_NUMBER": "153",
           "JOB_NAME": "api/PR-24"}  # fmt: skip
    where = ci_run(env, job="jenkins:api/PR-24")

    assert where is not None
    assert (where.repo, where.branch, where.pr, where.attempt) == ("acme/api", "fix-it", "24", 1)


def test_flags_beat_theow_run_variables_which_beat_the_ci(tmp_path):
    env = github_env(tmp_path, THEOW_RUN_BRANCH="from-variable", THEOW_RUN_ATTEMPT="5")
    where = ci_run(env, job=JOB, flags={"branch": "from-flag", "sha": "E" * 12})

    assert where is not None
    assert (where.branch, where.attempt, where.sha) == ("from-flag", 5, "e" * 12)


def test_outside_ci_there_is_no_run_unless_repo_branch_and_sha_are_given():
    assert ci_run({}, job="nightly") is None
    assert ci_run({"THEOW_RUN_REPO": "o/r", "THEOW_RUN_SHA": SHA}, job="nightly") is None
    where = ci_run({}, job="nightly", flags={"repo": "o/r", "branch": "main", "sha": SHA})
    assert where is not None and where.provider == "manual" and len(where.id) == 32


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        ({"sha": "not-hex"}, "--sha: 'not-hex' is not a commit sha (7 to 64 hex digits)"),
        ({"sha": "abc12"}, "is not a commit sha"),
        ({"attempt": "0"}, "--attempt: '0' is not an attempt from 1 to 1000"),
        ({"attempt": "1001"}, "is not an attempt"),
        ({"pr": "twelve"}, "--pr: 'twelve' is not a pull request number"),
        ({"branch": "x" * 201}, "--branch:"),
        ({"repo": "o/r\nrm -rf"}, "--repo:"),
    ],
)
def test_a_bad_flag_is_a_clear_usage_error(flags, says):
    with pytest.raises(RunValueError, match=None) as raised:
        ci_run({}, job="j", flags={"repo": "o/r", "branch": "b", "sha": SHA, **flags})
    assert says in str(raised.value)


def test_a_bad_ci_value_is_left_out_with_a_warning_never_an_error(tmp_path):
    said: list[str] = []
    where = ci_run(github_env(tmp_path, GITHUB_RUN_ATTEMPT="lots"), job=JOB, warn=said.append)

    assert where is not None and where.attempt == 1
    assert said == ["github's variables (attempt): 'lots' is not an attempt from 1 to 1000; "
                    "left out of the run's record"]  # fmt: skip


def test_an_oversized_or_broken_event_file_is_ignored(tmp_path):
    event = tmp_path / "broken.json"
    event.write_text("[" * 100_000)
    env = github_env(tmp_path, GITHUB_EVENT_PATH=str(event))
    where = ci_run(env, job=JOB)

    assert where is not None and where.base_sha is None and where.sha == "d" * 40


def test_the_workers_check_a_run_fact_as_strictly_and_name_the_field():
    now = 1_800_000_000.0
    good = {"id": "r1", "repo": "o/r", "branch": "main", "sha": SHA, "finished_at": now - 5}
    assert RunFact.from_wire(good, now).where.sha == SHA
    for broken, says in (
        ({**good, "sha": "zz"}, "run.sha"),
        ({**good, "attempt": True}, "run.attempt"),
        ({**good, "finished_at": now + 10 * 86400}, "run.finished_at"),
        ({k: v for k, v in good.items() if k != "repo"}, "run.repo: missing"),
        ({**good, "started_at": now}, "run.started_at: after finished_at"),
    ):
        with pytest.raises(RunValueError, match=says.replace(".", r"\.")):
            RunFact.from_wire(broken, now)
