"""A worker serving layered rule directories notices a change in the user's layer, no restart."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import prepared_database
from tests.integration.conftest import FIXTURES, Fleet, add_token
from theow_client import Status
from theow_workers.config import Settings
from theow_workers.stack import EmbeddedStack

pytestmark = pytest.mark.integration

OURS = """\
name: our_echo
description: Our build printed {word} and a word.
when:
  - fact: stderr
    regex: '{word} (?P<word>\\w+)'
    examples: ["{word} hello"]
then:
  - action: echo
    params: {{word: "{{word}}"}}
"""


@pytest.fixture
def layered_fleet(
    tmp_path: Path, redis_url: str, redis_client: Any, milvus_uri: str, monkeypatch
) -> Iterator[tuple[Fleet, Path]]:
    """Workers on the shipped rules, the fixture rules, then a user's layer (last)."""
    home, rules, mine = tmp_path / "home", tmp_path / "rules", tmp_path / "mine"
    shutil.copytree(FIXTURES / "rules", rules)
    mine.mkdir()
    (mine / "our_echo.rule.yaml").write_text(OURS.format(word="MINE"))
    env = {
        "THEOW_HOME": str(home),
        "THEOW_REDIS_URL": redis_url,
        "THEOW_MILVUS_URI": milvus_uri,
        # Not the fleet fixture's collection: the shipped rules would churn it.
        "THEOW_MILVUS_COLLECTION": "layered_rules",
        "THEOW_DATABASE_URL": prepared_database("sqlite", tmp_path),
        "THEOW_RULES_DIRS": os.pathsep.join([str(rules), str(mine)]),
        "THEOW_ACTIONS_DIRS": str(FIXTURES / "actions"),
        "THEOW_RULES_POLL_SECONDS": "0",
    }
    for name in ("THEOW_RULES_DIR", "THEOW_ACTIONS_DIR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = Settings.load(env=env)
    home.mkdir()
    monkeypatch.setenv("THEOW_AGENT_TOKEN", add_token(settings.store_url, "layers-agent"))
    stack = EmbeddedStack(settings)
    fleet = Fleet(settings, home, stack)
    try:
        yield fleet, mine
    finally:
        stack.stop(timeout=10)
        for client in fleet.clients:
            client.close()


@pytest.mark.slow
def test_a_worker_reloads_a_changed_rule_of_the_user_layer(layered_fleet):
    fleet, mine = layered_fleet
    fleet.start_worker()
    client = fleet.client()
    first = client.submit({"stderr": "MINE one", "job": "j"}).wait(180)
    assert (first.status, first.rule) == (Status.RESOLVED, "our_echo")

    (mine / "our_echo.rule.yaml").write_text(OURS.format(word="OURS"))

    second = client.submit({"stderr": "OURS two", "job": "j"}).wait(120)
    assert (second.status, second.rule) == (Status.RESOLVED, "our_echo")
    lower = client.submit({"stderr": "ECHO three", "job": "j"}).wait(60)
    assert (lower.status, lower.rule) == (Status.RESOLVED, "tf_echo")


def test_the_last_good_rules_keep_their_layers_so_an_override_survives_a_restore(
    tmp_path, redis_client
):
    from theow_client import names
    from theow_workers import last_good
    from theow_workers.core.resolve.library import Library

    lower, mine = tmp_path / "lower", tmp_path / "mine"
    lower.mkdir()
    mine.mkdir()
    (lower / "our_echo.rule.yaml").write_text(OURS.format(word="LOWER"))
    (mine / "our_echo.rule.yaml").write_text(OURS.format(word="MINE"))
    redis_client.delete(names.KEY_RULES_LAST_GOOD)
    kept = Library.load([lower, mine], FIXTURES / "actions")

    last_good.remember(redis_client, [lower, mine], kept.book.version)
    restored = Library.load(last_good.restore(redis_client), FIXTURES / "actions")

    assert restored.book.version == kept.book.version
    (rule,) = restored.rules.rules
    assert rule.when[0].regex == "MINE (?P<word>\\w+)"
