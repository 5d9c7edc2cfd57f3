"""Whose failure it is, end to end: `theow-client run` under GitHub Actions' variables, a real
worker recording every run in the ledger, and each failure's origin in its verdict, revised as
later runs arrive (main breaking the same way, a retry passing), kept beside the first one.

One fleet for the module; each test has a repository of its own, so no history is shared.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.conftest import wait_until
from tests.integration.conftest import FIXTURES, Fleet, fleet_environment, running_fleet
from theow_client.cli import main

pytestmark = pytest.mark.integration

MAIN_A, MAIN_B, HEAD = "a1" * 20, "b2" * 20, "c3" * 20
REPOS = ("acme/shop", "acme/feed", "acme/api")
CI = ("GITLAB_CI", "BUILDKITE", "JENKINS_URL", "GITHUB_HEAD_REF", "GITHUB_STEP_SUMMARY",
      "THEOW_CI_OUTPUT", "THEOW_CONSOLE_URL", *(f"THEOW_RUN_{n}" for n in
      ("REPO", "BRANCH", "SHA", "PR", "BASE_SHA", "ATTEMPT", "ID")))  # fmt: skip
BROKEN = (
    "echo 'collected 12 items'; "
    "echo 'FAILED tests/test_cart.py::test_total - AssertionError: assert 41 == 42'; "
    "echo '==== 1 failed, 11 passed in 0.31s ===='; exit 1"
)
TIMED_OUT = (
    "echo 'FAILED tests/test_feed.py::test_refresh - TimeoutError: feed did not answer in 5s'; "
    "echo '==== 1 failed, 30 passed in 7.02s ===='; exit 1"
)


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str, milvus_uri: str
) -> Iterator[Fleet]:
    """A resolver that also takes passed runs (the ``passing`` queue), for the whole module."""
    import redis

    from tests.conftest import prepared_database

    base = tmp_path_factory.mktemp("origins")
    broker = redis.Redis.from_url(redis_url)
    broker.flushdb()
    broker.close()
    with pytest.MonkeyPatch.context() as monkeypatch:
        env = fleet_environment(base, redis_url, milvus_uri, prepared_database("sqlite", base))
        with running_fleet(env, monkeypatch) as found:
            # The build agents' token speaks for the repositories (`theow tokens add --repo`):
            # their runs are those repositories' history, not the agent's own.
            monkeypatch.setenv("THEOW_AGENT_TOKEN", repo_token(found, REPOS))
            found.stack.start_worker(["resolve", "passing"], concurrency=1, name="resolver")
            found.wait_for_worker("resolver")
            yield found


def repo_token(fleet: Fleet, repos: tuple[str, ...]) -> str:
    from theow_workers.store.schema import make_engine
    from theow_workers.store.tokens import TokenStore

    engine = make_engine(fleet.settings.store_url)
    try:
        return str(TokenStore(engine).add("ci-acme", "agent", repos=repos))
    finally:
        engine.dispose()


class GitHub:
    """A job of one repository as GitHub Actions runs it: its variables, then `theow-client run`."""

    def __init__(self, repo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.repo, self.tmp_path, self.monkeypatch = repo, tmp_path, monkeypatch
        for name in CI:
            monkeypatch.delenv(name, raising=False)
        monkeypatch.chdir(tmp_path)
        for name, value in {
            "GITHUB_ACTIONS": "true", "GITHUB_REPOSITORY": repo, "GITHUB_WORKFLOW": "CI",
            "GITHUB_JOB": "test", "GITHUB_WORKSPACE": str(tmp_path),
            "THEOW_CLIENT_ENV": str(tmp_path / "no-client.env"),
        }.items():  # fmt: skip
            monkeypatch.setenv(name, value)

    def run(self, script: str, *, sha: str, run_id: int, attempt: int = 1, pr: int | None = None,
            base: str | None = None, options: tuple[str, ...] = ()) -> int:  # fmt: skip
        """Run ``script`` as the job on main at ``sha``, or on pull request ``pr`` (head ``sha``)."""
        event: dict[str, Any] = {"repository": {"full_name": self.repo, "default_branch": "main"}}
        env = {"GITHUB_SHA": sha, "GITHUB_RUN_ID": str(run_id), "GITHUB_RUN_ATTEMPT": str(attempt)}
        if pr is None:
            env.update(GITHUB_REF="refs/heads/main", GITHUB_REF_NAME="main")
            self.monkeypatch.delenv("GITHUB_HEAD_REF", raising=False)
        else:
            event["pull_request"] = {"number": pr, "head": {"sha": sha}, "base": {"sha": base}}
            env.update(GITHUB_REF=f"refs/pull/{pr}/merge", GITHUB_REF_NAME=f"{pr}/merge",
                       GITHUB_HEAD_REF=f"change-{pr}")  # fmt: skip
        path = self.tmp_path / f"event-{run_id}-{attempt}.json"
        path.write_text(json.dumps(event))
        env["GITHUB_EVENT_PATH"] = str(path)
        for name, value in env.items():
            self.monkeypatch.setenv(name, value)
        return main(["run", "--json", "--wait", "--wait-timeout", "60", *options,
                     "--", "sh", "-c", script])  # fmt: skip


def verdict_of(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """The verdict `run --json` printed on stderr."""
    _, err = capsys.readouterr()
    return json.loads(next(line for line in err.splitlines() if line.startswith("{")))


def shown(failure_id: str) -> dict[str, Any]:
    """`theow failures show ID --json`, as an operator would read it."""
    from theow_workers.cli import app

    result = CliRunner().invoke(app, ["failures", "show", failure_id, "--json"])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def recorded(fleet: Fleet, repo: str, count: int) -> list[Any]:
    """The repository's runs once ``count`` of them are in the ledger (passed runs arrive apart)."""
    from theow_workers.store.runs import SqlRuns

    store = fleet.store()
    try:
        runs = SqlRuns(store.engine)
        return wait_until(lambda: (found := runs.listed(repo=repo)) and len(found) >= count
                          and found, what=f"{count} runs of {repo}")  # fmt: skip
    finally:
        store.dispose()


