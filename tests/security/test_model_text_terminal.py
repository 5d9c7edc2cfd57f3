"""A terminal prints nothing from a model or a log with its escape sequences.

``ESC]52;c;…`` would write the reviewer's clipboard, ``ESC[2J`` clear the
screen, a carriage return hide a line behind another; a C1 ``CSI`` (U+009B)
acts as ``ESC[`` on some terminals.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from tests.conftest import prepared_database
from theow_client.verdict import Verdict
from theow_client.verdict_text import format_exploration, format_verdict
from theow_workers.core.ports import Exploration, FailureRecord
from theow_workers.store.explore import ExploreStore
from theow_workers.store.results import SqlStore

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07"
HOSTILE = f"{CLIPBOARD}\x1b[2Jerror: it broke\rall fine\x9b31m\x1bP+q\x1b\\ here"
CONTROLS = ("\x1b", "\x07", "\x9b", "\r", "\x90")


def assert_printable(shown: str) -> None:
    for control in CONTROLS:
        assert control not in shown, f"{control!r} reaches the terminal"


def test_theow_client_prints_a_verdict_and_an_exploration_from_hostile_text_without_escapes():
    verdict = Verdict.from_dict({
        "failure_id": "f-1", "status": "tracked", "rule": "hostile", "mode": "track",
        "evidence": {"fact": "log", "line": 3, "text": HOSTILE},
        "captures": {"test": HOSTILE}, "reason": HOSTILE,
    })  # fmt: skip
    shown = format_verdict(verdict) + format_exploration({"outcome": "gave_up", "reason": HOSTILE})
    assert_printable(shown)
    assert "error: it broke" in shown and "all fine" in shown  # the text itself is kept
    assert "line:    log:3: error: it broke" in shown


def test_theow_review_show_prints_a_proposal_and_its_log_without_escapes(tmp_path):
    url = prepared_database("sqlite", tmp_path)
    sql = SqlStore(url)
    facts = {"stderr": f"step 1\nerror: {HOSTILE}\n"}
    now = datetime.now(UTC)
    sql.record_failure(FailureRecord("f-1", "fp-1", facts, None, "test", now))
    exploration = Exploration("f-1", "fp-1", "proposal", reason=HOSTILE, proposal_id="p-1")
    rule_yaml = f"name: hostile\n# {HOSTILE}\nwhen: [{{fact: stderr, contains: error}}]\n"
    ExploreStore(sql).add_exploration(exploration, {
        "id": "p-1", "rule_name": "hostile", "rule_yaml": rule_yaml, "status": "pending",
        "diffs": [{"path": "actions/x.py", "diff": f"+# {HOSTILE}\n", "base_sha256": ""}],
    })  # fmt: skip
    sql.engine.dispose()
    env = {**os.environ, "THEOW_DATABASE_URL": url, "THEOW_HOME": str(tmp_path / "home"),
           "THEOW_RULES_DIR": str(FIXTURES / "rules"), "THEOW_ACTIONS_DIR": str(FIXTURES / "actions"),
           "COLUMNS": "200"}  # fmt: skip
    for command in (["review", "show", "p-1"], ["failures", "show", "f-1"]):
        shown = subprocess.run(
            [sys.executable, "-m", "theow_workers.cli", *command],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        assert "error: it broke" in shown.stdout
        assert_printable(shown.stdout)
