"""The `theow` command piped into grep or a CI log: whole lines, whole ids, honest exit codes.

Run as a user runs them, in a subprocess whose stdout is a pipe and with no
COLUMNS set, where rich would otherwise lay out for 80 columns.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from theow_client.verdict import Status, Verdict, Where
from theow_workers.core.ports import FailureRecord
from theow_workers.store.results import SqlStore
from theow_workers.store.schema import migrate

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"

pytestmark = pytest.mark.integration

LONG_REASON = "no rule matched; " + "the log ends with an error nobody has seen before " * 4


def theow(*args: str, home: Path | None = None, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", **extra}
    if home is not None:
        env["THEOW_HOME"] = str(home)
    return subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip


# The README's example rule as issue 19 found it: it passed `rules check` and
# `rules test`, then failed at run time ("missing a required argument: 'version'").
README_RULE_OF_ISSUE_19 = r"""name: go_module_path_rename
description: >
  A Go module changed its import path; the build requires the old path.
tags: [go, dependencies]
mode: fix
when:
  - fact: problem_type
    equals: dependency_resolution
  - fact: stderr
    regex: 'declares its path as: (?P<new_path>\S+)\s+but was required as: (?P<old_path>\S+)'
    examples:
      - "module declares its path as: dario.cat/mergo but was required as: github.com/imdario/mergo"
then:
  - action: go_mod_replace
    params: {old_path: "{old_path}", new_path: "{extract.new_path}", job: "{facts.job}"}
