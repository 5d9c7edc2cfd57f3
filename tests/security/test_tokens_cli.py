"""`theow tokens`: a mistake is one line, and a token made is never lost."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]


def theow(home: Path, *args: str, redis_port: int) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.update(
        THEOW_HOME=str(home), THEOW_DATABASE_URL="", PYTHONPATH=str(ROOT),
        THEOW_REDIS_URL=f"redis://127.0.0.1:{redis_port}/0", COLUMNS="1000",
    )  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", "tokens", *args],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_an_agent_token_made_where_no_broker_answers_is_kept_and_says_how_to_make_its_user(
    tmp_path: Path,
) -> None:
    closed = free_port()  # no broker listens: the agent's broker user cannot be created now
    done = theow(tmp_path / "home", "add", "ci-runner-7", redis_port=closed)
    assert done.returncode == 0, done.stderr
    token = done.stdout.strip().splitlines()[-1]
    assert token.startswith("tw1.ci-runner-7.") and "Traceback" not in done.stderr
    warning, command = done.stderr.strip().splitlines()[-2:]
    assert warning.startswith("warning: token ci-runner-7 kept, without its broker user")
    assert "theow tokens sync" in warning
    assert "ACL SETUSER agent-ci-runner-7 " in command and token not in command
    listed = theow(tmp_path / "home", "list", "--json", redis_port=closed)
    assert listed.returncode == 0 and '"ci-runner-7"' in listed.stdout, listed.stdout


def test_a_revoked_name_is_refused_with_the_reason_not_a_hint_to_revoke_it(
    tmp_path: Path,
) -> None:
    closed = free_port()
    home = tmp_path / "home"
    assert theow(home, "add", "reader", "--scope", "api-read", redis_port=closed).returncode == 0
    assert theow(home, "revoke", "reader", redis_port=closed).returncode == 0
    again = theow(home, "add", "reader", "--scope", "api-read", redis_port=closed)
    assert again.returncode == 2
    assert "was revoked, and a name is never reused" in again.stderr


def test_the_hook_agents_names_are_refused_in_one_line(tmp_path: Path) -> None:
    closed = free_port()
    home = tmp_path / "home"
    for name in ("github-hooks", "gitlab-hooks"):
        refused = theow(home, "add", name, "--scope", "api-read", redis_port=closed)
        assert refused.returncode == 2 and "tw1." not in refused.stdout + refused.stderr
        (line,) = refused.stderr.strip().splitlines()
        assert "reserved" in line and name in line
    listed = theow(home, "list", "--json", redis_port=closed)
    assert listed.returncode == 0 and listed.stdout.strip() == "[]", listed.stdout
