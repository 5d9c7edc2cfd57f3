"""`theow up`'s supervisor, on real child processes and a clock the test moves.

The whole stack under it is tests/integration/test_up_supervise.py; here each
rule of the back-off is one sentence.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from theow_workers.ops.restarts import restart_findings
from theow_workers.stack import StackError
from theow_workers.stack.supervisor import Child, Supervisor, exit_reason, read_status


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Lines:
    def __init__(self) -> None:
        self.said: list[tuple[str, bool]] = []

    def __call__(self, line: str, loud: bool) -> None:
        self.said.append((line, loud))

    def last(self) -> str:
        return self.said[-1][0]


def exiting(code: int) -> subprocess.Popen[bytes]:
    """A child that has already exited with ``code``."""
    proc = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])
    proc.wait()
    return proc


def running() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


@pytest.fixture
def children():
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def test_an_exit_is_one_line_and_the_child_starts_again_after_the_delay(tmp_path):
    clock, lines = Clock(), Lines()
    child = Child("worker resolver", lambda: exiting(3), while_down="resolve waits")
    child.proc = exiting(3)
    supervisor = Supervisor([child], tmp_path, lines, clock)
    supervisor.tick()
    pid = child.proc.pid
    line = f"worker resolver (pid {pid}) exited with code 3 (resolve waits); restart 1 in 0.5 s"
    assert lines.said == [(line, False)]
    clock.now += 0.4
    supervisor.tick()
    assert len(lines.said) == 1  # not before its time
    clock.now += 0.1
    supervisor.tick()
    assert lines.last() == f"worker resolver started again (pid {child.proc.pid}, restart 1)"
    status = read_status(tmp_path)
    assert status is not None
    (shown,) = status.children
    assert (shown.restarts, shown.last_exit, shown.crash_loop) == (1, "exited with code 3", False)


def test_the_delay_doubles_to_30_s_and_five_restarts_in_five_minutes_is_a_loud_crash_loop(
    tmp_path,
):
    clock, lines = Clock(), Lines()
    child = Child("worker replay", lambda: exiting(1), log=tmp_path / "worker-replay.log")
    child.proc = exiting(1)
    supervisor = Supervisor([child], tmp_path, lines, clock)
    delays = []
    for _ in range(8):
        supervisor.tick()  # it exited
        delays.append(child.due - clock.now)
        clock.now = child.due
        supervisor.tick()  # started again, and exits at once
    assert delays == [0.5, 1, 2, 4, 8, 16, 30, 30]
    loud = [line for line, is_loud in lines.said if is_loud]
    assert loud == [
        f"worker replay is crash-looping: 5 restarts in 300 s; still restarting it, "
        f"up to 30 s apart; its log: {tmp_path / 'worker-replay.log'}"
    ]
    ((check, status, detail, fix),) = restart_findings(tmp_path)
    assert (check, status) == ("restarts.replay", "fail")
    assert "worker replay is crash-looping" in detail and "8 since" in detail
    assert fix == f"its log: {tmp_path / 'worker-replay.log'}"


def test_a_child_that_stays_up_a_minute_starts_the_back_off_over(tmp_path, children):
    clock, lines = Clock(), Lines()

    def start() -> subprocess.Popen[bytes]:
        children.append(running())
        return children[-1]

    child = Child("web", start)
    child.proc = exiting(0)
    supervisor = Supervisor([child], tmp_path, lines, clock)
    supervisor.tick()
    clock.now = child.due
    supervisor.tick()
    assert child.delay == 1  # had it exited now, 1 s
    clock.now += 60
    supervisor.tick()
    assert child.delay == 0.5
    assert lines.last().startswith("web started again")


def test_a_start_that_fails_is_said_loudly_and_tried_again_later(tmp_path):
    clock, lines = Clock(), Lines()
    attempts = []

    def start() -> subprocess.Popen[bytes]:
        attempts.append(clock.now)
        if len(attempts) == 1:
            raise StackError("valkey did not listen on 127.0.0.1:6479 within 15s")
        return exiting(0)

    child = Child("valkey", start, while_down="the broker is down")
    child.proc = exiting(1)
    supervisor = Supervisor([child], tmp_path, lines, clock)
    supervisor.tick()
    clock.now = child.due
    supervisor.tick()
    assert lines.said[-1] == (
        "valkey did not start: valkey did not listen on 127.0.0.1:6479 within 15s; next try in 1 s",
        True,
    )
    clock.now = child.due
    supervisor.tick()
    assert len(attempts) == 2 and lines.last().startswith("valkey started again")


def test_exit_reasons_name_the_signal_or_the_code():
    assert exit_reason(-9) == "killed by SIGKILL"
    assert exit_reason(-15) == "killed by SIGTERM"
    assert exit_reason(0) == "exited with code 0"
    assert exit_reason(2) == "exited with code 2"


def test_doctor_says_nothing_ran_or_it_stopped_and_ok_when_nothing_restarted(tmp_path, children):
    assert restart_findings(tmp_path)[0][:2] == ("restarts", "skip")
    proc = running()
    children.append(proc)
    Supervisor([Child("web", running, proc=proc)], tmp_path, Lines())
    ((check, status, detail, _),) = restart_findings(tmp_path)
    assert (check, status) == ("restarts", "ok") and "has restarted nothing" in detail
    written = json.loads((tmp_path / "restarts.json").read_text())
    written["pid"] = exiting(0).pid  # a `theow up` that has gone
    (tmp_path / "restarts.json").write_text(json.dumps(written))
    ((check, status, detail, _),) = restart_findings(tmp_path)
    assert (check, status) == ("restarts", "skip") and "has stopped" in detail
    (tmp_path / "restarts.json").write_text("{")
    ((check, status, detail, _),) = restart_findings(tmp_path)
    assert (check, status) == ("restarts", "warn") and "restarts.json is unreadable" in detail


def test_a_status_file_that_cannot_be_written_is_said_once_and_supervision_goes_on(tmp_path):
    clock, lines = Clock(), Lines()
    home = tmp_path / "not-a-directory"
    home.write_text("")
    child = Child("worker resolver", lambda: exiting(0), proc=exiting(1))
    supervisor = Supervisor([child], home, lines, clock)
    supervisor.tick()
    clock.now = child.due
    supervisor.tick()
    assert lines.last().startswith("worker resolver started again")
    unwritable = [line for line, loud in lines.said if loud]
    assert len(unwritable) == 1 and unwritable[0].startswith(f"cannot write {home}/restarts.json")
