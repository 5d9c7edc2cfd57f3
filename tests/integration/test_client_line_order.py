"""`theow-client run`: "log line N" is the line the command wrote Nth, whichever stream it used.

Given a build step that writes to stdout and stderr in turn (back to back, with
pauses, thousands of lines, again and again, while a sibling process keeps
a core busy), when it runs under the real `theow-client run`, I expect the
output on the terminal and the `log` Theow keeps to be exactly the program's
order, and every line number the verdict prints to point at the line with that
text.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CLIENT = Path(sys.executable).parent / "theow-client"
RUNS = 5

# Writes `lines` numbered lines, switching stream every `switch` lines, with a
# pause of `pause` seconds after every `every` lines (0: none).
WRITER = """
import os, sys, time
lines, switch, pause, every = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
for n in range(1, lines + 1):
    os.write(1 if (n - 1) // switch % 2 == 0 else 2, b"line %d\\n" % n)
    if every and n % every == 0:
        time.sleep(pause)
sys.exit(1)
"""


@pytest.fixture
def busy_sibling() -> Iterator[None]:
    """A process spinning on a core while the test runs, as a build's other jobs do."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()


def offline_run(tmp_path: Path, *command: str) -> tuple[str, str, dict]:
    """`theow-client run -- COMMAND` with no broker: its stdout, stderr and the spooled facts."""
    spool = tmp_path / "spool"
    shutil.rmtree(spool, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("THEOW_")}
    env.update(
        THEOW_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0",  # nothing listens: it spools
        THEOW_SPOOL_DIR=str(spool),
        THEOW_HOME=str(tmp_path / "home"),
        THEOW_CLIENT_ENV=str(tmp_path / "client.env"),
    )
    done = subprocess.run(
        [str(CLIENT), "run", "--no-passing", "--", *command],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    (spooled,) = spool.glob("*.json")
    facts = json.loads(json.loads(spooled.read_text())["facts_json"])
    return done.stdout, done.stderr, facts


@pytest.mark.parametrize(
    ("lines", "switch", "pause", "every"),
    [
        (3000, 1, 0.0, 0),  # every line on the other stream, back to back
        (3000, 3, 0.0, 0),  # three lines of one, three of the other
        (400, 1, 0.001, 7),  # with short pauses now and then
    ],
    ids=["alternating", "in-threes", "with-pauses"],
)
def test_the_log_is_the_programs_order_on_a_busy_machine(
    tmp_path, busy_sibling, lines, switch, pause, every
):
    written = [f"line {n}" for n in range(1, lines + 1)]
    for _ in range(RUNS):
        out, err, facts = offline_run(
            tmp_path, sys.executable, "-c", WRITER, str(lines), str(switch), str(pause), str(every)
        )
        assert out.splitlines() == written  # the terminal: both streams, on stdout, in order
        assert facts["log"].splitlines() == written
        assert "line 2" not in err  # the client's stderr carries its own lines only


def test_echo_to_both_streams_in_a_shell_keeps_its_order(tmp_path, busy_sibling):
    for _ in range(RUNS):
        out, _, facts = offline_run(tmp_path, "sh", "-c", "echo l1; echo l2 >&2; echo l3; exit 1")
        assert out == facts["log"] == "l1\nl2\nl3\n"
        assert "stderr" not in facts  # one pipe: rules on `stderr` read the log


# A `go test` run whose module downloads (stderr) and test lines (stdout)
# interleave; the failing test is the 163rd line written, on stdout, right after
# a download on stderr.
GO_TEST = """
import os, sys
for n in range(80):
    os.write(2, b"go: downloading example.com/m%d v1.0.0\\n" % n)
    os.write(1, b"=== RUN   TestStep%d\\n" % n)
os.write(1, b"    duration_test.go:41: ParseDuration(\\"90m\\") = 1h0m0s, want 1h30m0s\\n")
os.write(2, b"go: downloading example.com/last v1.0.0\\n")
os.write(1, b"--- FAIL: TestParseDuration (0.00s)\\n")
os.write(2, b"go: downloading example.com/after v1.0.0\\n")
os.write(1, b"FAIL\\n")
sys.exit(1)
"""
FAIL_LINE = 163


def test_the_verdicts_line_numbers_point_at_the_lines_the_command_wrote(fleet, tmp_path):
    shutil.copy(ROOT / "rules" / "go_test_failures.rule.yaml", fleet.settings.rules_dir)
    fleet.start_worker()

    for _ in range(2):
        done = subprocess.run(
            [str(CLIENT), "run", "--no-passing", "--wait-timeout", "60", "--",
             sys.executable, "-c", GO_TEST],
            cwd=tmp_path, capture_output=True, text=True, timeout=180,
        )  # fmt: skip
        assert done.returncode == 1, done.stderr
        printed = done.stdout.splitlines()
        assert printed[FAIL_LINE - 1] == "--- FAIL: TestParseDuration (0.00s)"
        assert f"theow: line:    log:{FAIL_LINE}: --- FAIL: TestParseDuration (0.00s)" in (
            done.stderr.splitlines()
        ), done.stderr + fleet.worker_log()[-3000:]
        pointed = re.findall(r"log line ([\d,]+): (.*)", done.stderr)
        assert pointed, done.stderr
        for number, text in pointed:  # every line to look at is the line with that number
            assert printed[int(number.replace(",", "")) - 1].strip() == text.strip()
