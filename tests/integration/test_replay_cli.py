"""`theow replay` end to end: real CLI, real replay worker, real SQL, a report to read."""

from __future__ import annotations

import gzip
import json

import pytest
from sqlalchemy import func, select

from tests.integration.conftest_replay import *  # noqa: F403
from tests.integration.conftest_replay import ReplayFleet, history_lines
from theow_client import Status
from theow_workers.store.schema import FailureRow, VerdictRow

pytestmark = pytest.mark.integration


def rows(store, model, **where) -> int:
    with store.session() as s:
        query = select(func.count()).select_from(model)
        for key, value in where.items():
            query = query.where(getattr(model, key) == value)
        return int(s.execute(query).scalar_one())


def test_a_history_file_is_replayed_and_reported(replay_fleet: ReplayFleet, tmp_path):
    """Given 60 failures and 3 bad lines, the report says what matched and what is unknown."""
    replay_fleet.start_replay_worker()
    lines: list = history_lines(60)
    lines[10:10] = ["{not json", "[1, 2]", json.dumps(lines[0])]
    history = replay_fleet.write("history.jsonl", lines)

    run = replay_fleet.cli(str(history), "--json", "--report-dir", str(tmp_path / "reports"))
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    summary = report["summary"]
    assert (summary["total"], summary["processed"], summary["replayed"]) == (63, 63, 60)
    assert (summary["matched"], summary["unmatched"]) == (42, 18)
    assert summary["hit_rate"] == 0.7
    # Each rule comes with one line of evidence: why it matched, in the log.
    assert report["rules"] == [
        {"rule": "tf_echo", "matched": 30, "evidence": "stderr:2: ECHO w0"},
        {
            "rule": "tf_flaky_network",
            "matched": 12,
            "evidence": "stderr:2: read: Connection reset by peer",
        },
    ]
    assert "tf_hang" in report["rules_without_matches"]
    groups = report["unmatched_groups"]
    assert [g["size"] for g in groups] == [12, 6]
    assert groups[0]["sample"].startswith("fatal: disk quota exceeded on /data/")
    assert len(groups[0]["failure_ids"]) == 12
    assert [(p["line"], p["kind"]) for p in report["input_problems"]] == [
        (11, "invalid"), (12, "invalid"), (13, "duplicate"),
    ]  # fmt: skip
    assert report["exploration"]["sessions"] == 2
    job_id = report["job"]["id"]
    assert (
        (tmp_path / "reports" / f"replay-{job_id}.md").read_text().startswith(f"# Replay {job_id}")
    )
    assert "dry run" in run.stderr

    # Replayed failures are recorded like live ones, under their replay's source.
    store = replay_fleet.fleet.store()
    assert rows(store, FailureRow, source=f"replay:{job_id}") == 60
    assert rows(store, VerdictRow) == 60
    assert store.rule_stats() == {}  # a dry run ran no action: no track record moved

    status = replay_fleet.cli("status", job_id, "--json")
    assert json.loads(status.stdout)["status"] == "done"
    listed = json.loads(replay_fleet.cli("list", "--json").stdout)
    assert [j["id"] for j in listed] == [job_id]

    again = json.loads(replay_fleet.cli(str(history), "--json").stdout)
    assert again["comparison"]["previous_job"] == job_id
    assert again["comparison"]["stopped_matching"] == []