"""


def test_rules_check_names_the_readme_rules_missing_argument_on_one_line(tmp_path: Path) -> None:
    (tmp_path / "go_module_path_rename.rule.yaml").write_text(README_RULE_OF_ISSUE_19)
    result = theow("rules", "check", str(tmp_path), "--actions", str(ROOT / "actions"))
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    where = f"{tmp_path}/go_module_path_rename.rule.yaml:"
    assert any(
        line.startswith(where)
        and line.endswith("action 'go_mod_replace' is missing a required argument: 'version'")
        for line in lines
    ), result.stderr
    assert any(line.endswith("action 'go_mod_replace' takes no argument 'job'") for line in lines)


def test_rules_check_reports_every_problem_of_a_file(tmp_path: Path) -> None:
    (tmp_path / "broken.rule.yaml").write_text(
        "name: not_broken\nbogus: 1\nwhen: []\nthen:\n  - action: no_such_action\n"
    )
    result = theow("rules", "check", str(tmp_path), "--actions", str(FIXTURES / "actions"))
    assert result.returncode == 1
    path = f"{tmp_path}/broken.rule.yaml"
    assert result.stderr.splitlines() == [
        f"{path}:1: name 'not_broken' differs from file name 'broken'",
        f"{path}:2: unknown key 'bogus' in rule",
        f"{path}:3: `when` is empty: a rule needs at least one fact",
        f"{path}:5: unknown action 'no_such_action'",
    ]


def test_rules_test_exits_1_when_no_rule_matches(tmp_path: Path) -> None:
    facts = tmp_path / "failure.json"
    facts.write_text(json.dumps({"stderr": "something nobody has a rule for\n"}))
    args = ["--rules", str(FIXTURES / "rules"), "--actions", str(FIXTURES / "actions")]
    result = theow("rules", "test", "--facts", str(facts), *args)
    assert result.returncode == 1
    assert "no rule matched" in result.stdout
    # Loading MiniLM draws no progress bar and logs nothing: at most a line per wait.
    assert all(line.startswith("theow: ") for line in result.stderr.splitlines()), result.stderr
    as_json = theow("rules", "test", "--facts", str(facts), "--json", *args)
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["matched"] is False


def test_rules_test_with_a_fresh_embedding_cache_says_it_embeds_the_rules(tmp_path: Path) -> None:
    facts = tmp_path / "failure.json"
    facts.write_text(json.dumps({"stderr": "step 3\nECHO hello\n", "job": "j"}))
    args = ["--rules", str(FIXTURES / "rules"), "--actions", str(FIXTURES / "actions")]
    vectors = str(tmp_path / "vectors")  # nothing embedded yet: MiniLM loads and embeds
    result = theow("rules", "test", "--facts", str(facts), *args, THEOW_EMBEDDING_CACHE=vectors)
    assert result.returncode == 0, result.stderr
    waits = result.stderr.splitlines()
    assert any(
        re.fullmatch(
            r"theow: embedding \d+ rules with MiniLM \(first run only, cached afterwards\)…", w
        )
        for w in waits
    ), result.stderr
    assert "\r" not in result.stderr and "\x1b" not in result.stderr  # no animation


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    """A Theow home whose database holds three failures, two with a common id prefix."""
    home = tmp_path / "home"
    home.mkdir()
    url = f"sqlite:///{home / 'theow.db'}"
    migrate(url)
    store = SqlStore(url)
    for failure_id in (
        "7f3a9c1e-0000-4000-8000-000000000001",
        "7f3a9c1e-0000-4000-8000-000000000002",
        "b52e07d4-1111-4000-8000-000000000003",
    ):
        store.add_failure(
            FailureRecord(
                failure_id, "fp", {"stderr": LONG_REASON}, "build", "test", datetime.now(UTC)
            )
        )
    store.dispose()
    return home


def test_failures_list_shows_whole_ids_and_show_accepts_a_prefix(recorded: Path) -> None:
    listing = theow("failures", "list", home=recorded)
    assert listing.returncode == 0, listing.stderr
    assert "b52e07d4-1111-4000-8000-000000000003" in listing.stdout
    shown = theow("failures", "show", "b52e07", home=recorded)
    assert shown.returncode == 0, shown.stderr
    assert "failure b52e07d4-1111-4000-8000-000000000003" in shown.stdout


def test_failures_list_shows_live_failures_unless_asked_for_replayed_ones(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    url = f"sqlite:///{home / 'theow.db'}"
    migrate(url)
    store = SqlStore(url)
    for failure_id, source in (("agent-1", "theow-client"), ("demo-1", "theow-demo"),
                               ("old-1", "replay:job-7"), ("old-2", "replay:job-7")):  # fmt: skip
        facts = {"stderr": "boom"}
        store.add_failure(FailureRecord(failure_id, "fp", facts, None, source, datetime.now(UTC)))
    store.dispose()

    def ids(*options: str) -> list[str]:
        listed = theow("failures", "list", "--json", *options, home=home)
        assert listed.returncode == 0, listed.stderr
        return sorted(row["id"] for row in json.loads(listed.stdout))

    assert ids() == ["agent-1", "demo-1"]
    assert ids("--source", "replay") == ["old-1", "old-2"]
    assert ids("--source", "all") == ["agent-1", "demo-1", "old-1", "old-2"]
    table = theow("failures", "list", home=home).stdout
    assert "theow-client" in table and "replay:job-7" not in table and "2 live failure(s)" in table
    wrong = theow("failures", "list", "--source", "everything", home=home)
    assert wrong.returncode == 2
    assert wrong.stderr.strip().splitlines() == [
        "error: source 'everything': use live, replay, demo, all"
    ]


def test_an_ambiguous_or_unknown_id_prefix_is_a_clear_error(recorded: Path) -> None:
    ambiguous = theow("failures", "show", "7f3a", home=recorded)
    assert ambiguous.returncode == 1
    assert "failure id '7f3a' is ambiguous" in ambiguous.stderr
    assert "7f3a9c1e-0000-4000-8000-000000000001" in ambiguous.stderr
    unknown = theow("failures", "show", "0000", home=recorded)
    assert unknown.returncode == 1
    assert "no failure '0000'" in unknown.stderr


def test_rules_list_piped_keeps_whole_names_and_descriptions() -> None:
    result = theow("rules", "list")
    assert result.returncode == 0, result.stderr
    description = " ".join(
        json.loads(theow("rules", "list", "--json").stdout)[0]["description"].split()
    )
    assert description in result.stdout


def test_an_unreachable_service_is_one_line_and_exit_1_not_a_traceback(tmp_path: Path) -> None:
    result = theow("rules", "sync", home=tmp_path, THEOW_REDIS_URL="redis://127.0.0.1:1/0")
    assert result.returncode == 1
    assert result.stderr.startswith("error: a service is unreachable: ConnectionError: ")
    assert len(result.stderr.splitlines()) == 1, result.stderr


def test_a_mistyped_option_piped_is_plain_lines_without_box_drawing() -> None:
    result = theow("replay", "--learn", "x")
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith("Error: No such option: --learn")
    assert not any("\u2500" <= char <= "\u257f" for char in result.stderr), result.stderr
    assert result.stdout == ""


def test_failures_show_tells_which_lines_to_look_at_for_an_unmatched_failure(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    url = f"sqlite:///{home / 'theow.db'}"
    migrate(url)
    store = SqlStore(url)
    facts = {"log": "collecting\nTraceback (most recent call last):\nKeyError: 'DATABASE_URL'\n"}
    store.add_failure(FailureRecord("u-1", "fp", facts, None, "test", datetime.now(UTC)))
    where = (
        Where("log", 399_990, "KeyError: 'DATABASE_URL'"),
        Where("log", 399_989, "Traceback (most recent call last):"),
    )
    store.add_verdict(Verdict("u-1", Status.UNMATCHED, reason="no rule matched", where=where))
    store.dispose()

    shown = theow("failures", "show", "u-1", home=home)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    at = lines.index("look at: log line 399,990: KeyError: 'DATABASE_URL'")
    assert lines[at + 1] == "         log line 399,989: Traceback (most recent call last):"
    as_json = json.loads(theow("failures", "show", "u-1", "--json", home=home).stdout)
    assert as_json["verdict"]["where"][0] == {
        "fact": "log", "line": 399_990, "text": "KeyError: 'DATABASE_URL'"
    }  # fmt: skip
