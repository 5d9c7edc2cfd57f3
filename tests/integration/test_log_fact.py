"""`theow-client run` sends what the command printed on stdout too: a `go test`
failure, which Go prints on stdout, is matched end to end by a real worker.
(Line order across many runs and under load: ``test_client_line_order.py``.)"""

from __future__ import annotations

import json
import shutil
import sys
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
    # stdout and stderr in one `log`, as written (one pipe: no `stderr` of its own).
    assert failure.facts["log"].splitlines()[2] == "--- FAIL: TestParseDuration (0.00s)"
    assert failure.facts["log"].splitlines()[-1] == "go: downloading example.com/other v1.2.0"
    assert "stderr" not in failure.facts
    assert stored.evidence["line"] == 3


# A `go test` that downloads modules (stderr) while its tests run (stdout), with
# stderr on a pipe of its own: each pair written back to back, then it waits until
# the client has read both pipes, the most a client outside the command can know
# of their order.
INTERLEAVED = r"""
import array, fcntl, os, termios, time

def taken(*fds):
    for fd in fds:
        left = array.array("i", [0])
        while fcntl.ioctl(fd, termios.FIONREAD, left) == 0 and left[0]:
            time.sleep(0.0002)

for n in range(60):
    first, second = (1, 2) if n % 2 else (2, 1)
    lines = {1: b"=== RUN   TestStep%d\n" % n, 2: b"go: downloading example.com/m%d v1.0.0\n" % n}
    os.write(first, lines[first])
    os.write(second, lines[second])
    taken(1, 2)
os.write(2, b"go: downloading example.com/last v1.0.0\n")
os.write(1, b"--- FAIL: TestParseDuration (0.00s)\n")
taken(1, 2)
os.write(1, b"FAIL\n")
raise SystemExit(1)
"""


def test_with_separate_stderr_the_evidence_line_counts_in_the_order_the_client_saw(fleet, capsys):
    shutil.copy(ROOT / "rules" / "go_test_failures.rule.yaml", fleet.settings.rules_dir)
    fleet.start_worker()

    command = ["run", "--separate-stderr", "--wait", "--wait-timeout", "60", "--json", "--"]
    command += [sys.executable, "-c"]
    code = main([*command, INTERLEAVED])

    assert code == 1
    (verdict,) = [
        json.loads(line) for line in capsys.readouterr().err.splitlines() if line[:1] == "{"
    ]
    assert verdict["rule"] == "go_test_failures"
    # 60 pairs, the last download, then the failing test: the 122nd line written.
    assert verdict["evidence"]["line"] == 122
    with fleet.store().session() as s:
        (failure,) = s.execute(select(FailureRow)).scalars()
    log = failure.facts["log"].splitlines()
    assert log[121] == "--- FAIL: TestParseDuration (0.00s)"
    assert log[:4] == [
        "go: downloading example.com/m0 v1.0.0",
        "=== RUN   TestStep0",
        "=== RUN   TestStep1",
        "go: downloading example.com/m1 v1.0.0",
    ]
    # stderr stays a fact of its own, for rules written to the library spec.
    assert failure.facts["stderr"].splitlines() == [
        *(f"go: downloading example.com/m{n} v1.0.0" for n in range(60)),
        "go: downloading example.com/last v1.0.0",
    ]