def test_a_pull_requests_failure_is_its_change_until_main_fails_the_same_way(
    fleet, tmp_path, monkeypatch, capsys
):
    job = GitHub("acme/shop", tmp_path, monkeypatch)
    assert job.run("echo 'collected 12 items'; echo '12 passed'", sha=MAIN_A, run_id=1) == 0
    recorded(fleet, "acme/shop", 1)

    # A pull request based on main's newest commit, whose own run has not finished yet.
    assert job.run(BROKEN, sha=HEAD, run_id=2, pr=7, base=MAIN_B) == 1
    change = verdict_of(capsys)
    assert change["origin"]["origin"] == "change"
    assert change["origin"]["culprit"] is None

    # Main's run of that commit fails the same way: main is broken there, not by the change.
    assert job.run(BROKEN, sha=MAIN_B, run_id=3) == 1
    broken = verdict_of(capsys)
    assert broken["origin"]["origin"] == "main"
    assert broken["origin"]["culprit"] == MAIN_B

    revised = wait_until(
        lambda: (found := shown(change["failure_id"])["origin"])["origin"] == "main" and found,
        what="the pull request's failure revised to main",
    )
    assert revised["origin_then"] == "change"  # as it was decided at its verdict, kept
    assert revised["culprit"] == MAIN_B
    assert revised["pr"] == "7" and revised["sha"] == HEAD
    assert f"failure {change['failure_id']}: origin change -> main" in fleet.worker_log()

    from theow_workers.cli import app

    listed = CliRunner().invoke(app, ["failures", "list", "--origin", "main", "--json"])
    assert {row["id"] for row in json.loads(listed.stdout)} == {
        change["failure_id"], broken["failure_id"],
    }  # fmt: skip
    runs = CliRunner().invoke(app, ["runs", "list", "--repo", "acme/shop", "--json"])
    assert [(r["outcome"], r["origin"]) for r in json.loads(runs.stdout)] == [
        ("failed", "main"), ("failed", "main"), ("passed", None),
    ]  # fmt: skip


def test_a_failure_whose_retry_passes_on_the_same_commit_becomes_flaky(
    fleet, tmp_path, monkeypatch, capsys
):
    job = GitHub("acme/feed", tmp_path, monkeypatch)
    assert job.run("echo '31 passed'", sha=MAIN_A, run_id=10) == 0
    recorded(fleet, "acme/feed", 1)

    assert job.run(TIMED_OUT, sha=MAIN_B, run_id=11) == 1
    first = verdict_of(capsys)
    # Nothing later known yet: a named test failing on main for the first time is taken as
    # flaky until a retry or the next commit fails it too (docs/history.md).
    assert first["origin"]["origin"] == "flaky"

    # "Re-run failed jobs": the same workflow run, attempt 2, on the same commit, passes.
    assert job.run("echo '31 passed'", sha=MAIN_B, run_id=11, attempt=2) == 0
    revised = wait_until(
        lambda: (
            "passed on the same commit" in (found := shown(first["failure_id"])["origin"])["reason"]
            and found
        ),
        what="the failure revised: flaky, for its passing retry",
    )
    assert revised["origin"] == "flaky"
    assert revised["origin_then"] == "flaky"
    assert revised["culprit"] is None
    assert "passed on the same commit" in revised["reason"]


def test_a_failure_that_passes_on_the_clients_own_retry_becomes_flaky(
    fleet, tmp_path, monkeypatch, capsys
):
    job = GitHub("acme/api", tmp_path, monkeypatch)
    # Fails for a missing file; the rule's client-side fix makes it, and the re-run passes.
    missing = "test -f app.cfg || { echo 'missing file app.cfg' >&2; exit 2; }; echo '8 passed'"
    retried = ("--retries", "1", "--retry-delay", "0", "--actions-dir", str(FIXTURES / "actions"))
    assert job.run(missing, sha=MAIN_A, run_id=20, options=retried) == 0
    failed = verdict_of(capsys)
    assert failed["rule"] == "tf_client_fix"

    revised = wait_until(
        lambda: (
            (found := shown(failed["failure_id"])["origin"])["origin"] == "flaky"
            and "passed on the same commit" in found["reason"]
            and found
        ),
        what="the failure revised: flaky, for the client's passing re-run",
    )
    assert "(attempt 2)" in revised["reason"]

    from theow_workers.cli import app

    listed = CliRunner().invoke(app, ["runs", "list", "--repo", "acme/api", "--json"])
    runs = json.loads(listed.stdout)
    assert sorted((r["attempt"], r["outcome"], r["origin"]) for r in runs) == [
        (1, "failed", "flaky"), (2, "passed", None)
    ]  # fmt: skip
    assert len({r["id"] for r in runs}) == 2  # each attempt a run of its own


def test_a_failure_without_where_it_ran_has_no_origin(fleet, tmp_path, monkeypatch, capsys):
    for name in (*CI, "GITHUB_ACTIONS", "GITHUB_REPOSITORY", "GITHUB_SHA", "GITHUB_REF"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("THEOW_CLIENT_ENV", str(tmp_path / "no-client.env"))

    assert main(["run", "--json", "--wait", "--wait-timeout", "60", "--fact", "job=local",
                 "--", "sh", "-c", BROKEN]) == 1  # fmt: skip
    verdict = verdict_of(capsys)
    assert "origin" not in verdict
    assert shown(verdict["failure_id"])["origin"] is None
