"""A wrapper is not a cause: failures only ``make`` or ``rake`` wrapped are explored, not explained.

Real resolver, replay and explorer worker processes on Valkey, Milvus Lite and
SQLite, with the shipped wrapper rules ``make_recipe_failed`` and
``rake_aborted`` beside the fixture rules; the explorer runs on each provider in
turn (the real google-genai client against the fake Gemini server, the real
openai client against the fake OpenAI-compatible one); ``theow replay`` runs as
a user runs it.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.integration.conftest_replay import *  # noqa: F403
from tests.integration.conftest_replay import ReplayFleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SHIPPED = Path(__file__).resolve().parents[2] / "rules"
WRAPPERS = ("make_recipe_failed", "rake_aborted")

# Five causes no rule knows, each in three wordings with its own params.
CAUSES = {
    "quota": (
        r"disk quota exceeded on (?P<volume>/data/vol\d+)",
        [
            "fatal: disk quota exceeded on /data/vol{n} while writing the cache",
            "ERROR: disk quota exceeded on /data/vol{n} (limit {m} GB)",
            "cp: cannot write: disk quota exceeded on /data/vol{n}",
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
            "error: tls handshake with mirror{n}.example.org:{m} failed: certificate has expired",
            "fetch aborted: tls handshake with mirror{n}.example.org:{m} failed: certificate has expired",
        ],
    ),
    "seats": (
        r"license seat pool '(?P<pool>team-\d+)' is exhausted",
        [
            "license check failed: license seat pool 'team-{n}' is exhausted",
            "ERROR license seat pool 'team-{n}' is exhausted ({m} of {m} seats in use)",
            "error: cannot start the linter: license seat pool 'team-{n}' is exhausted",
        ],
    ),
    "migration": (
        r"migration (?P<migration>\d+_\w+) timed out waiting for a lock on table (?P<table>\w+)",
        [
            "migration {n}_add_index timed out waiting for a lock on table orders_{m}",
            "Error: migration {n}_add_index timed out waiting for a lock on table orders_{m}",
            "deploy failed: migration {n}_add_index timed out waiting for a lock on table orders_{m}",
        ],
    ),
}


def wrapped_history() -> list[dict[str, str]]:
    """1,000 failures, 200 per cause; every other log ends as make ends it, the rest as rake."""
    lines = []
    for cause, (_, wordings) in CAUSES.items():
        for i in range(200):
            error = wordings[i % len(wordings)].format(n=i % 17 + 1, m=i % 13 + 2)
            if i % 2:
                end = f"make: *** [all] Error {i % 3 + 1}\n"
            else:
                end = (
                    f"rake aborted!\nCommand failed with status ({i % 3 + 1}): [sh ci/{cause}.sh]\n"
                )
            lines.append(
                {
                    "stderr": f"step {i}: building\nrunning job {cause}-{i}\n{error}\n{end}",
                    "job": f"ci-{cause}-{i}",
                }
            )
    return lines


def brain_of(wire):
    """Proposes, for the failure it is shown, a track rule whose regex covers every wording."""

    def brain(model: str, body: dict) -> dict:
        text = "\n".join(wire.user_texts(body))
        for cause, (regex, _) in CAUSES.items():
            if re.search(regex, text):
                rule = (
                    f"name: wrapped_{cause}\n"
                    f"description: The {cause} failure that make or rake wrapped.\n"
                    "mode: track\n"
                    "when:\n"
                    "  - fact: stderr\n"
                    "    regex: '" + regex.replace("'", "''") + "'\n"
                )
                return wire.function_call("submit_rule", rule_yaml=rule, actions=[])
        return wire.function_call("give_up", reason="no idea")

    return brain


@pytest.fixture
def stack(replay_fleet: ReplayFleet, any_explorers):
    rules = Path(replay_fleet.fleet.settings.rules_dir)
    for name in WRAPPERS:  # before any worker starts: the wrappers are in every worker's rules
        shutil.copy(SHIPPED / f"{name}.rule.yaml", rules)
    fake, start = any_explorers
    fake.brain = brain_of(fake.wire)
    start()
    replay_fleet.start_replay_worker(concurrency=2)
    return replay_fleet, fake, any_explorers.model


def test_failures_only_a_wrapper_matched_are_unexplained_and_each_cause_is_explored_once(stack):
    replays, fake, model = stack
    path = replays.write("wrapped.jsonl", wrapped_history())

    run = replays.cli(str(path), "--explore", "--budget", "5", "--json", timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)

    summary = report["summary"]
    assert summary["replayed"] == 1000
    assert (summary["matched"], summary["hit_rate"]) == (0, 0.0)  # a wrapper explains nothing
    assert summary["unexplained"] == 1000
    assert report["statuses"] == {"unexplained": 1000}
    assert report["rules"] == []  # no rule is credited with a match
    groups = report["unmatched_groups"]
    assert len(groups) == 5  # one group per cause, whichever wrapper ended its logs
    for group in groups:
        causes = {key_cause(report, key) for key in group["keys"]}
        assert len(causes) == 1 and group["size"] == 200

    explored = report["explore_request"]
    assert fake.sessions(model) == 5 and explored["llm_sessions"] == 5
    assert explored["proposals"] == 5
    assert [g["state"] for g in explored["groups"]] == ["explored"] * 5
    assert {g["rule_name"] for g in explored["groups"]} == {f"wrapped_{c}" for c in CAUSES}

    shown = replays.cli("report", report["job"]["id"])
    assert "hit rate 0.0% explained" in shown.stdout
    assert "1000 of them unexplained" in shown.stdout


def key_cause(report: dict, key: str) -> str:
    """The cause of the history line an item key names (its 1-based line number)."""
    causes = list(CAUSES)
    return causes[(int(key) - 1) // 200]
