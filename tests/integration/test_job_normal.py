"""A job's normal end to end: passing runs reported by the client, learned by a
worker into Redis, then a failure of the same job resolved with it."""

from __future__ import annotations

import time

import pytest

from theow_client import Status, names
from theow_client.passing import report_passing
from theow_workers.adapters.normals import RedisNormals

pytestmark = pytest.mark.integration

# Every run of the job prints this: a mirror reset the connection, a fallback copes.
BENIGN = "curl: (56) Recv failure: Connection reset by peer (retrying on mirror 2)"


def passing_log(run: int) -> str:
    return "\n".join(
        [
            f"Run #{run} on agent-{run}.ci.internal started 2026-11-2{run}T10:0{run}:00Z",
            "Fetching sources",
            BENIGN,
            f"compiled 2{run}4 files in {run}.{run}s",
            "all checks passed",
        ]
    )


# The cause (tf_echo) comes before the benign line: nearer the end alone, the
# benign line's retry rule would win.
FAILED_LOG = "\n".join(
    [
        "Run #7 on agent-7.ci.internal started 2026-11-23T10:07:00Z",
        "Fetching sources",
        "ECHO broken",
        BENIGN,
        "compiled 274 files in 7.7s",
        "build failed",
    ]
)


def send_passing_run(client, job: str, log: str, deadline: float) -> None:
    """Report a passing run, waiting out the workers' sampling interval (1 s) first."""
    while not report_passing(client, {"stderr": log}, job=job):
        assert time.monotonic() < deadline, "the sampling interval never let a passing run through"
        time.sleep(0.05)


def learned_runs(normals: RedisNormals, job: str, runs: int, fleet, deadline: float) -> None:
    while normals.runs(job) < runs:
        assert time.monotonic() < deadline, fleet.worker_log("passing")[-3000:]
        time.sleep(0.05)


def test_a_failure_is_explained_by_what_its_passing_runs_do_not_print(
    fleet, redis_client, monkeypatch
):
    monkeypatch.setenv("THEOW_PASSING_INTERVAL", "1")  # the workers' sampling interval
    fleet.start_worker()
    fleet.stack.start_worker(["passing"], name="passing")
    fleet.wait_for_worker("passing")
    client = fleet.client()
    job = "github:acme/app/CI/build"

    deadline = time.monotonic() + 60
    normals = RedisNormals(redis_client, ttl=3600)
    own_job = names.agent_job(client.agent, job)  # what this agent's passing runs teach
    for run in (1, 2, 3):
        send_passing_run(client, job, passing_log(run), deadline)
        learned_runs(normals, own_job, run, fleet, deadline)
    assert redis_client.ttl(names.key_normal(own_job)) > 0  # the normal expires unless renewed

    verdict = client.submit({"stderr": FAILED_LOG, "job": job}).wait(60)
    assert verdict.status is Status.RESOLVED, verdict
    assert verdict.rule == "tf_echo"
    assert verdict.evidence is not None and verdict.evidence["text"] == "ECHO broken"
    assert verdict.evidence["normal"] is False
    assert verdict.seen_in_passing == ("tf_flaky_network",)
    assert "tf_flaky_network" in verdict.also

    # The same failure from a job with no passing runs is handled as before.
    unknown = client.submit({"stderr": FAILED_LOG, "job": "never-passed"}).wait(60)
    assert unknown.status is Status.RETRY
    assert unknown.rule == "tf_flaky_network"
    assert unknown.seen_in_passing == ()
    assert "normal" not in (unknown.evidence or {})


def test_a_worker_learns_one_passing_run_per_job_per_interval_and_then_clients_send_none(
    fleet, redis_client
):
    fleet.stack.start_worker(["passing"], name="passing")
    fleet.wait_for_worker("passing")
    clients = [fleet.client() for _ in range(3)]
    for i in range(40):  # racing the worker: runs sent before it samples are dropped there
        report_passing(clients[i % 3], {"stderr": "ok"}, job=f"job-{i % 4}")
    deadline = time.monotonic() + 60
    while redis_client.llen(names.QUEUE_PASSING) or redis_client.exists("unacked"):
        assert time.monotonic() < deadline, fleet.worker_log("passing")[-3000:]
        time.sleep(0.05)
    normals = RedisNormals(redis_client, ttl=3600)
    own = [names.agent_job(clients[0].agent, f"job-{k}") for k in range(4)]
    learned_runs(normals, own[-1], 1, fleet, deadline)

    assert [normals.runs(job) for job in own] == [1, 1, 1, 1]
    # The sample is the worker's, with its TTL: now the clients send nothing more.
    assert all(0 < redis_client.ttl(names.key_passing_sample(job)) <= 3600 for job in own)
    assert not any(report_passing(clients[0], {"stderr": "ok"}, job=f"job-{k}") for k in range(4))
    assert redis_client.llen(names.QUEUE_PASSING) == 0
