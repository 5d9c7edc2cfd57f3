"""`theow-client run` sends what the command printed on stdout too: a `go test`
failure, which Go prints on stdout, is matched end to end by a real worker."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sqlalchemy import select

from theow_client.cli import main
from theow_workers.store.schema import FailureRow, VerdictRow

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

GO_TEST = r"""
echo '=== RUN   TestParseDuration'
echo '    duration_test.go:41: ParseDuration("90m") = 1h0m0s, want 1h30m0s'
echo '--- FAIL: TestParseDuration (0.00s)'
echo 'FAIL'
echo 'FAIL	example.com/timeutil	0.004s'
sleep 0.3
echo 'go: downloading example.com/other v1.2.0' >&2
exit 1
"""


def test_a_go_test_failure_printed_on_stdout_is_matched_with_its_evidence(fleet, capsys):
    shutil.copy(ROOT / "rules" / "go_test_failures.rule.yaml", fleet.settings.rules_dir)
    fleet.start_worker()

    code = main(["run", "--wait", "--wait-timeout", "60", "--json", "--", "sh", "-c", GO_TEST])

    assert code == 1  # the command's own exit code
    captured = capsys.readouterr()
    (verdict,) = [json.loads(line) for line in captured.err.splitlines() if line.startswith("{")]
    assert (verdict["status"], verdict["rule"]) == ("tracked", "go_test_failures")
    assert verdict["evidence"]["text"] == "--- FAIL: TestParseDuration (0.00s)"
    assert verdict["evidence"]["line"] == 3
    with fleet.store().session() as s:
        (failure,) = s.execute(select(FailureRow)).scalars()
        stored = s.get(VerdictRow, failure.id)
    # stdout and stderr interleaved in one `log`, stderr alone for library-spec rules.
    assert failure.facts["log"].splitlines()[2] == "--- FAIL: TestParseDuration (0.00s)"
    assert failure.facts["stderr"] == "go: downloading example.com/other v1.2.0\n"
    assert stored.evidence["line"] == 3
