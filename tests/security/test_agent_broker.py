"""An agent's broker user may push a failure and read its own verdict, and nothing else.

Each attack an agent's build could make with the broker credentials it holds,
tried against the embedded Valkey with the agent profile of
``theow_workers.ops.acl``: each is refused by the broker.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from theow_client import config, names
from theow_client.passing import report_passing
from theow_workers.ops.acl import agent_url, create_agent_user, delete_agent_user
from theow_workers.stack import EmbeddedStack

pytestmark = pytest.mark.integration

AGENT, OTHER = "ci-7", "ci-8"
TOKEN, OTHER_TOKEN = "tw1.ci-7.first-agents-secret", "tw1.ci-8.second-agents-secret"
# What kombu and Celery raise carries the broker's refusal.
NOPERM = r"(?i)no permissions|NOPERM"


@pytest.fixture
def admin(embedded_valkey: EmbeddedStack) -> Iterator[Any]:
    settings = embedded_valkey.settings
    create_agent_user(settings, AGENT, TOKEN)
    create_agent_user(settings, OTHER, OTHER_TOKEN)
    client = redis.Redis.from_url(settings.redis_url)
    yield client
    client.close()


@pytest.fixture
def agent(embedded_valkey: EmbeddedStack, admin: Any) -> Iterator[Any]:
    client = redis.Redis.from_url(agent_url(embedded_valkey.settings.redis_url, AGENT, TOKEN))
    yield client
    client.close()


@pytest.fixture
def agent_app(embedded_valkey: EmbeddedStack, admin: Any) -> Iterator[Any]:
    """The client's own Celery app, on the agent's credentials."""
    app = config.celery_app(agent_url(embedded_valkey.settings.redis_url, AGENT, TOKEN))
    yield app
    app.close()


class _Client:
    """What ``report_passing`` needs of a TheowClient: its app, agent, ``signed`` and ``close``."""

    agent = AGENT
    intake_url = None  # through the broker, not the HTTP intake

    def __init__(self, app: Any) -> None:
        self.app = app

    def signed(self, task: str, payload: dict[str, Any]) -> dict[str, Any]:
        return payload  # what the broker lets through is the point here, not the signature

    def close(self) -> None:
        pass


def queued(admin: Any, queue: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in admin.lrange(queue, 0, -1)]


def test_an_agent_submits_failures_outcomes_and_passing_runs(agent_app, admin):
    agent_app.send_task(names.TASK_RESOLVE, args=[{"job": "j"}], ignore_result=True)
    agent_app.send_task(names.TASK_CLIENT_OUTCOME, args=[{}], ignore_result=True)
    assert report_passing(_Client(agent_app), {"stdout": "ok"}, job="build")
    assert [m["headers"]["task"] for m in queued(admin, names.QUEUE_RESOLVE)] == [
        names.TASK_CLIENT_OUTCOME,
        names.TASK_RESOLVE,
    ]
    assert [m["headers"]["task"] for m in queued(admin, names.QUEUE_PASSING)] == [
        names.TASK_PASSING
    ]
    assert not admin.keys("_kombu.binding.*")  # the client declared nothing


def test_an_agent_reads_its_own_verdicts_and_no_other_agents(agent, admin):
    admin.set(names.KEY_PREFIX + f"verdict:{AGENT}:f-1", "mine")
    admin.rpush(names.KEY_PREFIX + f"verdict:{AGENT}:f-2", "mine too")
    admin.set(names.KEY_PREFIX + f"verdict:{OTHER}:f-3", "theirs")
    assert agent.get(names.KEY_PREFIX + f"verdict:{AGENT}:f-1") == b"mine"
    assert agent.blpop([names.KEY_PREFIX + f"verdict:{AGENT}:f-2"], timeout=1)[1] == b"mine too"
    # The wake-up a worker pushes as it sets a verdict: the agent's own, awaited.
    admin.rpush(names.verdict_ready_key(AGENT, "f-1"), 1)
    assert agent.blpop([names.verdict_ready_key(AGENT, "f-1")], timeout=1) is not None
    for attempt in (
        lambda: agent.blpop([names.verdict_ready_key(OTHER, "f-3")], timeout=0.01),
        lambda: agent.get(names.KEY_PREFIX + f"verdict:{OTHER}:f-3"),
        lambda: agent.set(names.KEY_PREFIX + f"verdict:{OTHER}:f-3", "forged"),
        lambda: agent.get("celery-task-meta-f-3"),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            attempt()
    assert admin.get(names.KEY_PREFIX + f"verdict:{OTHER}:f-3") == b"theirs"


def test_an_agent_cannot_shut_down_or_cancel_the_workers(agent_app, admin):
    for attempt in (
        lambda: agent_app.control.broadcast("shutdown"),
        lambda: agent_app.control.cancel_consumer(names.QUEUE_RESOLVE),
    ):
        with pytest.raises(Exception, match=NOPERM):
            attempt()
    with pytest.raises(redis.exceptions.NoPermissionError):
        redis.Redis.from_url(agent_app.conf.broker_url).publish("/0.celery.pidbox", "x")


def test_an_agent_cannot_enqueue_internal_or_operator_tasks(agent_app, admin):
    for task in (names.TASK_EXPLORE, names.TASK_REPLAY):
        with pytest.raises(Exception, match=NOPERM):
            agent_app.send_task(task, args=[{"session_limit": 10**9}], ignore_result=True)
    assert admin.llen(names.QUEUE_EXPLORE) == admin.llen(names.QUEUE_REPLAY) == 0


def test_an_agent_cannot_declare_a_queue_or_write_a_binding(agent_app, agent, admin):
    from kombu import Exchange, Queue

    with agent_app.connection_for_write() as conn:
        queue = Queue("stolen", Exchange("stolen"), routing_key="stolen")
        with pytest.raises(Exception, match=NOPERM):
            queue(conn.default_channel).declare()
    with pytest.raises(redis.exceptions.NoPermissionError):
        agent.sadd("_kombu.binding.resolve", "resolve\x06\x16\x06\x16stolen")
    assert not admin.keys("_kombu.binding.*")


def test_an_agent_cannot_read_queued_facts_or_run_admin_commands(agent, admin):
    admin.lpush(names.QUEUE_RESOLVE, "another agent's facts")
    for attempt in (
        lambda: agent.lrange(names.QUEUE_RESOLVE, 0, -1),
        lambda: agent.rpop(names.QUEUE_RESOLVE),
        lambda: agent.set(names.QUEUE_RESOLVE, "overwritten"),
        lambda: agent.delete(names.QUEUE_RESOLVE),
        lambda: agent.keys("*"),
        lambda: agent.flushdb(),
        lambda: agent.config_get("*"),
        lambda: agent.acl_list(),
        lambda: agent.get(names.KEY_RULES_VERSION),
        lambda: agent.publish("celery-task-meta-x", "{}"),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            attempt()
    assert admin.lrange(names.QUEUE_RESOLVE, 0, -1) == [b"another agent's facts"]


def test_a_revoked_agent_is_disconnected_and_cannot_log_in_again(embedded_valkey, agent, admin):
    assert agent.ping()
    delete_agent_user(embedded_valkey.settings, AGENT)
    with pytest.raises(redis.exceptions.RedisError):
        agent.ping()  # its open connection was closed by the broker
    url = agent_url(embedded_valkey.settings.redis_url, AGENT, TOKEN)
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis.from_url(url).ping()


def test_agents_survive_a_restart_of_the_embedded_valkey(embedded_valkey, admin):
    from theow_workers.ops.acl import save_agent_users

    save_agent_users(embedded_valkey.settings)  # what `theow tokens add` does after making one
    admin.close()
    embedded_valkey.stop(timeout=10)
    embedded_valkey.start_valkey()
    url = agent_url(embedded_valkey.settings.redis_url, AGENT, TOKEN)
    assert redis.Redis.from_url(url).ping()


def test_the_embedded_valkey_needs_its_generated_password(embedded_valkey, tmp_path):
    settings = embedded_valkey.settings
    password_file = settings.home / "valkey.password"
    assert password_file.stat().st_mode & 0o777 == 0o600
    host, port = embedded_valkey.valkey_address
    with pytest.raises(redis.exceptions.AuthenticationError):
        redis.Redis(host=host, port=port).ping()
    # A command beside `theow up` finds the password in THEOW_HOME on its own.
    from theow_workers.config import Settings

    env = {"THEOW_HOME": str(settings.home), "THEOW_REDIS_URL": f"redis://{host}:{port}/0"}
    found = Settings.load(env=env, path=tmp_path / "none.yaml")
    assert redis.Redis.from_url(found.redis_url).ping()
    assert (
        password_file.read_text().strip()
        not in (settings.home / "valkey" / "users.acl").read_text()
    )


def test_an_agent_user_the_broker_refuses_is_one_line_without_the_password(embedded_valkey):
    from theow_workers.config import with_password
    from theow_workers.ops.acl import AclError

    wrong = embedded_valkey.settings.model_copy(
        update={"redis_url": with_password(embedded_valkey.settings.redis_url, "not-the-admin")}
    )
    with pytest.raises(AclError) as refused:
        create_agent_user(wrong, AGENT, TOKEN)
    message = str(refused.value)
    assert message.startswith(f"cannot create the broker user agent-{AGENT} at redis://:***@")
    assert "\n" not in message and "not-the-admin" not in message and TOKEN not in message


def test_doctor_away_from_the_stacks_home_says_where_the_password_is(embedded_valkey, tmp_path):
    from theow_workers.config import Settings
    from theow_workers.ops.checks import FAIL, Context, check_redis

    host, port = embedded_valkey.valkey_address
    env = {"THEOW_HOME": str(tmp_path / "elsewhere"), "THEOW_REDIS_URL": f"redis://{host}:{port}/0"}
    (finding,) = check_redis(Context(Settings.load(env=env, path=tmp_path / "none.yaml")))
    assert finding.status == FAIL
    assert "valkey.password" in finding.fix and "THEOW_HOME" in finding.fix
