"""`theow teach`: a failure no rule knows, taught by pointing at its lines, is known the next time.

Given a stored failure that no rule explains, when a person runs `theow teach
ID --lines A-B`, I expect a pending proposal with its test results in the
review queue (origin `taught`, by whom); approved the usual way, its rule
explains a later failure of the same kind, with other numbers, paths and
names, and shows the line that says why.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from theow_client.verdict import Status, Verdict
from theow_workers.core.ports import FailureRecord
from theow_workers.store.results import SqlStore
from theow_workers.store.schema import migrate

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"

pytestmark = pytest.mark.integration

FIRST = """\
$ ./check_docs.sh
checking 41 pages
\x1b[31mERROR\x1b[0m 2019/08/01 15:12:45 REF_NOT_FOUND: Ref "/docs/4.3/intro": "/home/travis/build/acme/site/a.md:206:95": page not found
make: *** [docs] Error 1
"""
OLDER = FIRST.replace("4.3/intro", "4.2/start").replace("a.md:206:95", "z.md:1:2")
LATER = """\
$ ./check_docs.sh
checking 57 pages
\x1b[31mERROR\x1b[0m 2020/01/09 09:01:02 REF_NOT_FOUND: Ref "/docs/5.0/layout/grid": "/home/travis/build/acme/site/b/c.md:12:4": page not found
make: *** [docs] Error 2
"""
ELSEWHERE = LATER.replace("REF_NOT_FOUND", "REF_FOUND_LATE")


@pytest.fixture
def workspace(tmp_path: Path) -> dict[str, Path | str]:
    rules, actions = tmp_path / "rules", tmp_path / "actions"
    shutil.copytree(FIXTURES / "rules", rules)
    shutil.copytree(FIXTURES / "actions", actions)
    url = f"sqlite:///{tmp_path / 'theow.db'}"
    migrate(url)
    store = SqlStore(url)
    for failure_id, log in (("f-older", OLDER), ("f-first", FIRST), ("f-other", ELSEWHERE)):
        store.add_failure(
            FailureRecord(
                id=failure_id, fingerprint="f" * 64, facts={"log": log, "repo": "acme/site"},
                problem_type="build_failure", source="test", received_at=datetime.now(UTC),
            )
        )  # fmt: skip
        store.add_verdict(Verdict(failure_id, Status.UNMATCHED, reason="no rule matched"))
    return {"rules": rules, "actions": actions, "url": url, "home": tmp_path / "home"}


def theow(workspace: dict[str, Path | str], *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(
        THEOW_DATABASE_URL=str(workspace["url"]), THEOW_HOME=str(workspace["home"]),
        THEOW_REDIS_URL="redis://127.0.0.1:1/0", COLUMNS="1000", THEOW_REVIEWER="ada",
        THEOW_RULES_DIR=str(workspace["rules"]), THEOW_ACTIONS_DIR=str(workspace["actions"]),
        PYTHONPATH=str(ROOT),
    )  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", *args],
        capture_output=True, text=True, timeout=180, env=env,
        cwd=Path(workspace["home"]).parent,  # never the checkout: its rules/ are the shipped ones
    )  # fmt: skip


def test_a_taught_failure_is_known_the_next_time(workspace, tmp_path):
    taught = theow(workspace, "teach", "f-first", "--lines", "3-4", "--json")
    assert taught.returncode == 0, taught.stderr
    teaching = json.loads(taught.stdout)

    # The telling line, not the wrapper under it; tested on the stored failures.
    assert teaching["line"] == 3 and "REF_NOT_FOUND" in teaching["text"]
    assert teaching["origin"] == "taught" and teaching["by"] == "ada"
    assert teaching["scope"] == "repo"
    tests = teaching["tests"]
    assert tests["scanned"] == 3
    assert tests["matches"] == 2  # the taught failure and the older one; not the other kind
    assert tests["before"] == {"(none)": 2}
    assert {e["failure_id"] for e in tests["examples"]} == {"f-first", "f-older"}
    assert tests["normal_known"] is False  # no Redis here: said, not guessed

    listed = theow(workspace, "review", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    (pending,) = json.loads(listed.stdout)
    assert pending["id"] == teaching["proposal_id"]
    assert (pending["origin"], pending["taught_by"], pending["status"]) == (
        "taught",
        "ada",
        "pending",
    )

    shown = theow(workspace, "review", "show", teaching["proposal_id"])
    assert shown.returncode == 0, shown.stderr
    assert "taught by ada" in shown.stdout and teaching["rule"] in shown.stdout

    approved = theow(workspace, "review", "approve", teaching["proposal_id"])
    assert approved.returncode == 0, approved.stderr
    rule_file = Path(workspace["rules"]) / f"{teaching['rule']}.rule.yaml"
    assert rule_file.is_file()
    checked = theow(workspace, "rules", "check")
    assert checked.returncode == 0, checked.stdout + checked.stderr

    later = tmp_path / "later.jsonl"
    later.write_text(
        json.dumps({"id": "later", "log": LATER, "repo": "acme/site"}) + "\n"
        + json.dumps({"id": "other-repo", "log": LATER, "repo": "someone/else"}) + "\n"
    )  # fmt: skip
    rows_file = tmp_path / "rows.jsonl"
    evaluated = theow(workspace, "rules", "eval", str(later), "--out", str(rows_file), "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    rows = {row["id"]: row for row in map(json.loads, rows_file.read_text().splitlines())}
    assert rows["later"]["rule"] == teaching["rule"]
    assert rows["later"]["evidence"]["line"] == 3
    assert "REF_NOT_FOUND: Ref" in rows["later"]["evidence"]["text"]
    assert rows["other-repo"]["rule"] is None  # scoped to the repo it was taught in


def test_teaching_lines_that_say_nothing_files_nothing(workspace):
    refused = theow(workspace, "teach", "f-first", "--lines", "1-1")  # the command echoed

    assert refused.returncode == 1
    assert "lines 1-1 hold no text" in refused.stderr
    assert "Traceback" not in refused.stderr
    listed = theow(workspace, "review", "list", "--json")
    assert json.loads(listed.stdout) == []


def test_a_malformed_line_range_exits_2(workspace):
    refused = theow(workspace, "teach", "f-first", "--lines", "four")

    assert refused.returncode == 2
    assert "--lines 'four'" in refused.stderr


def test_teaching_in_bulk_files_one_proposal_per_distinct_rule(workspace, tmp_path):
    examples = tmp_path / "known-issues.jsonl"
    rows = [
        {"failure_id": "f-first", "lines": "3-3"},
        # The same kind again, given as the text a person copied: the first rule knows it.
        {"failure_id": "f-older", "chunk": OLDER.splitlines()[2]},
        {"failure_id": "f-other", "lines": "3-3"},
        {"failure_id": "f-nowhere", "lines": "1-2"},
    ]
    examples.write_text("".join(json.dumps(row) + "\n" for row in rows))

    result = theow(workspace, "teach", "--from", str(examples), "--json")

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [item["failure_id"] for item in report["filed"]] == ["f-first", "f-other"]
    assert report["problems"] == [f"{examples}:4: no failure 'f-nowhere'"]
    listed = json.loads(theow(workspace, "review", "list", "--json").stdout)
    assert sorted(p["failure_id"] for p in listed) == ["f-first", "f-other"]
    assert {p["origin"] for p in listed} == {"taught"}


def test_bulk_teaching_takes_stored_failures_or_facts_and_names_each_bad_line(workspace, tmp_path):
    later = {"log": LATER, "repo": "acme/site"}
    elsewhere = {"log": ELSEWHERE.replace("acme/site", "acme/blog"), "repo": "acme/blog"}
    examples = tmp_path / "known-issues.jsonl"
    lines = [
        json.dumps({"failure": "f-first", "lines": "3-4"}),
        # The same cause from facts a team kept, by lines and by chunk: the same rule, not filed.
        json.dumps({"facts": later, "lines": "3-3"}),
        json.dumps({"facts": later, "chunk": LATER.splitlines()[2]}),
        "{not json",
        json.dumps({"facts": elsewhere, "lines": "9-12"}),  # past the end of its log
        json.dumps({"failure": "f-first"}),  # no lines
        json.dumps({"facts": "a log", "lines": "1-2"}),
        # Another cause in another project: a proposal of its own, its failure stored.
        json.dumps({"facts": elsewhere, "chunk": elsewhere["log"].splitlines()[2]}),
    ]
    examples.write_text("\n".join(lines) + "\n")

    result = theow(workspace, "teach", "--from", str(examples), "--json")

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    filed = report["filed"]
    assert [item["example_line"] for item in filed] == [1, 8]
    assert [item["scope"] for item in filed] == ["repo", "repo"]
    assert "REF_FOUND_LATE" in filed[1]["text"]
    assert {s["line"] for s in report["same_rule"]} == {2, 3}
    assert {s["proposal_id"] for s in report["same_rule"]} == {filed[0]["proposal_id"]}
    problems = report["problems"]
    assert [p.split(": ", 1)[0] for p in problems] == [f"{examples}:{n}" for n in (4, 5, 6, 7)]
    assert all("\n" not in p for p in problems)
    assert "hold no text" in problems[1]
    assert 'give "lines"' in problems[2]
    assert "facts must be a JSON object" in problems[3]

    listed = json.loads(theow(workspace, "review", "list", "--json").stdout)
    assert sorted(p["id"] for p in listed) == sorted(item["proposal_id"] for item in filed)
    # The facts-only failure is stored, so its proposal can be reviewed against it.
    approved = theow(workspace, "review", "approve", filed[1]["proposal_id"])
    assert approved.returncode == 0, approved.stderr
