"""pytest advisor: a test asks for a fixture that no installed plugin provides.

Worker-side and pure. Most "fixture 'x' not found" errors in CI are a test
plugin missing from the test requirements (mocker is pytest-mock); the rest
are fixtures a conftest.py should define.
"""

from __future__ import annotations

import re

from theow_workers import action

# Fixture name → the PyPI distribution whose pytest plugin defines it.
FIXTURE_TO_PLUGIN: dict[str, str] = {
    "mocker": "pytest-mock",
    "class_mocker": "pytest-mock",
    "module_mocker": "pytest-mock",
    "session_mocker": "pytest-mock",
    "benchmark": "pytest-benchmark",
    "httpx_mock": "pytest-httpx",
    "requests_mock": "requests-mock",
    "respx_mock": "respx",
    "httpserver": "pytest-httpserver",
    "freezer": "pytest-freezer",
    "time_machine": "time-machine",
    "event_loop": "pytest-asyncio",
    "event_loop_policy": "pytest-asyncio",
    "aiohttp_client": "pytest-aiohttp",
    "aiohttp_server": "pytest-aiohttp",
    "snapshot": "syrupy",
    "db": "pytest-django",
    "client": "pytest-django",
    "admin_client": "pytest-django",
    "rf": "pytest-django",
    "settings": "pytest-django",
    "django_db_setup": "pytest-django",
    "django_user_model": "pytest-django",
    "live_server": "pytest-django",
    "celery_app": "celery[pytest]",
    "celery_worker": "celery[pytest]",
    "datadir": "pytest-datadir",
    "shared_datadir": "pytest-datadir",
    "fs": "pyfakefs",
    "xprocess": "pytest-xprocess",
    "qtbot": "pytest-qt",
    "faker": "Faker",
    "subtests": "pytest-subtests",
    "redisdb": "pytest-redis",
    "redis_proc": "pytest-redis",
    "postgresql": "pytest-postgresql",
    "postgresql_proc": "pytest-postgresql",
    "docker_services": "pytest-docker",
    "docker_ip": "pytest-docker",
    "anyio_backend": "anyio",
    "page": "pytest-playwright",
    "browser": "pytest-playwright",
}

_FIXTURE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@action("suggest_pytest_plugin", suggests=True)
def suggest_pytest_plugin(fixture: str) -> dict:
    """Say which pytest plugin provides a fixture that a test requested but pytest could not find."""
    if not _FIXTURE.fullmatch(fixture):
        return {"status": "error", "error": f"not a fixture name: {fixture!r}"}
    plugin = FIXTURE_TO_PLUGIN.get(fixture)
    if plugin is None:
        return {
            "status": "ok",
            "fixture": fixture,
            "plugin": None,
            "confidence": "unknown",
            "fix": f"define a fixture named {fixture!r} in a conftest.py the test can see, or "
            "install the pytest plugin that provides it (pytest --fixtures lists the known ones)",
        }
    return {
        "status": "ok",
        "fixture": fixture,
        "plugin": plugin,
        "confidence": "known",
        "fix": f"pip install {plugin}  (and add it to the test requirements)",
    }
