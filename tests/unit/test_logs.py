"""Logs: one JSON object per line when asked, and never a secret in either format."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys

import pytest

from theow_workers.config import Settings
from theow_workers.logs import (
    LogFormatError,
    check_format,
    configure_handler,
    secrets_of,
)


def capture(log_format: str, secrets: tuple[str, ...] = ()) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    configure_handler(handler, log_format, secrets)
    logger = logging.getLogger(f"theow.test.{log_format}.{len(secrets)}")
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, stream


def test_json_logs_are_one_object_per_line_even_for_multiline_messages_and_tracebacks():
    logger, stream = capture("json")
    logger.info("rules version %s: %d rules", "abc", 14)
    logger.warning("first line\nsecond line")
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logger.exception("action failed")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    records = [json.loads(line) for line in lines]
    assert records[0]["message"] == "rules version abc: 14 rules"
    assert records[0]["level"] == "INFO" and records[0]["logger"] == logger.name
    assert records[0]["time"].endswith("+00:00")
    assert records[1]["message"] == "first line\nsecond line"
    assert "RuntimeError: boom" in records[2]["exc"]


def test_extra_fields_are_kept_and_secret_named_ones_masked():
    logger, stream = capture("json")
    logger.info("submitted", extra={"failure_id": "f-1", "api_key": "AIzaSomething"})
    record = json.loads(stream.getvalue())
    assert record["failure_id"] == "f-1"
    assert record["api_key"] == "***"


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_configured_secrets_and_token_shapes_never_reach_a_log_line(log_format):
    logger, stream = capture(log_format, secrets=("plain-words-password",))
    logger.info("flower password is %s", "plain-words-password")
    logger.info("db at postgresql+psycopg://theow:hunter22@db:5432/theow")
    logger.info("header Authorization: Bearer abcdefghijklmnop")
    try:
        raise ValueError("key plain-words-password rejected")
    except ValueError:
        logger.exception("failed")
    text = stream.getvalue()
    for secret in ("plain-words-password", "hunter22", "abcdefghijklmnop"):
        assert secret not in text
    assert "***" in text


def test_secrets_of_settings_are_the_keys_the_flower_password_and_url_passwords():
    settings = Settings.load(
        env={
            "GEMINI_API_KEY": "gemini-key-123",
            "THEOW_LLM_API_KEY": "sk-primary-key",
            "THEOW_LLM_SECONDARY_API_KEY": "sk-secondary-key",
            "THEOW_FLOWER_PASSWORD": "flower-pw",
            "THEOW_REDIS_URL": "redis://:redis%40pw@redis:6379/0",
            "THEOW_DATABASE_URL": "postgresql+psycopg://theow:pg-pw-1@postgres/theow",
        }
    )
    found = secrets_of(settings)
    assert {"gemini-key-123", "sk-primary-key", "sk-secondary-key", "flower-pw"} <= set(found)
    assert {"redis%40pw", "redis@pw", "pg-pw-1"} <= set(found)


def test_an_unknown_format_is_refused():
    assert check_format("json") == "json"
    with pytest.raises(LogFormatError, match="'xml' is not one of text, json"):
        check_format("xml")


def test_the_cli_logs_json_when_asked(tmp_path):
    env = {
        **os.environ,
        "THEOW_LOG_FORMAT": "json",
        "THEOW_LOG_LEVEL": "INFO",
        "THEOW_RULES_DIR": str(tmp_path / "missing"),
        "GEMINI_API_KEY": "never-logged-key",
    }
    # main() configures logging, then runs the app: the app here only logs.
    code = (
        "import logging, sys\n"
        "from theow_workers import cli\n"
        "cli.app = lambda: logging.getLogger('theow.x').warning('key is %s', 'never-logged-key')\n"
        "cli.main()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    (line,) = result.stderr.splitlines()
    record = json.loads(line)
    assert record["logger"] == "theow.x" and record["level"] == "WARNING"
    assert "never-logged-key" not in line
