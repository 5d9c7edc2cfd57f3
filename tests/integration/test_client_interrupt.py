"""Ctrl-C or SIGTERM on `theow-client run`: the command answers it, the client reports and exits with its status.

Given a build step wrapped in `theow-client run`, when the client is sent SIGINT
(a cancelled job, `kill -INT`) or SIGTERM while the command runs, I expect the
command to get the signal, the client to print no traceback, to keep the failed
run (here spooled: no broker listens) and to exit with the command's own status.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.integration

# Answers SIGINT with its own status, 5; dies of SIGTERM as most programs do.
COMMAND = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGINT, lambda *_: sys.exit(5))\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


def interrupted_run(tmp_path: Path, signum: int) -> tuple[int, str, list[Path]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THEOW_")}
    env.update(
        THEOW_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0",  # nothing listens: it spools
        THEOW_SPOOL_DIR=str(tmp_path / "spool"),
        THEOW_HOME=str(tmp_path / "home"),
        THEOW_CLIENT_ENV=str(tmp_path / "client.env"),
    )
    client = Path(sys.executable).parent / "theow-client"
    proc = subprocess.Popen(
        [str(client), "run", "--", sys.executable, "-c", COMMAND],
        env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # as `kill` from elsewhere: no terminal signals the group
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=120)
    spooled = sorted(p for p in (tmp_path / "spool").rglob("*") if p.is_file())
    return proc.returncode, stderr, spooled


def test_ctrl_c_is_the_commands_to_answer_and_the_client_exits_with_its_status(tmp_path):
    code, stderr, spooled = interrupted_run(tmp_path, signal.SIGINT)
    assert code == 5, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert len(spooled) == 1, stderr  # the failed run is kept


def test_sigterm_ends_the_command_and_the_client_exits_as_a_shell_would(tmp_path):
    code, stderr, spooled = interrupted_run(tmp_path, signal.SIGTERM)
    assert code == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr, stderr
    assert len(spooled) == 1, stderr
