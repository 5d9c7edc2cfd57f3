"""A model steered by a build log repeats the deployment's secrets and writes escape sequences.

The explorer runs in real Celery workers against the fake Gemini server; the
model (the fake's brain) writes the Gemini key, the console password and a
GitHub token into a turn's text, a tool call and its give-up reason, with
terminal escape sequences around them; the failure's log carries escape
sequences too. Nothing of it may come out in clear: not in SQL, not in Redis
(the task result the client and Flower read), not in what ``theow-client`` or
``theow failures show`` print, not on the console's failure page.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from tests.conftest import prepared_database
from tests.fakes.gemini_server import combine, function_call, function_responses, text
from tests.integration import conftest as integration
from theow_workers.config import Settings
from theow_workers.store.schema import ExplorationRow

pytestmark = pytest.mark.integration
# The integration tests' fleet of real workers and the fake Gemini behind explorers.
fleet, explorers = integration.fleet, integration.explorers

GEMINI_KEY = "AIzaSy-model-text-key-0123456789abcdef"
WEB_PASSWORD = "console-reviewer-passphrase-7731"
READONLY_PASSWORD = "console-reader-passphrase-5519"
GITHUB_TOKEN = "ghp_" + "a1B2c3D4" * 4 + "e5F6"
SECRETS = (GEMINI_KEY, WEB_PASSWORD, GITHUB_TOKEN)
CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07"
CLEAR = "\x1b[2J"
LEAK = (
    f"{CLIPBOARD}{CLEAR}I read the environment: GEMINI_API_KEY is {GEMINI_KEY}, the console"
    f" password is {WEB_PASSWORD} and the token {GITHUB_TOKEN}"
)
LOG = f"step 3\n{CLIPBOARD}ERROR: component leaky failed: code=3{CLEAR}\n"


@pytest.fixture
def fleet_db(tmp_path: Path) -> str:
    return prepared_database("sqlite", tmp_path)


def leaking_brain(model: str, body: dict[str, Any]) -> dict[str, Any]:
    """Say the secrets in a turn and a tool call; then give up with them as the reason."""
    if not function_responses(body):
        draft = f"name: leak\ndescription: {LEAK}\nwhen: []\n"
        return combine(text(LEAK), function_call("test_rule", rule_yaml=draft))
    return function_call("give_up", reason=LEAK)


def assert_masked(where: str, shown: str) -> None:
    for secret in SECRETS:
        assert secret not in shown, f"{where} shows {secret[:12]}… in clear"


def test_secrets_a_model_repeats_are_masked_wherever_its_reason_and_transcript_go(
    fleet, explorers, monkeypatch, redis_client, tmp_path
):
    fake, start = explorers
    fake.brain = leaking_brain
    monkeypatch.setenv("GEMINI_API_KEY", GEMINI_KEY)
    monkeypatch.setenv("THEOW_WEB_PASSWORD", WEB_PASSWORD)
    monkeypatch.setenv("THEOW_WEB_READONLY_PASSWORD", READONLY_PASSWORD)
    start()
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps({"stderr": LOG, "job": "leaky-job"}))
    client = subprocess.run(
        [sys.executable, "-m", "theow_client.cli", "--redis-url", fleet.settings.redis_url,
         "--spool-dir", str(tmp_path / "spool"), "submit", "--facts-file", str(facts),
         "--explore", "--wait", "--timeout", "90"],
        capture_output=True, text=True, timeout=120, env=os.environ,
    )  # fmt: skip
    assert "exploration: gave_up" in client.stdout, client.stdout + client.stderr
    assert "[masked:" in client.stdout  # the reason is there, masked
    assert_masked("theow-client's output", client.stdout + client.stderr)
    assert "\x1b" not in client.stdout + client.stderr

    with fleet.store().session() as s:
        row = s.execute(select(ExplorationRow)).scalar_one()
        stored = row.reason + json.dumps(row.transcript)
        failure_id = row.failure_id
    assert "[masked:deployment-secret]" in row.reason
    assert any(t.get("role") == "model" and "[masked:" in t.get("text", "") for t in row.transcript)
    assert_masked("SQL", stored)

    # Every key in Redis: the task result the client and Flower read, the explore state.
    for key in redis_client.keys("*"):
        kind = redis_client.type(key)
        if kind in (b"string", "string"):
            assert_masked(f"Redis {key!r}", str(redis_client.get(key)))
        elif kind in (b"hash", "hash"):
            assert_masked(f"Redis {key!r}", str(redis_client.hgetall(key)))
        elif kind in (b"list", "list"):
            assert_masked(f"Redis {key!r}", str(redis_client.lrange(key, 0, -1)))

    shown = subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", "failures", "show", failure_id],
        capture_output=True, text=True, timeout=120, env=os.environ,
    )  # fmt: skip
    assert "exploration gave_up" in shown.stdout, shown.stdout + shown.stderr
    assert "component leaky failed" in shown.stdout
    assert_masked("theow failures show", shown.stdout)
    assert "\x1b" not in shown.stdout

    assert_masked("the console's failure page", failure_page(failure_id))


def failure_page(failure_id: str) -> str:
    """The failure's page as the read-only console user sees it."""
    from starlette.testclient import TestClient

    from theow_workers.web.app import create_app

    settings = Settings.load(env=dict(os.environ))
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as http:
        login = http.post(
            "/login",
            data={"name": "reader", "password": READONLY_PASSWORD, "next": "/"},
            headers={"origin": "http://127.0.0.1"},
            follow_redirects=False,
        )
        assert login.status_code == 303, login.text
        page = http.get(f"/failures/{failure_id}", headers={"accept": "text/html"})
        assert page.status_code == 200
        assert "masked" in page.text
        return page.text