def test_an_empty_file_is_a_finished_replay_with_nothing_in_it(replay_fleet: ReplayFleet):
    history = replay_fleet.write("empty.jsonl", [])
    run = replay_fleet.cli(str(history), "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["summary"]["processed"] == 0
    assert "has no failures to replay" in run.stderr


COUNTS = ("total", "processed", "replayed", "matched", "unmatched", "invalid", "duplicates")


def test_a_gzipped_history_or_one_on_standard_input_counts_as_the_plain_file(
    replay_fleet: ReplayFleet,
):
    replay_fleet.start_replay_worker()
    lines: list = history_lines(40)
    lines[10:10] = ["{not json", json.dumps(lines[0])]
    plain = replay_fleet.write("history.jsonl", lines)
    packed = plain.with_name("history.jsonl.gz")
    packed.write_bytes(gzip.compress(plain.read_bytes()))

    def counts(run) -> dict[str, int]:
        assert run.returncode == 0, run.stderr
        summary = json.loads(run.stdout)["summary"]
        return {key: summary[key] for key in COUNTS}

    expected = counts(replay_fleet.cli(str(plain), "--json"))
    assert (expected["replayed"], expected["invalid"], expected["duplicates"]) == (40, 1, 1)
    assert expected["matched"] == 28
    assert counts(replay_fleet.cli(str(packed), "--json")) == expected
    with plain.open("rb") as piped:
        assert counts(replay_fleet.cli("-", "--json", stdin=piped)) == expected
    with packed.open("rb") as piped:
        assert counts(replay_fleet.cli("-", "--json", stdin=piped)) == expected


def test_a_file_that_is_not_json_lines_stops_in_one_line_before_a_job_exists(
    replay_fleet: ReplayFleet, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "1000")  # long paths: a narrow terminal would wrap the line
    home = replay_fleet.fleet.home
    good = gzip.compress(b"".join(json.dumps(ln).encode() + b"\n" for ln in history_lines(20)))
    (home / "zipped.jsonl").write_bytes(good)
    (home / "fake.jsonl.gz").write_bytes(b'{"stderr": "not gzip"}\n')
    (home / "cut.jsonl.gz").write_bytes(good[: len(good) // 2])
    (home / "binary.jsonl").write_bytes(bytes(range(256)) * 64)
    (home / "build.log").write_text("compiling\nerror: it broke\n" * 30)
    cases = {
        "zipped.jsonl": "gzip-compressed data; name it zipped.jsonl.gz",
        "fake.jsonl.gz": "named .gz but not gzip data",
        "cut.jsonl.gz": "damaged gzip data",
        "binary.jsonl": "binary data, not JSON Lines",
        "build.log": "not JSON Lines: none of its first 60 lines is a JSON object",
        "missing.jsonl": "no such file",
    }
    for name, problem in cases.items():
        run = replay_fleet.cli(str(home / name))
        assert run.returncode == 2, (name, run.stderr)
        (line,) = run.stderr.splitlines()
        assert line.startswith(f"error: {home / name}: {problem}"), line
    assert replay_fleet.jobs().recent(10) == []


def test_bad_usage_is_one_line_and_exit_code_2(replay_fleet: ReplayFleet):
    assert replay_fleet.cli("missing.jsonl").returncode == 2
    both = replay_fleet.cli("--from-db", "--explore")
    assert both.returncode == 2 and "--explore needs --budget N" in both.stderr
    unknown = replay_fleet.cli("status", "nope")
    assert unknown.returncode == 2 and "no replay job 'nope'" in unknown.stderr


def test_stored_failures_are_replayed_after_a_rule_is_added(replay_fleet: ReplayFleet):
    """Given live failures no rule knew, a new rule and a re-scan of the unmatched ones."""
    fleet = replay_fleet.fleet
    fleet.start_worker()
    replay_fleet.start_replay_worker()
    client = fleet.client()
    known = client.submit({"stderr": "ECHO live", "job": "j"}).wait(60)
    unknown = [
        client.submit({"stderr": f"E: Unable to locate package lib{i}-dev"}) for i in range(3)
    ]
    assert known.status is Status.RESOLVED
    assert {t.wait(60).status for t in unknown} == {Status.UNMATCHED}

    (fleet.settings.rules_dir / "apt_missing_package.rule.yaml").write_text(
        "name: apt_missing_package\ndescription: apt cannot find a package\nmode: track\n"
        "when:\n  - fact: stderr\n    regex: 'Unable to locate package (?P<package>\\S+)'\n"
    )
    run = replay_fleet.cli("--from-db", "--since", "1h", "--unmatched-only", "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["summary"]["processed"] == 3  # the resolved one and replay rows are not selected
    assert report["rules"] == [
        {
            "rule": "apt_missing_package",
            "matched": 3,
            "evidence": "stderr:1: E: Unable to locate package lib0-dev",
        }
    ]
    assert report["job"]["source"] == "stored failures, since 1h, unmatched only"


def test_without_waiting_the_largest_group_is_sent_and_the_others_are_not_explored(
    replay_fleet: ReplayFleet,
):
    replay_fleet.start_replay_worker()
    history = replay_fleet.write("h.jsonl", history_lines(20))
    run = replay_fleet.cli(str(history), "--explore", "--budget", "1", "--no-wait", "--json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    request = report["explore_request"]
    assert request["budget"] == 1 and len(request["groups"]) == 2
    assert [g["state"] for g in request["groups"]] == ["exploring", "not explored"]
    assert request["groups"][0]["size"] >= request["groups"][1]["size"]
    assert report["exploration"]["sessions"] == 1
    assert "exploring 1 of 2 unmatched group(s) under session replay:" in run.stderr
