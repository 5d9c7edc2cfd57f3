"""A fleet for integration tests: real Celery worker processes on real services.

Workers are started exactly as ``theow worker`` starts them (``celery -A
theow_workers.celery_app worker``), with the test's settings in their
environment: the session's Redis/Valkey and Milvus Lite server, a fresh SQL
database, a fresh Milvus collection and the fixture rules and actions.
"""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from theow_workers.config import Settings
from theow_workers.stack import EmbeddedStack

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

pytestmark = pytest.mark.integration


@dataclass
class Fleet:
    settings: Settings
    home: Path
    stack: EmbeddedStack
    clients: list[Any] = field(default_factory=list)

    def start_worker(self, concurrency: int = 1, name: str = "resolver") -> Any:
        proc = self.stack.start_worker(["resolve"], concurrency=concurrency, name=name)
        self.wait_for_worker(name)
        return proc

    def wait_for_worker(self, name: str, timeout: float = 60) -> None:
        """Wait until the worker answers a ping (it is consuming)."""
        from celery import Celery

        app = Celery(broker=self.settings.redis_url, backend=self.settings.redis_url)
        node = f"{name}@{socket.gethostname()}"  # celery's %h
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                # Addressed to the one worker: the reply ends the wait, not the timeout.
                replies = app.control.ping([node], timeout=0.5, limit=1) or []
                if any(node in reply for reply in replies):
                    return
            log = (self.home / f"worker-{name}.log").read_text(errors="replace")[-3000:]
            raise AssertionError(f"worker {name} did not come up:\n{log}")
        finally:
            app.close()

    def client(self, token: str | None = None) -> Any:
        """A client signing as the fleet's agent (THEOW_AGENT_TOKEN), or with ``token``."""
        from theow_client import TheowClient

        client = TheowClient(
            redis_url=self.settings.redis_url, spool_dir=self.home / "spool", token=token
        )
        self.clients.append(client)
        return client

    def add_token(self, name: str, scope: str = "agent") -> str:
        return add_token(self.settings.store_url, name, scope)

    def agent(self, name: str) -> Any:
        """A client of its own agent, with a token of its own."""
        return self.client(token=self.add_token(name))

    def store(self) -> Any:
        from theow_workers.store.results import SqlStore

        return SqlStore(self.settings.store_url)

    def worker_log(self, name: str = "resolver") -> str:
        return (self.home / f"worker-{name}.log").read_text(errors="replace")


def add_token(store_url: str, name: str, scope: str = "agent") -> str:
    """A new token in the token store at ``store_url`` (as ``theow tokens add`` makes one)."""
    from theow_workers.store.schema import make_engine
    from theow_workers.store.tokens import TokenStore

    engine = make_engine(store_url)
    try:
        return str(TokenStore(engine).add(name, scope))
    finally:
        engine.dispose()


