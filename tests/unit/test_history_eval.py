"""``theow history eval`` on a small generated fleet with its truth, and on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from theow_workers.cli import app

ROOT = Path(__file__).resolve().parents[2]


def test_eval_scores_a_generated_fleet_against_its_truth(tmp_path):
    history, truth, out = tmp_path / "h.jsonl.gz", tmp_path / "t.jsonl", tmp_path / "r.jsonl"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks/fleet_history.py"),
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
