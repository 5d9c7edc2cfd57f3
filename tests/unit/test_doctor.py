"""`theow doctor`: says what is wrong and how to fix it, and never prints a secret.

The services here are deliberately absent (closed ports, a missing SQLite
file) or local (SQLite, the fixture rules); `tests/integration/test_topology.py`
runs the doctor against a whole healthy fleet.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import free_port
from theow_workers.config import Settings
from theow_workers.ops.checks import FAIL, OK, SKIP, WARN, redis_findings
from theow_workers.ops.doctor import diagnose
from theow_workers.store.schema import migrate

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def by_check(findings) -> dict:
    return {f.check: f for f in findings}


def settings(tmp_path: Path, **env: str) -> Settings:
    base = {
        "THEOW_REDIS_URL": f"redis://:redis-secret-pw@127.0.0.1:{free_port()}/0",
        "THEOW_MILVUS_URI": f"http://127.0.0.1:{free_port()}",
        "THEOW_DATABASE_URL": f"sqlite:///{tmp_path / 'theow.db'}",
        "THEOW_RULES_DIR": str(FIXTURES / "rules"),
        "THEOW_ACTIONS_DIR": str(FIXTURES / "actions"),
    }
    return Settings.load(env={**base, **env}, path=tmp_path / "none.yaml")


def test_a_redis_that_may_evict_is_a_failure_with_the_fix():
    findings = by_check(
        redis_findings(
            "redis://r:6379/0",
            {"redis_version": "7.2.4", "maxmemory_policy": "allkeys-lru", "aof_enabled": 1},
        )
    )
    assert findings["redis"].status == OK and "redis 7.2.4" in findings["redis"].detail
    assert findings["redis.eviction"].status == FAIL
    assert "allkeys-lru" in findings["redis.eviction"].detail
    assert "noeviction" in findings["redis.eviction"].fix
    assert findings["redis.persistence"].status == OK


def test_valkey_without_persistence_is_a_warning_not_a_failure():
    findings = by_check(
        redis_findings("redis://v", {"valkey_version": "8.1.0", "maxmemory_policy": "noeviction"})
    )
    assert "valkey 8.1.0" in findings["redis"].detail
    assert findings["redis.eviction"].status == OK
    assert findings["redis.persistence"].status == WARN
    assert "--appendonly yes" in findings["redis.persistence"].fix


def test_unreachable_services_and_a_missing_database_each_say_how_to_fix_them(tmp_path):
    findings = by_check(diagnose(settings(tmp_path)))
    assert findings["config"].status == OK
    assert findings["redis"].status == FAIL and "THEOW_REDIS_URL" in findings["redis"].fix
    assert findings["milvus"].status == FAIL and "THEOW_MILVUS_URI" in findings["milvus"].fix
    assert findings["sql"].status == FAIL
    assert "does not exist" in findings["sql"].detail
    assert "theow db upgrade" in findings["sql"].fix
    assert findings["rules"].status == OK
    assert findings["index"].status == SKIP  # nothing to compare without Milvus
    assert findings["llm"].status == SKIP  # not an explorer


def test_the_schema_must_be_at_the_head_revision(tmp_path):
    s = settings(tmp_path)
    migrate(s.store_url, "0001")
    stale = by_check(diagnose(s))
    assert stale["sql"].status == OK
    assert stale["sql.migrations"].status == FAIL
    assert "at 0001" in stale["sql.migrations"].detail
    assert "theow db upgrade" in stale["sql.migrations"].fix

    migrate(s.store_url)
    assert by_check(diagnose(s))["sql.migrations"].status == OK


def test_invalid_rules_are_reported_with_file_and_line(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "broken.rule.yaml").write_text("name: broken\nmode: track\nwhen: []\n")
    finding = by_check(diagnose(settings(tmp_path, THEOW_RULES_DIR=str(rules))))["rules"]
    assert finding.status == FAIL
    assert "broken.rule.yaml" in finding.detail
    assert "theow rules check" in finding.fix


def test_an_explorer_without_an_api_key_fails_and_with_one_passes_without_showing_it(tmp_path):
    missing = by_check(diagnose(settings(tmp_path, THEOW_EXPLORE="1")))["llm"]
    assert missing.status == FAIL and "GEMINI_API_KEY" in missing.fix
    present = diagnose(settings(tmp_path, THEOW_EXPLORE="1", GEMINI_API_KEY="AIza-top-secret"))
    assert by_check(present)["llm"].status == OK
    assert "AIza-top-secret" not in json.dumps([f.__dict__ for f in present])


def test_an_explorer_on_a_local_model_needs_its_endpoint_and_is_told_its_price(tmp_path):
    local = {"THEOW_EXPLORE": "1", "THEOW_LLM": "openai/qwen2.5-coder:14b"}
    no_endpoint = by_check(diagnose(settings(tmp_path, **local)))["llm"]
    assert no_endpoint.status == FAIL and "THEOW_LLM_BASE_URL" in no_endpoint.detail

    local["THEOW_LLM_BASE_URL"] = "http://gpu-box:11434/v1"
    unpriced = by_check(diagnose(settings(tmp_path, **local)))["llm"]
    assert unpriced.status == WARN and "THEOW_LLM_PRICE" in unpriced.fix

    priced = diagnose(settings(tmp_path, **local, THEOW_LLM_PRICE="0,0",
                               THEOW_LLM_API_KEY="sk-local-top-secret"))  # fmt: skip
    found = by_check(priced)["llm"]
    assert found.status == OK
    assert found.detail == (
        "llm openai/qwen2.5-coder:14b at http://gpu-box:11434/v1: API key set;"
        " $0/$0 per million tokens"
    )
    assert "sk-local-top-secret" not in json.dumps([f.__dict__ for f in priced])


def test_a_gemini_secondary_without_a_key_fails_on_its_own_line(tmp_path):
    local = {"THEOW_EXPLORE": "1", "THEOW_LLM": "openai/q", "THEOW_LLM_PRICE": "0,0",
             "THEOW_LLM_BASE_URL": "http://gpu-box:8000/v1", "THEOW_LLM_SECONDARY": "gemini/gemini-2.5-pro"}  # fmt: skip
    findings = by_check(diagnose(settings(tmp_path, **local)))
    assert findings["llm"].status == OK
    assert findings["llm.secondary"].status == FAIL
    assert "GEMINI_API_KEY" in findings["llm.secondary"].fix


def test_a_visibility_timeout_shorter_than_an_exploration_is_a_failure(tmp_path):
    s = settings(tmp_path, THEOW_VISIBILITY_TIMEOUT="600", THEOW_EXPLORE_TIME_LIMIT="900")
    finding = by_check(diagnose(s))["config"]
    assert finding.status == FAIL
    assert "explore_time_limit (900s)" in finding.detail


@pytest.mark.parametrize("as_json", [True, False])
def test_the_command_exits_1_on_a_failure_and_never_prints_a_password(
    tmp_path, monkeypatch, as_json
):
    from theow_workers.cli import app

    for key, value in {
        "THEOW_REDIS_URL": f"redis://:redis-secret-pw@127.0.0.1:{free_port()}/0",
        "THEOW_MILVUS_URI": f"http://127.0.0.1:{free_port()}",
        "THEOW_DATABASE_URL": "postgresql+psycopg://theow:pg-secret-pw@127.0.0.1:1/theow",
        "THEOW_RULES_DIR": str(FIXTURES / "rules"),
        "THEOW_ACTIONS_DIR": str(FIXTURES / "actions"),
        "THEOW_FLOWER_PASSWORD": "flower-secret-pw",
        "COLUMNS": "300",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["doctor", "--json"] if as_json else ["doctor"])
    assert result.exit_code == 1, result.output
    for secret in ("redis-secret-pw", "pg-secret-pw", "flower-secret-pw"):
        assert secret not in result.output
    if as_json:
        report = json.loads(result.stdout)  # the "checking…" line of a slow run goes to stderr
        assert report["ok"] is False
        assert {c["check"] for c in report["checks"]} >= {"redis", "milvus", "sql", "rules"}
    else:
        assert "FAIL" in result.output and "check(s) failed" in result.output


def test_the_explain_queue_is_checked_only_when_explain_is_on():
    from theow_workers.ops.checks import _consumer_finding

    off = _consumer_finding("explain", [], explore=False, explain=False)
    assert off.status == SKIP and "THEOW_EXPLAIN is off" in off.detail
    on = _consumer_finding("explain", [], explore=False, explain=True)
    assert on.status == WARN and "no explanation" in on.detail and "--queues explain" in on.fix


def test_no_budget_is_said_when_a_model_is_called_without_one():
    from theow_workers.ops.checks import Context, check_budget

    (finding,) = check_budget(Context(Settings.load(env={"THEOW_EXPLAIN": "on"}, path=Path("-"))))
    assert finding.status == OK and "THEOW_LLM_DAILY_BUDGET unset" in finding.detail
    (idle,) = check_budget(Context(Settings.load(env={}, path=Path("-"))))
    assert idle.status == SKIP