def worker_runtime(
    tmp_path: Path, redis_url: str, milvus_uri: str, collection: str, minilm: Any, **env: str
) -> Any:
    """A worker process's runtime on the rules in ``tmp_path/rules``, with the session's model."""
    from theow_workers.config import Settings
    from theow_workers.runtime import Runtime
    from theow_workers.store.schema import migrate

    (tmp_path / "actions").mkdir()
    url = f"sqlite:///{tmp_path / 'theow.db'}"
    migrate(url)
    settings = Settings.load(
        env={
            "THEOW_REDIS_URL": redis_url,
            "THEOW_MILVUS_URI": milvus_uri,
            "THEOW_MILVUS_COLLECTION": collection,
            "THEOW_DATABASE_URL": url,
            "THEOW_RULES_DIR": str(tmp_path / "rules"),
            "THEOW_ACTIONS_DIR": str(tmp_path / "actions"),
            **env,
        }
    )
    runtime = Runtime(settings)
    runtime._embedder = minilm  # the session's model: MiniLM takes seconds to load again
    return runtime


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Fleets run on SQLite; a module lists PostgreSQL in FLEET_DATABASES to run there too.

    The store itself is tested on both everywhere it is touched directly; worker
    tests, which take seconds each, run on PostgreSQL where the path is the point.
    """
    if "fleet_db" in metafunc.fixturenames:
        databases = getattr(metafunc.module, "FLEET_DATABASES", ("sqlite",))
        metafunc.parametrize("fleet_db", databases, indirect=True)


@pytest.fixture
def fleet_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    from tests.conftest import prepared_database

    return prepared_database(request.param, tmp_path)


def fleet_environment(
    base: Path, redis_url: str, milvus_uri: str, database_url: str
) -> dict[str, str]:
    """The settings of a fleet whose home, rules, actions and prompts are copies under ``base``."""
    rules, actions = base / "rules", base / "actions"
    shutil.copytree(FIXTURES / "rules", rules)
    shutil.copytree(FIXTURES / "actions", actions)
    shutil.copytree(FIXTURES / "prompts", base / "prompts")  # file:// prompt templates
    return {
        "THEOW_HOME": str(base / "home"),
        "THEOW_REDIS_URL": redis_url,
        "THEOW_MILVUS_URI": milvus_uri,
        # One collection for every fleet: rules rarely change between tests, so
        # workers find the index in sync and need not load MiniLM to embed it.
        "THEOW_MILVUS_COLLECTION": "fleet_fixture_rules",
        "THEOW_DATABASE_URL": database_url,
        "THEOW_RULES_DIR": str(rules),
        "THEOW_ACTIONS_DIR": str(actions),
        "THEOW_ACTION_TIMEOUT": "2",
        "THEOW_RULES_POLL_SECONDS": "0.5",
        # A killed worker's failure is taken over by its redelivery after this.
        "THEOW_CLAIM_TTL": "3",
    }


@contextmanager
def running_fleet(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Fleet]:
    """A fleet on ``env`` with an agent of its own; its workers are stopped on the way out."""
    settings = Settings.load(env=env)
    home = Path(env["THEOW_HOME"])
    home.mkdir(parents=True)
    # The fleet's own agent: every client signs with its token unless a test says otherwise.
    env = {**env, "THEOW_AGENT_TOKEN": add_token(settings.store_url, "fleet-agent")}
    # Through monkeypatch, which a test's own changes share: undone together, in order.
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    stack = EmbeddedStack(settings)
    fleet = Fleet(settings, home, stack)
    try:
        yield fleet
    finally:
        stack.stop(timeout=10)
        for client in fleet.clients:
            client.close()


@pytest.fixture
def fleet(
    tmp_path: Path,
    redis_url: str,
    redis_client: Any,
    milvus_uri: str,
    fleet_db: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Fleet]:
    env = fleet_environment(tmp_path, redis_url, milvus_uri, fleet_db)
    with running_fleet(env, monkeypatch) as fleet:
        yield fleet


@dataclass
class Explorers:
    """Explorer workers and the fake model server they talk to (``provider``'s)."""

    fake: Any  # FakeGemini or FakeOpenAI: a brain reads and answers through ``fake.wire``
    start: Any  # start(count=1): a resolver and ``count`` explorers
    provider: str
    model: str  # the model id sessions are recorded under

    def __iter__(self) -> Iterator[Any]:
        return iter((self.fake, self.start))


EXPLORE_KEY = "test-key-not-secret"
PROVIDERS = ("gemini", "openai")


def explorers_on(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch, provider: str, key: str = EXPLORE_KEY
) -> Explorers:
    """Explorer workers whose model is the fake ``provider`` server's, through the environment;
    ``key`` is the model's API key."""
    monkeypatch.setenv("THEOW_EXPLORE", "1")
    if provider == "gemini":
        from tests.fakes.gemini_server import FakeGemini

        fake: Any = FakeGemini().start()  # give it a brain in the test: fake.brain = ...
        model = "gemini-2.5-flash"
        monkeypatch.setenv("GEMINI_API_KEY", key)
        monkeypatch.setenv("THEOW_GEMINI_BASE_URL", fake.url)
    else:
        from tests.fakes.openai_server import MODEL, FakeOpenAI

        fake, model = FakeOpenAI(api_key=key).start(), MODEL
        monkeypatch.delenv("GEMINI_API_KEY", raising=False)  # no Google account needed
        monkeypatch.setenv("THEOW_LLM_BASE_URL", fake.url)
        monkeypatch.setenv("THEOW_LLM_API_KEY", key)
        monkeypatch.setenv("THEOW_LLM_PRICE", "0.10,0.40")  # priced as a hosted one would be
    monkeypatch.setenv("THEOW_LLM", f"{provider}/{model}")

    def start(count: int = 1) -> None:
        # All started before any is waited for: each takes seconds to import and connect.
        fleet.stack.start_worker(["resolve"], concurrency=1, name="resolver")
        names = [f"explorer{i}" for i in range(count)]
        for name in names:
            fleet.stack.start_worker(["explore"], concurrency=1, name=name)
        for name in ["resolver", *names]:
            fleet.wait_for_worker(name)

    return Explorers(fake, start, provider, model)


@pytest.fixture
def explorers(fleet, monkeypatch):
    """Explorers on the fake Gemini server."""
    found = explorers_on(fleet, monkeypatch, "gemini")
    yield found
    found.fake.stop()


@pytest.fixture(params=PROVIDERS)
def any_explorers(request, fleet, monkeypatch):
    """Explorers on each provider's fake server in turn: a test of it runs once per provider."""
    found = explorers_on(fleet, monkeypatch, request.param)
    yield found
    found.fake.stop()


@contextmanager
def shared_explorers(
    base: Path,
    redis_url: str,
    milvus_uri: str,
    provider: str,
    count: int = 2,
    database: str = "sqlite",
    key: str = EXPLORE_KEY,
    **settings: str,
) -> Iterator[tuple[Fleet, Explorers]]:
    """A resolver and ``count`` explorers on ``provider``'s fake, for a whole module.

    The store is a fresh ``database`` ("sqlite" or "postgresql"), ``key`` the model's
    API key; ``settings`` are the workers' further environment
    (``THEOW_RULES_POLL_SECONDS="0"``). For tests
    that each submit failures of their own: between them, ``explorers_reset``
    clears what an exploration leaves behind (``theow:explore:*``, ``theow:llm:*``)
    and the fake's records. The fleet has a Redis database to itself meanwhile: no
    fixture that empties the database may run beside it (``redis_client`` does).
    """
    import redis

    from tests.conftest import prepared_database

    with pytest.MonkeyPatch.context() as monkeypatch:
        broker = redis.Redis.from_url(redis_url)
        broker.flushdb()
        broker.close()
        store = prepared_database(database, base)
        env = {**fleet_environment(base, redis_url, milvus_uri, store), **settings}
        with running_fleet(env, monkeypatch) as fleet:
            found = explorers_on(fleet, monkeypatch, provider, key)
            try:
                found.start(count)
                yield fleet, found
            finally:
                found.fake.stop()


def explorers_reset(fleet: Fleet, found: Explorers) -> None:
    """What one test's explorations left in the broker and the fake, gone before the next."""
    import redis

    from theow_client import names

    broker = redis.Redis.from_url(fleet.settings.redis_url)
    try:
        for part in ("explore:*", "llm:*"):
            for key in broker.scan_iter(names.KEY_PREFIX + part):
                broker.delete(key)
    finally:
        broker.close()
    found.fake.forget()
