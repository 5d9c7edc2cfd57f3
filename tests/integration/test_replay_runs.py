"""`theow replay` of a history of runs (`theow history eval`'s rows): its passed runs go to the
ledger, its failed runs are replayed as failures that carry where they ran, and each replayed
failure gets its origin from the history, in the order its runs finished, whatever the order of
the file. Real CLI, real resolver and replay workers, real SQL.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.integration.conftest_replay import *  # noqa: F403
from tests.integration.conftest_replay import ReplayFleet

pytestmark = pytest.mark.integration

T = 1_790_000_000.0  # 2026-09-21: the history's first run
A, B, C, H, K, Z = "a1" * 20, "b2" * 20, "c3" * 20, "d4" * 20, "e5" * 20, "f6" * 20
BROKEN = (
    "collected 12 items\n"
    "FAILED tests/test_cart.py::test_total - AssertionError: assert 41 == 42\n"
    "==== 1 failed, 11 passed in 0.31s ===="
)
TIMED_OUT = (
    "FAILED tests/test_feed.py::test_refresh - TimeoutError: feed did not answer in 5s\n"
    "==== 1 failed, 30 passed in 7.02s ===="
)
OWN = "src/cart.py:12: error: Name 'totl' is not defined  [name-defined]\nFound 1 error in 1 file"


def row(n: int, sha: str, outcome: str, at: float, log: str | None = None, *,
        pr: int | None = None, base: str | None = None, attempt: int = 1,
        repo: str = "acme/shop", main: str = "main") -> dict[str, Any]:  # fmt: skip
    """A history row of ``repo``'s `test` job, ``at`` seconds into the history; ``main``: its
    default branch."""
    found: dict[str, Any] = {"id": f"run-{n}", "repo": repo, "job": "test",
                             "branch": main, "sha": sha, "attempt": attempt,
                             "outcome": outcome, "finished_at": T + at}  # fmt: skip
    if pr is not None:
        found.update(pr=pr, base_sha=base, branch=f"change-{pr}")
    if log is not None:
        found["log"] = log
    return found


def history_of(repo: str, main: str) -> list[dict[str, Any]]:
    """The history of ``repo``, whose default branch is ``main``."""
    at = {"repo": repo, "main": main}
    return [
        row(1, A, "passed", 0, **at),  # main passes
        row(2, H, "failed", 100, BROKEN, pr=7, base=B, **at),  # a pull request on B fails ...
        row(3, B, "failed", 200, BROKEN, **at),  # ... and so does main at B, later, alike
        row(4, C, "failed", 300, BROKEN, **at),  # and at the next commit: broken since B
        row(5, K, "failed", 400, TIMED_OUT, pr=8, base=A, **at),  # a pull request times out
        row(6, K, "passed", 500, pr=8, base=A, attempt=2, **at),  # ... its retry passes: flaky
        row(7, Z, "failed", 600, OWN, pr=9, base=A, **at),  # a pull request's own mistake
    ]


def theow(*args: str) -> Any:
    from theow_workers.cli import app

    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# A repository whose default branch is master: told by the history itself (its pull
# requests are based on master's commits), as `theow history eval` tells it.
@pytest.mark.parametrize(("repo", "main"), [("acme/shop", "main"), ("acme/legacy", "master")])
def test_a_history_of_runs_fills_the_ledger_and_gives_each_failure_its_origin_in_time_order(
    replay_fleet: ReplayFleet, tmp_path, repo, main
):
    rows = history_of(repo, main)
    replay_fleet.start_replay_worker(concurrency=2)
    # Newest first, as an export may be; and one row whose run cannot be right.
    history = replay_fleet.write(
        "runs.jsonl", [*reversed(rows), row(8, "not-a-sha", "passed", 700, repo=repo)]
    )

    done = replay_fleet.cli(str(history), "--json", "--report-dir", str(tmp_path / "reports"))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    summary = report["summary"]
    # Passed runs are no replayed failures: the hit rate is over the 5 failed runs.
    assert (summary["total"], summary["replayed"], summary["passed_runs"]) == (8, 5, 2)
    assert report["runs"]["passed"] == 2
    assert report["runs"]["origins"] == {"main": 3, "flaky": 1, "change": 1}
    assert [(p["line"], p["kind"]) for p in report["input_problems"]] == [(8, "invalid")]
    assert "row.sha: 'not-a-sha' is not a commit sha" in report["input_problems"][0]["problem"]
    assert "origins of 5 replayed failure(s)" in done.stderr

    ledger = {r["id"]: r for r in theow("runs", "list", "--repo", repo)}
    assert sorted(ledger) == [f"run-{n}" for n in range(1, 8)]
    passed = {i: r for i, r in ledger.items() if r["outcome"] == "passed"}
    assert sorted(passed) == ["run-1", "run-6"]
    assert all(r["failure_id"] is None and r["source"] == "replay" for r in passed.values())
    assert (ledger["run-6"]["pr"], ledger["run-6"]["attempt"]) == ("8", 2)

    # The failures, as an operator finds them: by origin, each with its run.
    def ids(origin: str) -> set[str]:
        return {
            f["id"] for f in theow("failures", "list", "--source", "replay", "--origin", origin)
        }

    failure = {i: r["failure_id"] for i, r in ledger.items() if r["outcome"] == "failed"}
    assert ids("main") == {failure["run-2"], failure["run-3"], failure["run-4"]}
    assert ids("flaky") == {failure["run-5"]}
    assert ids("change") == {failure["run-7"]}
    assert ledger["run-2"]["origin_then"] == "change"  # when it failed, main had not yet
    assert ledger["run-2"]["culprit"] == B
    shown = theow("failures", "show", failure["run-2"])
    assert (shown["origin"]["origin"], shown["origin"]["pr"]) == ("main", "7")

    # The same as `theow history eval` reads the same file: the history's own order.
    out = tmp_path / "results.jsonl"
    theow("history", "eval", str(replay_fleet.write("runs-ok.jsonl", rows)), "--out", str(out))
    for result in map(json.loads, out.read_text().splitlines()):
        run = ledger[result["id"]]
        assert (run["origin"], run["origin_then"], run["culprit"]) == (
            result["origin"], result["origin_then"], result["culprit"],
        ), result["id"]  # fmt: skip

    # Replayed again (after a rule change, say): still one run per row, now the newest
    # replay's failures, with the same origins.
    again = replay_fleet.cli(report["job"]["id"], "--again", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["runs"]["origins"] == {"main": 3, "flaky": 1, "change": 1}
    relinked = {r["id"]: r for r in theow("runs", "list", "--repo", repo)}
    assert sorted(relinked) == sorted(ledger)
    assert ids("main") == {relinked[n]["failure_id"] for n in ("run-2", "run-3", "run-4")}
    assert not ids("main") & set(failure.values())
