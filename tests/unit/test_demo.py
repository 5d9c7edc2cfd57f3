"""``theow demo``'s summary: what a new user reads first."""

from __future__ import annotations

import gzip
import io
import json

import pytest
from rich.console import Console

from theow_client import Status, Verdict
from theow_workers.demo import _print_summary, read_failures
from theow_workers.replay.reader import HistoryError


def test_the_table_lists_rules_by_how_they_matched_and_says_so():
    verdicts = [
        Verdict("1", Status.RESOLVED, "go_rename", "fix"),
        Verdict("2", Status.FAILED, "go_rename", "fix"),
        Verdict("3", Status.RETRY, "network_flake", "retry"),
        Verdict("4", Status.TRACKED, "oom_killed", "track"),
        Verdict("5", Status.UNMATCHED),
    ]
    screen = io.StringIO()
    _print_summary(verdicts, 5, Console(file=screen, width=200))
    shown = screen.getvalue()

    assert "matched by rule" in shown and "resolved by rule" not in shown
    rows = {line.split("│")[1].strip(): line for line in shown.splitlines() if line.count("│") > 3}
    assert [c.strip() for c in rows["go_rename"].split("│")[2:5]] == [
        "fix", "2", "failed 1, resolved 1",
    ]  # fmt: skip
    assert [c.strip() for c in rows["network_flake"].split("│")[2:4]] == ["retry", "1"]
    assert [c.strip() for c in rows["oom_killed"].split("│")[2:4]] == ["track", "1"]
    assert "matched 4/5 (80%), unmatched 1" in shown


def test_the_demo_reads_its_failures_as_replay_does(tmp_path):
    packed = tmp_path / "failures.jsonl.gz"
    packed.write_bytes(gzip.compress(b'{"stderr": "boom"}\n\n{"stderr": "bang"}\n'))
    assert read_failures(packed) == [{"stderr": "boom"}, {"stderr": "bang"}]
    unnamed = tmp_path / "failures.jsonl"
    unnamed.write_bytes(packed.read_bytes())
    with pytest.raises(HistoryError, match="gzip-compressed data"):
        read_failures(unnamed)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"stderr": "ok"}) + "\n[1]\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not a JSON object but an array"):
        read_failures(bad)
