"""An explorer that cannot explore says so: it refuses to start, or records why and lets go."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from theow_client import Status

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def theow(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ["PATH"], "THEOW_REDIS_URL": "redis://127.0.0.1:1/0", **env},
    )  # fmt: skip


def test_an_explorer_without_a_key_refuses_to_start_and_says_why() -> None:
    result = theow("worker", "--queues", "explore", THEOW_EXPLORE="1")
    assert result.returncode == 2
    assert "not starting an explorer: GEMINI_API_KEY is not set" in result.stderr


def test_an_explorer_with_a_model_of_an_unknown_provider_refuses_to_start() -> None:
    result = theow("worker", "--queues", "explore", THEOW_EXPLORE="1", GEMINI_API_KEY="k",
                   THEOW_LLM="anthropic/claude")  # fmt: skip
    assert result.returncode == 2
    assert "provider 'anthropic' is not supported" in result.stderr


def test_an_explorer_on_an_openai_compatible_model_without_its_endpoint_refuses_to_start() -> None:
    result = theow("worker", "--queues", "explore", THEOW_EXPLORE="1", THEOW_LLM="openai/qwen2.5")
    assert result.returncode == 2
    assert "setting 'llm_base_url' (THEOW_LLM_BASE_URL) '': not set" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_explorer_whose_local_model_is_not_served_refuses_to_start() -> None:
    from tests.fakes.openai_server import FakeOpenAI

    fake = FakeOpenAI(api_key="sk-local-secret-key").start()
    try:
        result = theow("worker", "--queues", "explore", THEOW_EXPLORE="1",
                       THEOW_LLM="openai/qwen2.5", THEOW_LLM_BASE_URL=fake.url,
                       THEOW_LLM_API_KEY="sk-local-secret-key")  # fmt: skip
    finally:
        fake.stop()
    assert result.returncode == 2
    assert "model qwen2.5 at http://127.0.0.1" in result.stderr
    assert "no such model (the server lists local-model, strong-model)" in result.stderr
    assert "sk-local-secret-key" not in result.stderr


def test_an_explorer_whose_endpoint_cannot_be_reached_refuses_to_start() -> None:
    result = theow("worker", "--queues", "explore", THEOW_EXPLORE="1", GEMINI_API_KEY="k",
                   THEOW_GEMINI_BASE_URL="http://127.0.0.1:1")  # fmt: skip
    assert result.returncode == 2
    assert "model gemini-2.5-flash: the endpoint cannot be reached" in result.stderr


def test_an_explorer_whose_model_does_not_exist_refuses_to_start() -> None:
    from tests.fakes.gemini_server import FakeGemini

    fake = FakeGemini().start()
    try:
        result = theow("worker", "--queues", "explore", THEOW_EXPLORE="1", GEMINI_API_KEY="k",
                       THEOW_GEMINI_BASE_URL=fake.url, THEOW_LLM="gemini/gemini-9-ultra")  # fmt: skip
    finally:
        fake.stop()
    assert result.returncode == 2
    assert "model gemini-9-ultra: 404" in result.stderr
    assert "GEMINI_API_KEY" not in result.stderr and "'k'" not in result.stderr


def test_a_worker_on_the_explore_queue_without_theow_explore_refuses_to_start() -> None:
    result = theow("worker", "--queues", "resolve,explore")
    assert result.returncode == 2
    assert "THEOW_EXPLORE is not set" in result.stderr


def test_a_queued_exploration_that_cannot_run_is_recorded_and_the_failure_leaves_exploring(
    fleet, monkeypatch
) -> None:
    # Started behind the CLI's back (plain `celery worker`), as an old deployment might.
    monkeypatch.setenv("THEOW_EXPLORE", "1")
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    fleet.start_worker()
    fleet.stack.start_worker(["explore"], concurrency=1, name="explorer0")
    fleet.wait_for_worker("explorer0")

    ticket = fleet.client().submit(
        {"stderr": "ERROR: component nobody-knows failed\n", "job": "j"}, explore=True
    )
    assert ticket.wait(60).status is Status.EXPLORING
    outcome = ticket.wait_exploration(60)
    assert outcome["outcome"] == "error"
    assert "GEMINI_API_KEY is not set" in outcome["reason"]

    stored = fleet.store().verdict(ticket.failure_id)
    assert stored.status is Status.UNMATCHED
    assert "exploring failed: this explorer cannot explore: GEMINI_API_KEY" in stored.reason
    assert "Traceback" not in fleet.worker_log("explorer0")
