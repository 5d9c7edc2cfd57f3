"""`theow rules eval --learn`: a simulated reviewer teaches each miss; the next one like it is known."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.integration.test_cli import FIXTURES, theow

pytestmark = pytest.mark.integration

WRAPPER = """\
name: make_recipe_failed
description: A make recipe failed; the cause is above.
mode: track
generic: true
when:
  - fact: log
    regex: 'make(?:\\[\\d+\\])?: \\*\\*\\* \\[(?P<target>[^\\]\\n]+)\\] Error (?P<code>\\d+)'
"""


def docs_log(page: str, source: str, when: str) -> str:
    return (
        "$ make docs\nbuilding 40 pages\n"
        f'ERROR {when} REF_NOT_FOUND: Ref "{page}": "/home/ci/{source}": page not found\n'
        "make: *** [docs] Error 1\n"
    )


FAILURES = [
    {"id": "first", "repo": "acme/site", "log": docs_log("/docs/4.3/intro", "a.md:206:95", "2019/08/01 15:12:45")},
    {"id": "second", "repo": "acme/site", "log": docs_log("/docs/5.0/grid", "b/c.md:1:2", "2020/01/09 09:01:02")},
    {"id": "third", "repo": "acme/site", "log": docs_log("/about", "d/e/f.md:7:7", "2021/02/03 04:05:06")},
    # Another cause in the same project: taught too, by its own rule.
    {"id": "fourth", "repo": "acme/site", "log": "npm test\nTypeError: Cannot read properties of undefined (reading 'x')\n"},
]  # fmt: skip
LABELS = [
    {"id": row["id"], "chunk": next(line for line in row["log"].splitlines() if "error" in line.lower() and "make" not in line)}
    for row in FAILURES
]  # fmt: skip
PASSING = [
    {
        "id": "first",
        "repo": "acme/site",
        "log": "$ make docs\nbuilding 40 pages\nall links resolve\n",
    }
]


def write(path: Path, rows: list[dict]) -> Path:
    with gzip.open(path, "wt") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)
    return path


def test_each_miss_is_taught_once_and_the_failures_after_it_are_grounded(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "make_recipe_failed.rule.yaml").write_text(WRAPPER)
    out = tmp_path / "rows.jsonl"
    result = theow(
        "rules", "eval", str(write(tmp_path / "f.jsonl.gz", FAILURES)),
        "--labels", str(write(tmp_path / "l.jsonl.gz", LABELS)),
        "--passing", str(write(tmp_path / "p.jsonl.gz", PASSING)),
        "--rules", str(rules), "--actions", str(FIXTURES / "actions"),
        "--learn", "--learned", str(tmp_path / "learned"), "--out", str(out), "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    by_id = {row["id"]: row for row in rows if row["source"] == "failures"}

    # The first of each kind is taught and keeps its verdict from before (unexplained).
    assert by_id["first"]["taught"] and by_id["first"]["rule"] is None
    assert by_id["fourth"]["taught"] and not by_id["fourth"]["learned"]
    # The later ones of the first kind are explained by the learned rule, from the telling line.
    for later in ("second", "third"):
        assert not by_id[later]["taught"] and by_id[later]["learned"] and by_id[later]["grounded"]
        assert "REF_NOT_FOUND" in by_id[later]["evidence"]["text"]
    assert report["taught"] == 2 and report["taught_rate"] == 0.5
    assert len(report["learned_rules"]) == 2
    assert report["learned_found"] == 2 and report["learned_precision"] == 1.0
    assert report["learned_on_passing"] == 0
    assert report["grounded"] == 2  # = failures - taught, on a labelled corpus
    assert len(report["learning_curve"]) == 10
    # The learned rules are rule files like any other: they pass `theow rules check`.
    learned = sorted(p.name for p in (tmp_path / "learned").iterdir())
    assert learned == sorted(f"{name}.rule.yaml" for name in report["learned_rules"])
    for path in (tmp_path / "learned").iterdir():
        (rules / path.name).write_text(path.read_text())
    checked = theow("rules", "check", str(rules), "--actions", str(FIXTURES / "actions"))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_learn_without_labels_is_refused(tmp_path):
    result = theow("rules", "eval", str(write(tmp_path / "f.jsonl.gz", FAILURES)), "--learn")

    assert result.returncode == 2
    assert "--learn needs --labels" in result.stderr
