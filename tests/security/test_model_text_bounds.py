"""A few hundred bytes must not cost gigabytes or dollars, and a prompt is read from the rules only.

The explorer runs in this process through the real google-genai client against
the fake Gemini server, which records every request it gets; explorations go
to SQLite and the explore state to the session's Valkey, as in a worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import prepared_database
from tests.fakes.gemini_server import (
    FakeGemini,
    function_call,
    function_responses,
    text,
    with_usage,
)
from theow_workers.adapters.memory import HashingEmbedder
from theow_workers.adapters.providers import gateway_from_settings
from theow_workers.adapters.redis_state import RedisExploreState
from theow_workers.config import Settings
from theow_workers.core.actions import load_actions
from theow_workers.core.explore.context import ExplorationContext
from theow_workers.core.explore.proposal import Repository
from theow_workers.core.explore.service import ExploreService, ExploreSettings
from theow_workers.core.llm.model import Budget
from theow_workers.core.logs.redact import Masker, settings_secrets
from theow_workers.core.ports import Exploration, FailureRecord
from theow_workers.core.rules.schema import Rule, RuleError, load_rules, parse_rule
from theow_workers.explorer.run import load_prompt
from theow_workers.store.explore import ExploreStore
from theow_workers.store.results import SqlStore

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
KEY = "AIzaSy-bounds-test-key-0123456789abcdef"
MODEL = "gemini-2.5-flash"
FACTS = {"stderr": "step 2\nERROR: the gizmo overflowed at 0x7f\n", "job": "gizmo"}
# 400 bytes: nine nested levels of nine aliases, 9^9 (387 million) strings once expanded.
ALIAS_BOMB = (
    "name: bomb\nwhen: [{fact: stderr, contains: x}]\na: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n"
    + "".join(
        f"{c}: &{c} [*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p},*{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
)
EIGHT_MB = "A model that will not stop talking. " * (8 * 1024 * 1024 // 36)


@pytest.fixture
def fake() -> Iterator[FakeGemini]:
    with FakeGemini(api_key=KEY) as server:
        yield server


Explore = Callable[..., tuple[Exploration, ExploreStore]]


@pytest.fixture
def explore(fake: FakeGemini, tmp_path: Path, redis_client: Any) -> Explore:
    """Explore FACTS as an explorer worker does; returns the exploration and its store."""
    (tmp_path / "rules").mkdir()
    settings = Settings.load(env={
        "THEOW_HOME": str(tmp_path / "home"), "THEOW_RULES_DIR": str(tmp_path / "rules"),
        "GEMINI_API_KEY": KEY, "THEOW_GEMINI_BASE_URL": fake.url, "THEOW_LLM": f"gemini/{MODEL}",
    })  # fmt: skip
    sql = SqlStore(prepared_database("sqlite", tmp_path))
    store = ExploreStore(sql)
    registry = load_actions(FIXTURES / "actions")
    repo = Repository(
        rule_names=frozenset(), action_files={}, actions_dir=tmp_path / "actions", root=tmp_path
    )
    embedder = HashingEmbedder()

    def run(
        budget: Budget | None = None, rule: Rule | None = None
    ) -> tuple[Exploration, ExploreStore]:
        failure_id = f"f-{time.monotonic_ns()}"
        now = datetime.now(UTC)
        sql.record_failure(FailureRecord(failure_id, failure_id, FACTS, None, "test", now))
        service = ExploreService(
            RedisExploreState(redis_client), store, lambda: gateway_from_settings(settings),
            lambda text: embedder.embed([text])[0], ExploreSettings(budget=budget or Budget()),
            load_prompt=lambda template: load_prompt(template, settings.rule_layers),
            mask=Masker(settings_secrets(settings)),
        )  # fmt: skip
        context = ExplorationContext(FACTS, load_rules(FIXTURES / "rules").rules, registry, repo,
                                     lambda q, k, n: [])  # fmt: skip
        return service.explore(failure_id, failure_id, FACTS, context, FACTS["stderr"], "s",
                               rule=rule), store  # fmt: skip

    return run


def test_an_alias_bomb_is_refused_before_it_expands_in_little_memory():
    assert len(ALIAS_BOMB) < 500
    tracemalloc.start()
    with pytest.raises(RuleError, match=r"YAML anchors .* are not allowed"):
        parse_rule(ALIAS_BOMB)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 1_000_000  # expanded, the bomb's billion strings would be gigabytes


def test_an_alias_bomb_given_to_test_rule_goes_back_to_the_model_as_an_error_not_a_huge_request(
    fake, explore
):
    def brain(model: str, body: dict[str, Any]) -> dict[str, Any]:
        if not function_responses(body):
            return function_call("test_rule", rule_yaml=ALIAS_BOMB)
        return function_call("give_up", reason="the rule does not parse")

    fake.brain = brain
    exploration, _ = explore()
    assert exploration.outcome == "gave_up"
    (answer,) = function_responses(fake.bodies()[-1])
    assert "aliases" in json.dumps(answer) or "anchors" in json.dumps(answer)
    assert max(len(json.dumps(body)) for body in fake.bodies()) < 100_000


def test_an_8_mb_model_answer_is_stored_cut_and_never_carried_whole(fake, explore, redis_client):
    def brain(model: str, body: dict[str, Any]) -> dict[str, Any]:
        if len(body["contents"]) == 1:
            # No tool call: the loop nudges it once. Its usage is made small, so that
            # the session goes on and what is kept of the answer is what is tested.
            return with_usage(text(EIGHT_MB), prompt=1000, output=1000)
        return with_usage(function_call("give_up", reason=EIGHT_MB), prompt=1000, output=1000)

    fake.brain = brain
    exploration, store = explore()
    assert exploration.outcome == "gave_up"
    # Sent back to the model cut, not whole: the second request is small.
    assert len(json.dumps(fake.bodies()[-1])) < 200_000
    (row,) = store.explorations()
    assert "characters omitted" in row.reason and len(row.reason) < 5_000
    assert len(json.dumps(row.transcript)) < 300_000
    model_turns = [t for t in row.transcript if t.get("role") == "model"]
    assert "characters omitted" in model_turns[0]["text"]
    # What the client reads (the task's result) and the explore state in Redis: bounded.
    assert len(json.dumps(exploration.summary())) < 10_000
    assert all(len(redis_client.get(k) or b"") < 50_000 for k in redis_client.keys("*")
               if redis_client.type(k) in (b"string", "string"))  # fmt: skip


def test_a_turn_whose_estimate_exceeds_the_budget_left_is_never_sent(fake, explore):
    fake.brain = lambda model, body: function_call("give_up", reason="unreachable")
    exploration, store = explore(budget=Budget(max_tokens=500))
    assert fake.requests == []  # the model got nothing, so nothing was spent
    assert exploration.outcome == "budget"
    assert "was not sent" in exploration.reason and "of 500 are left" in exploration.reason
    assert [r.outcome for r in store.explorations()] == ["budget"]


def rule_with_prompt(template: str) -> str:
    return (
        "name: investigate_gizmo\ndescription: An LLM looks at each gizmo failure.\n"
        "when:\n  - fact: stderr\n    contains: gizmo\n"
        f"llm_config:\n  prompt_template: {template}\n"
    )


@pytest.mark.parametrize(
    "template", ["file:///proc/self/environ", "file://../secrets.md", "file://prompts/../../x.md"]
)
def test_a_prompt_template_outside_the_rules_folders_is_refused_by_rules_check(template, tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "investigate_gizmo.rule.yaml").write_text(rule_with_prompt(template))
    env = {**os.environ, "THEOW_HOME": str(tmp_path / "home"), "THEOW_RULES_DIR": str(rules),
           "THEOW_ACTIONS_DIR": str(FIXTURES / "actions")}  # fmt: skip
    checked = subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", "rules", "check"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert checked.returncode != 0
    assert "investigate_gizmo.rule.yaml:" in checked.stdout + checked.stderr
    assert "must name a file in the rules directory" in checked.stdout + checked.stderr
    assert "Traceback" not in checked.stderr


def test_a_prompt_template_that_is_a_symlink_is_refused_and_nothing_reaches_the_model(
    fake, explore, tmp_path
):
    outside = tmp_path / "worker-secrets.env"
    outside.write_text("GEMINI_API_KEY=" + KEY)
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "gizmo.md").symlink_to(outside)
    rule = parse_rule(rule_with_prompt("file://prompts/gizmo.md"))
    fake.brain = lambda model, body: function_call("give_up", reason="unreachable")
    exploration, _ = explore(rule=rule)
    assert exploration.outcome == "error"
    assert "is a symlink" in exploration.reason and "prompts/gizmo.md" in exploration.reason
    assert fake.requests == []


def test_a_prompt_template_in_the_prompts_folder_beside_the_rules_is_read(fake, explore, tmp_path):
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "gizmo.md").write_text("Look at the gizmo, then say done.")
    rule = parse_rule(rule_with_prompt("file://prompts/gizmo.md"))
    fake.brain = lambda model, body: text("done")
    exploration, _ = explore(rule=rule)
    assert exploration.outcome == "done"
    assert "Look at the gizmo" in json.dumps(fake.bodies()[0])
