"""The security tests attack a real fleet: the integration tests' fixtures, reused.

ACL users are per server: tests of who may do what on the broker start their
own Valkey, as ``theow up`` does (generated password, ACL file), never
touching a shared Redis.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.integration.conftest import (  # noqa: F401  (fixtures and the fleet_db hook)
    explorers,
    fleet,
    fleet_db,
    pytest_generate_tests,
)
from theow_workers.config import Settings
from theow_workers.stack import EmbeddedStack


@pytest.fixture
def embedded_valkey(tmp_path: Path) -> Iterator[EmbeddedStack]:
    """A started embedded Valkey; ``.settings`` holds the admin URL (with its password)."""
    env = {
        "THEOW_HOME": str(tmp_path / "home"),
        "THEOW_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
    }
    stack = EmbeddedStack(Settings.load(env=env, path=tmp_path / "none.yaml"))
    stack.start_valkey()
    try:
        yield stack
    finally:
        stack.stop(timeout=10)
