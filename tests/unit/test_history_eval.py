"""``theow history eval`` on a small generated fleet with its truth, and on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from theow_workers.cli import app

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("style", ["direct", "merged", "workflows", "queue"])
def test_eval_scores_a_generated_fleet_against_its_truth(tmp_path, style):
    history, truth, out = tmp_path / "h.jsonl.gz", tmp_path / "t.jsonl", tmp_path / "r.jsonl"
    subprocess.run(  # the generator exits 1 when its truth breaks the origins' definitions
        [
            sys.executable,
            str(ROOT / "benchmarks/fleet_history.py"),
            "--style",
            style,
            "--seed",
            "3",
            "--repos",
            "4",
            "--days",
            "6",
            "--out",
            str(history),
            "--truth",
            str(truth),
        ],
        check=True,
        capture_output=True,
    )

    result = CliRunner().invoke(
        app, ["history", "eval", str(history), "--truth", str(truth), "--out", str(out), "--json"]
    )

    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == report["failed"] == sum(report["origins"].values()) > 50
    assert set(rows[0]) >= {"id", "origin", "culprit", "origin_then"}
    assert all(r["culprit"] is None for r in rows if r["origin"] != "main")
    assert report["truth"]["judged"] == report["failed"]
    assert report["truth"]["accuracy"] > 0.8


def test_a_row_without_an_outcome_stops_with_its_line_and_exit_code_2(tmp_path):
    history = tmp_path / "h.jsonl"
    history.write_text(
        '{"id": "1", "repo": "o/r", "job": "t", "branch": "main", "sha": "a",'
        ' "outcome": "passed", "finished_at": 1}\n'
        '{"id": "2", "repo": "o/r", "job": "t", "branch": "main", "sha": "b", "finished_at": 2}\n'
    )

    result = CliRunner().invoke(
        app, ["history", "eval", str(history), "--out", str(tmp_path / "r")]
    )

    assert result.exit_code == 2
    assert f"{history}:2: 'outcome' must be" in result.stderr


def test_a_file_that_is_not_json_lines_is_refused_with_exit_code_2(tmp_path):
    history = tmp_path / "h.jsonl"
    history.write_text("not json at all\n")

    result = CliRunner().invoke(
        app, ["history", "eval", str(history), "--out", str(tmp_path / "r")]
    )

    assert result.exit_code == 2
    assert "not JSON Lines" in result.stderr


def test_the_generator_check_finds_truth_that_breaks_the_definitions(tmp_path):
    def row(id, sha, at, outcome="failed", **more):
        return {"id": id, "repo": "o/r", "job": "t", "branch": "main", "sha": sha,
                "outcome": outcome, "finished_at": at, **more}  # fmt: skip

    rows = [row("1", "a", 1, "passed"), row("2", "b", 2), row("3", "c", 3, "passed")]
    rows.append(row("4", "x", 4, branch="main"))
    truth = [
        {"id": "2", "origin": "main", "culprit": "b"},  # failed once, next commit passed
        {"id": "4", "origin": "change", "culprit": None},  # a change on the default branch
    ]
    history, truth_file = tmp_path / "h.jsonl", tmp_path / "t.jsonl"
    history.write_text("".join(json.dumps(r) + "\n" for r in rows))
    truth_file.write_text("".join(json.dumps(t) + "\n" for t in truth))

    checked = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/fleet_check.py"), str(history), str(truth_file)],
        capture_output=True,
        text=True,
    )

    assert checked.returncode == 1
    assert "2: a lone failure of main labelled main, not flaky" in checked.stdout
    assert "4: change on the default branch" in checked.stdout
