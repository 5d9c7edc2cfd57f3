"""Replay closes the loop: history → explore its unknown causes under a budget → approve → replay again.

Real resolver, replay and explorer worker processes on Valkey, Milvus Lite and
SQLite; the explorer's real client talks to each provider's fake server in turn
(Gemini, an OpenAI-compatible one); `theow replay` and `theow review` run as a
user runs them.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import pytest

from tests.integration.conftest_replay import *  # noqa: F403
from tests.integration.conftest_replay import ReplayFleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Five causes no fixture rule knows, each in three wordings with its own params.
CAUSES = {
    "quota": (
        r"disk quota exceeded on (?P<volume>/data/vol\d+)",
        [
            "fatal: disk quota exceeded on /data/vol{n} while writing the cache",
            "ERROR: disk quota exceeded on /data/vol{n} (limit {m} GB)",
            "fatal: disk quota exceeded on /data/vol{n}, giving up after {m} tries",
        ],
    ),
    "nilmap": (
        r"panic: assignment to entry in nil map in worker (?P<worker>\d+)",
        [
            "panic: assignment to entry in nil map in worker {n}",
            "panic: assignment to entry in nil map in worker {n} [recovered]",
            "goroutine {m} [running]: panic: assignment to entry in nil map in worker {n}",
        ],
    ),
    "certificate": (
        r"tls handshake with (?P<host>[\w.]+):\d+ failed: certificate has expired",
        [
            "tls handshake with mirror{n}.example.org:{m} failed: certificate has expired",
            "error: tls handshake with mirror{n}.example.org:{m} failed: certificate has expired (x509)",
            "fetch aborted: tls handshake with mirror{n}.example.org:{m} failed: certificate has expired",
        ],
    ),
    "seats": (
        r"license seat pool '(?P<pool>team-\d+)' is exhausted",
        [
            "license check failed: license seat pool 'team-{n}' is exhausted",
            "ERROR license seat pool 'team-{n}' is exhausted ({m} of {m} seats in use)",
            "cannot start the linter: license seat pool 'team-{n}' is exhausted",
        ],
    ),
    "migration": (
        r"migration (?P<migration>\d+_\w+) timed out waiting for a lock on table (?P<table>\w+)",
        [
            "migration {n}_add_index timed out waiting for a lock on table orders_{m}",
            "Error: migration {n}_add_index timed out waiting for a lock on table orders_{m}",
            "deploy failed: migration {n}_add_index timed out waiting for a lock on table orders_{m} after {m}s",
        ],
    ),
}


def history(n: int = 1000) -> list[dict[str, str]]:
    """Largest cause first (so budget 3 explores quota, nilmap, certificate), every line distinct."""
    weights = {"quota": 260, "nilmap": 230, "certificate": 200, "seats": 170, "migration": 140}
    lines = []
    for cause, count in weights.items():
        _, wordings = CAUSES[cause]
        for i in range(count * n // 1000):
            error = wordings[i % len(wordings)].format(n=i % 17 + 1, m=i % 13 + 2)
            lines.append(
                {
                    "stderr": f"step {i}: building\nrunning job {cause}-{i}\n{error}\n",
                    "job": f"ci-{cause}-{i}",
                }
            )
    return lines


def proposing(wire):
    """A brain proposing, for the failure it is shown, a track rule whose regex covers every wording."""

    def brain(model: str, body: dict) -> dict:
        text = "\n".join(wire.user_texts(body))
        for cause, (regex, _) in CAUSES.items():
            if re.search(regex, text):
                rule = (
                    f"name: replayed_{cause}\n"
                    f"description: The {cause} failure seen in the replayed history.\n"
                    "mode: track\n"
                    "when:\n"
                    "  - fact: stderr\n"
                    "    regex: '" + regex.replace("'", "''") + "'\n"
                )
                return wire.function_call("submit_rule", rule_yaml=rule, actions=[])
        return wire.function_call("give_up", reason="no idea")

    return brain


def theow(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def replayed(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


@pytest.fixture
def stack(replay_fleet: ReplayFleet, any_explorers):
    fake, start = any_explorers
    fake.brain = proposing(fake.wire)
    start()
    replay_fleet.start_replay_worker(concurrency=2)
    return replay_fleet, fake


def sent(replays: ReplayFleet) -> int:
    """Groups the replay has written down as sent (or about to be) to the explorer."""
    from sqlalchemy import func, select

    from theow_workers.store.schema import ReplayExplorationRow

    with replays.jobs().session() as s:
        return s.execute(select(func.count()).select_from(ReplayExplorationRow)).scalar_one()


def test_a_replay_explores_its_unknown_causes_under_budget_and_the_second_replay_proves_it_learned(
    stack,
):
    """One fleet for the whole loop (it is the slow part): budget 3 with the driver killed
    mid-exploration and resumed, topped up to 5, approved, replayed again."""
    replays, fake = stack
    path = replays.write("history.jsonl", history())

    driver = replays.start_cli(str(path), "--explore", "--budget", "3")
    job_id = replays.latest_job_id()
    replays.wait(lambda: sent(replays) >= 1, timeout=180)
    driver.send_signal(signal.SIGKILL)  # mid-exploration: rows written, not all sent or awaited
    driver.wait(10)
    first = replayed(replays.cli("resume", job_id, "--json"))
    assert first["summary"]["replayed"] == 1000 and first["summary"]["matched"] == 0
    assert len(first["unmatched_groups"]) == 5  # one group per cause, whatever the wording
    explored = first["explore_request"]
    assert [g["state"] for g in explored["groups"]] == ["explored"] * 3 + ["not explored"] * 2
    assert all(g["reason"] == "over the budget" for g in explored["groups"][3:])
    assert fake.sessions() == 3 and explored["llm_sessions"] == 3

    topped = replayed(replays.cli("explore", job_id, "--budget", "5", "--json"))
    explored = topped["explore_request"]
    assert fake.sessions() == 5 and explored["llm_sessions"] == 5  # the first 3 not paid twice
    proposals = json.loads(theow("review", "list", "--json").stdout)
    assert len(proposals) == 5 and {p["status"] for p in proposals} == {"pending"}
    by_id = {p["id"]: p for p in proposals}
    for group, state in zip(topped["unmatched_groups"], explored["groups"], strict=True):
        assert state["state"] == "explored" and state["proposal_status"] == "pending"
        assert state["failure_id"] in group["failure_ids"]  # the proposal is linked to its group
        assert by_id[state["proposal_id"]]["failure_id"] == state["failure_id"]
        assert state["tokens_in"] > 0 and state["cost"] > 0
    assert explored["actual_usd"] > 0
    state = explored["groups"][-1]  # a proposal says which replay and group it came from
    shown = json.loads(theow("review", "show", state["proposal_id"], "--json").stdout)
    assert shown["replay"] == {"job": job_id, "group": state["rank"], "failures": state["size"]}

    approved = theow("review", "approve", *by_id)
    assert approved.returncode == 0, approved.stderr
    again = replayed(replays.cli(job_id, "--again", "--json"))
    assert again["summary"]["matched"] >= 950
    assert fake.sessions() == 5  # not one LLM session in the second run
    change = again["comparison"]
    assert change["previous_job"] == job_id
    assert (change["previous_hit_rate"], change["previous_llm_sessions"]) == (0.0, 5)
    assert change["llm_sessions"] == 0
    newly = {r["rule"]: r for r in change["newly_matched"]["by_rule"]}
    assert set(newly) == {f"replayed_{cause}" for cause in CAUSES}
    assert {r["approved_proposal"] for r in newly.values()} == set(by_id)
    assert change["newly_matched"]["count"] == again["summary"]["matched"]
    shown = theow("replay", "report", again["job"]["id"])
    assert "LLM sessions 5 → 0" in shown.stdout and "hit rate 0.0% → 100.0%" in shown.stdout
