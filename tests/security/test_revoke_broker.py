"""Revoking an agent's token closes its broker door at once, and its queued messages too.

``theow tokens revoke`` is run as an operator runs it, against the embedded
Valkey with the agent ACL profile; the task edge is tried on real workers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import redis

from theow_client import Status, names
from theow_workers.ops.acl import agent_url
from theow_workers.stack import EmbeddedStack

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
JOB = "run-81/build"


def theow(stack: EmbeddedStack, *args: str) -> subprocess.CompletedProcess[str]:
    """``theow tokens ...`` beside the embedded stack (its THEOW_HOME holds the broker password)."""
    host, port = stack.valkey_address
    env = dict(os.environ)
    env.update(
        THEOW_HOME=str(stack.settings.home), THEOW_DATABASE_URL="", PYTHONPATH=str(ROOT),
        THEOW_REDIS_URL=f"redis://{host}:{port}/0", COLUMNS="1000",
    )  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", "tokens", *args],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def agent_login(stack: EmbeddedStack, name: str, token: str) -> Any:
    return redis.Redis.from_url(agent_url(stack.settings.redis_url, name, token))


def test_revoking_an_agent_closes_its_open_connection_and_refuses_a_new_login(embedded_valkey):
    made = theow(embedded_valkey, "add", "ci-c")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip().splitlines()[-1]
    agent = agent_login(embedded_valkey, "ci-c", token)
    assert agent.ping()
    # A client awaiting its verdict: blocked for 30 s unless its connection is closed.
    waited: list[object] = []

    def await_verdict() -> None:
        try:
            waited.append(agent.blpop([names.verdict_key("ci-c", "f-1")], timeout=30))
        except redis.exceptions.ConnectionError as exc:
            waited.append(exc)

    waiting = threading.Thread(target=await_verdict)
    waiting.start()

    revoked = theow(embedded_valkey, "revoke", "ci-c")

    assert revoked.returncode == 0, revoked.stderr
    assert "broker user is logged out and deleted" in revoked.stdout
    waiting.join(timeout=60)
    (ended,) = waited
    assert isinstance(ended, redis.exceptions.ConnectionError)  # closed, not timed out
    with pytest.raises(redis.exceptions.AuthenticationError):
        agent_login(embedded_valkey, "ci-c", token).ping()
    admin = redis.Redis.from_url(embedded_valkey.settings.redis_url)
    assert b"agent-ci-c" not in admin.acl_users()


def test_a_revoke_the_broker_cannot_hear_says_so_in_one_line(tmp_path):
    from tests.conftest import free_port
    from tests.security.test_tokens_cli import theow as theow_at

    home, closed = tmp_path / "home", free_port()
    # An agent token made where no broker answered leaves no token; made by the store here.
    from theow_workers.store.tokens import TokenStore

    store = TokenStore.at(f"sqlite:///{(home / 'theow.db').resolve()}")
    store.add("ci-d", "agent")
    store.close()

    revoked = theow_at(home, "revoke", "ci-d", redis_port=closed)

    assert revoked.returncode == 1 and "Traceback" not in revoked.stderr
    (line,) = revoked.stderr.strip().splitlines()
    assert line.startswith(
        "error: token ci-d revoked, but cannot revoke the broker user agent-ci-d"
    )
    assert "ACL DELUSER agent-ci-d" in line
    listed = theow_at(home, "list", "--json", redis_port=closed)
    assert '"revoked_at": null' not in listed.stdout  # revoked in the store all the same


def test_an_agent_may_not_select_another_database(embedded_valkey):
    made = theow(embedded_valkey, "add", "ci-e")
    token = made.stdout.strip().splitlines()[-1]
    agent = agent_login(embedded_valkey, "ci-e", token)

    assert agent.execute_command("SELECT", 0)
    with pytest.raises(redis.exceptions.NoPermissionError):
        agent.execute_command("SELECT", 1)
    agent.lpush(names.QUEUE_RESOLVE, "still the fleet's database")
    admin = redis.Redis.from_url(embedded_valkey.settings.redis_url)
    assert admin.llen(names.QUEUE_RESOLVE) == 1
    assert admin.execute_command("SELECT", 1) and admin.dbsize() == 0  # nothing pushed there


def test_a_revoked_tokens_messages_are_refused_by_a_worker_that_just_trusted_it(fleet):
    """A worker caches what it read of a token: the revocation must still hold at once.

    The second message stands for one queued before the revocation: on a broker
    with the ACL profile a revoked agent cannot push at all.
    """
    fleet.start_worker()
    agent = fleet.agent("ci-f")
    before = agent.submit({"stderr": "missing file app.cfg", "job": JOB}).wait(60)
    assert before.status == Status.SUGGESTED  # the worker has read the token

    from theow_workers.ops.acl import revoke_agent_user
    from theow_workers.store.tokens import TokenStore, revocation

    store = TokenStore.at(fleet.settings.store_url)
    known = store.revoke("ci-f")
    revoke_agent_user(fleet.settings, "ci-f", revocation("ci-f", known.key))
    store.close()
    after = agent.submit({"stderr": "missing file other.cfg", "job": JOB}).wait(60)

    assert after.status == Status.REJECTED
    assert after.reason == "refused: token 'ci-f' was revoked"


def test_a_message_queued_before_the_revocation_is_refused(fleet):
    agent = fleet.agent("ci-g")
    queued = agent.submit({"stderr": "missing file app.cfg", "job": JOB})  # no worker yet
    from theow_workers.store.tokens import TokenStore

    store = TokenStore.at(fleet.settings.store_url)
    store.revoke("ci-g")
    store.close()
    fleet.start_worker()

    verdict = queued.wait(60)

    assert verdict.status == Status.REJECTED
    assert verdict.reason == "refused: token 'ci-g' was revoked"


def test_broker_sync_gives_an_older_profile_s_user_today_s_and_keeps_its_login(embedded_valkey):
    made = theow(embedded_valkey, "add", "ci-h")
    token = made.stdout.strip().splitlines()[-1]
    admin = redis.Redis.from_url(embedded_valkey.settings.redis_url)
    # What an earlier profile allowed: SET on every agent's samples, SELECT of any database.
    admin.execute_command(
        "ACL", "SETUSER", "agent-ci-h", "+select", "(%W~theow:passing:sample:* +set)"
    )
    agent = agent_login(embedded_valkey, "ci-h", token)
    assert agent.set("theow:passing:sample:other/job", "1")

    synced = theow(embedded_valkey, "broker-sync")

    assert synced.returncode == 0, synced.stderr
    assert "1 broker user(s) given the current profile: ci-h" in synced.stdout
    agent = agent_login(embedded_valkey, "ci-h", token)  # its token still logs in
    for attempt in (
        lambda: agent.set("theow:passing:sample:other/job", "1"),
        lambda: agent.execute_command("SELECT", 1),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            attempt()
    assert agent.lpush(names.QUEUE_RESOLVE, "a failure") == 1
