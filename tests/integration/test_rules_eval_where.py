"""`theow rules eval --out --labels`: every failure's where lines, and how many of them are located."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.integration.test_cli import FIXTURES, theow

pytestmark = pytest.mark.integration

RULES = {
    "db_url_missing": """
name: db_url_missing
description: The app reads DATABASE_URL and it is not set.
mode: track
when:
  - fact: log
    regex: "KeyError: 'DATABASE_URL'"
""",
    "make_recipe_failed": """
name: make_recipe_failed
description: A make recipe failed; the cause is above.
mode: track
generic: true
when:
  - fact: log
    regex: 'make(?:\\[\\d+\\])?: \\*\\*\\* \\[(?P<target>[^\\]\\n]+)\\] Error (?P<code>\\d+)'
""",
}
FAILURES = [
    # A specific rule explains it: its evidence comes first.
    {"id": "known", "log": "Traceback (most recent call last):\n  File \"app.py\", line 3\nKeyError: 'DATABASE_URL'\nmake: *** [run] Error 1\n"},
    # Only the wrapper matches: the compiler's line is where to look, never the wrapper.
    {"id": "wrapped", "log": "cc -c main.c\nmain.c:5:12: error: expected ';' before 'return'\nmake: *** [all] Error 1\n"},
    # No rule at all: still lines to look at.
    {"id": "unknown", "log": "pip install -r requirements.txt\nERROR: No matching distribution found for frobnicate==9.9\n"},
    # Located nowhere: the label names a line the log does not stress.
    {"id": "elsewhere", "log": "step 1\nstep 2\nERROR: tests failed\n"},
]  # fmt: skip
LABELS = [
    {"id": "known", "chunk": "KeyError: 'DATABASE_URL'"},
    {"id": "wrapped", "chunk": "main.c:5:12: error: expected ';' before 'return'"},
    {"id": "unknown", "chunk": "ERROR: No matching distribution found for frobnicate==9.9"},
    {"id": "elsewhere", "chunk": "the staging database was down for maintenance"},
]


def write(path: Path, rows: list[dict]) -> Path:
    with gzip.open(path, "wt") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)
    return path


def test_every_row_carries_where_lines_and_the_summary_says_how_many_are_located(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    for name, text in RULES.items():
        (rules / f"{name}.rule.yaml").write_text(text.lstrip())
    failures = write(tmp_path / "failures.jsonl.gz", FAILURES)
    labels = write(tmp_path / "labels.jsonl.gz", LABELS)
    out = tmp_path / "rows.jsonl"
    result = theow(
        "rules", "eval", str(failures), "--labels", str(labels), "--rules", str(rules),
        "--actions", str(FIXTURES / "actions"), "--out", str(out), "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    rows = {row["id"]: row for row in map(json.loads, out.read_text().splitlines())}

    assert all(1 <= len(row["where"]) <= 3 for row in rows.values())
    assert all(set(w) == {"fact", "line", "text"} for row in rows.values() for w in row["where"])
    assert rows["known"]["rule"] == "db_url_missing"
    assert rows["known"]["where"][0] == {
        "fact": "log",
        "line": 3,
        "text": "KeyError: 'DATABASE_URL'",
    }
    assert rows["wrapped"]["where"][0]["line"] == 2
    assert all("make: ***" not in w["text"] for row in rows.values() for w in row["where"])
    assert rows["unknown"]["rule"] is None
    assert rows["unknown"]["where"][0]["text"].startswith("ERROR: No matching distribution")

    assert report["located"] == 3 and report["located_rate"] == 0.75
