"""The OpenAI-compatible gateway, through the real openai client, against the fake server.

The fake checks what OpenAI-compatible servers check (the bearer key, one
``role: tool`` message per tool call, each naming an id it issued), so a
session that ends well here also kept the protocol.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port
from tests.fakes import gemini_server
from tests.fakes.openai_server import (
    MODEL,
    FakeOpenAI,
    Malformed,
    Slow,
    api_error,
    combine,
    declared,
    function_call,
    function_responses,
    quota_error,
    server_error,
    text,
    with_usage,
)
from theow_workers.adapters.memory import InMemoryLimiter
from theow_workers.adapters.openai_chat import OpenAIChatGateway
from theow_workers.adapters.providers import gateway_from_settings
from theow_workers.config import ConfigError, Settings
from theow_workers.core.llm.model import (
    Budget,
    ModelError,
    Outcome,
    QuotaExhausted,
    SessionEnd,
    tool_from_callable,
)
from theow_workers.core.llm.session import ToolLoop
from theow_workers.core.ports import ModelRequest, ModelUnavailable, UserTurn

pytestmark = pytest.mark.integration

NO_FILE = Path("-")  # no theow.yaml: the settings are the environment given
KEY = "sk-fake-openai-test-key-0123456789abcdef"
STRONG = "strong-model"
RULE = "name: proxy_dns\nwhen:\n  - fact: stderr\n    contains: could not resolve host\n"
LOG = "error: could not resolve host: proxy.internal\nexit status 128"


def read_log(lines: int = 50) -> str:
    """Read the last lines of the failure's log.

    Args:
        lines: how many lines from the end.
    """
    return "\n".join(LOG.splitlines()[-lines:])


def submit_rule(rule_yaml: str, actions: list[dict[str, str]]) -> None:
    """End the session with a proposed rule.

    Args:
        rule_yaml: the rule.
        actions: new actions, each {name, code}.
    """
    raise SessionEnd(Outcome.PROPOSAL, {"rule_yaml": rule_yaml, "actions": actions})


def give_up(reason: str) -> None:
    """End the session without a proposal.

    Args:
        reason: why.
    """
    raise SessionEnd(Outcome.GAVE_UP, {"reason": reason})


TOOLS = [tool_from_callable(f) for f in (read_log, submit_rule, give_up)]


class Clock:
    """A limiter's clock that moves only when the limiter sleeps: waits cost no test time."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(api_key=KEY) as server:
        yield server


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def limiter(clock: Clock) -> InMemoryLimiter:
    return InMemoryLimiter(clock=clock, sleep=clock.sleep)


def loop(fake: FakeOpenAI, limiter: InMemoryLimiter, model: str = MODEL, **kw: Any) -> ToolLoop:
    return ToolLoop(OpenAIChatGateway(model, fake.url, KEY, **kw), limiter, sleep=lambda s: None)


# --- sessions -------------------------------------------------------------------


def test_a_session_calls_tools_and_answers_each_call_by_its_id_until_a_proposal(
    fake: FakeOpenAI, limiter: InMemoryLimiter
) -> None:
    fake.script(
        MODEL,
        [
            combine(function_call("read_log", lines=1), function_call("read_log", lines=2)),
            function_call("submit_rule", rule_yaml=RULE, actions=[]),
        ],
    )

    result = loop(fake, limiter).tool_session("Why did it fail?", TOOLS, Budget())

    assert result.outcome is Outcome.PROPOSAL
    assert result.payload == {"rule_yaml": RULE, "actions": []}
    assert [c.name for c in result.tool_calls] == ["read_log", "read_log", "submit_rule"]
    answers = function_responses(fake.bodies()[1])
    assert [a["response"] for a in answers] == [
        {"result": "exit status 128"},
        {"result": LOG},
    ]
    assert [a["id"] for a in answers] == ["call_1", "call_2"]  # the fake's ids, echoed
    assert fake.rejections == []
    assert result.tokens_in == fake.tokens_in() and result.tokens_out == fake.tokens_out()
    assert declared(fake.bodies()[0]) == ["read_log", "submit_rule", "give_up"]
    tool = fake.bodies()[0]["tools"][0]
    assert tool["type"] == "function"
    assert tool["function"]["parameters"]["properties"]["lines"]["type"] == "integer"


def test_a_model_that_answers_without_a_tool_call_is_nudged_then_given_up(
    fake: FakeOpenAI, limiter: InMemoryLimiter
) -> None:
    fake.brain = lambda model, body: text("I think it is DNS.")

    result = loop(fake, limiter).tool_session("go", TOOLS, Budget())

    assert result.outcome is Outcome.GAVE_UP
    last = fake.bodies()[-1]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "user"]
    assert last[1]["content"] == "I think it is DNS."


def test_a_server_that_reports_no_usage_is_charged_an_estimate(
    fake: FakeOpenAI, limiter: InMemoryLimiter
) -> None:
    answer = function_call("give_up", reason="nothing")
    fake.script(MODEL, [{**answer, "usage": None}])

    result = loop(fake, limiter).tool_session("x" * 4000, TOOLS, Budget())

    assert result.outcome is Outcome.GAVE_UP
    assert result.tokens_in >= 1000 and result.tokens_out > 0  # the prompt alone is ~1000


def test_generate_asks_for_json_of_the_schema_and_parses_it(
    fake: FakeOpenAI, limiter: InMemoryLimiter
) -> None:
    schema = {"type": "object", "properties": {"cause": {"type": "string"}}}
    fake.script(MODEL, [with_usage(text('{"cause": "dns"}'), prompt=30, output=5)])

    answer = loop(fake, limiter).generate("Why did it fail?", schema)

    assert answer == {
        "text": '{"cause": "dns"}',
        "json": {"cause": "dns"},
        "tokens_in": 30,
        "tokens_out": 5,
        "model": MODEL,
        "cost": 0.0,
    }  # fmt: skip (no price given)
    body = fake.bodies()[0]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema},
    }
    assert "tools" not in body


# --- rate limits ----------------------------------------------------------------


def test_a_429_is_waited_out_through_the_limiter_for_as_long_as_retry_after_says(
    fake: FakeOpenAI, limiter: InMemoryLimiter, clock: Clock
) -> None:
    fake.script(MODEL, [quota_error(retry_delay="7s"), function_call("give_up", reason="fine")])

    result = loop(fake, limiter).tool_session("go", TOOLS, Budget())

    assert result.outcome is Outcome.GAVE_UP
    assert clock.slept == [7.0]  # the limiter held the retry back, as every worker's would be
    assert len(fake.requests) == 2 and fake.bodies()[0] == fake.bodies()[1]
    assert any("429" in t.get("text", "") and "7s" in t["text"] for t in result.transcript)


def test_a_per_day_429_stops_this_model_for_every_later_session(
    fake: FakeOpenAI, limiter: InMemoryLimiter
) -> None:
    fake.script(MODEL, [quota_error(per_day=True, retry_delay="3600s")])

    with pytest.raises(QuotaExhausted) as stopped:
        loop(fake, limiter).tool_session("go", TOOLS, Budget())

    assert stopped.value.daily and stopped.value.retry_after == 3600
    sent = len(fake.requests)
    with pytest.raises(QuotaExhausted):
        loop(fake, limiter).tool_session("another failure", TOOLS, Budget())
    assert len(fake.requests) == sent  # refused before anything was sent


# --- failures -------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer", [Malformed(), Malformed(b"<html>upstream proxy error</html>")], ids=["shape", "html"]
)
def test_a_malformed_answer_is_a_model_error_saying_so(
    fake: FakeOpenAI, limiter: InMemoryLimiter, answer: Malformed
) -> None:
    fake.script(MODEL, [answer])

    with pytest.raises(ModelError, match="malformed answer") as failed:
        loop(fake, limiter).tool_session("go", TOOLS, Budget())

    assert failed.value.partial is not None
    assert len(fake.requests) == 1  # not retried: the same question would get the same answer


def test_an_answer_slower_than_the_timeout_is_unavailable_and_the_turn_is_retried(
    fake: FakeOpenAI, limiter: InMemoryLimiter
) -> None:
    gateway = OpenAIChatGateway(MODEL, fake.url, KEY, timeout=0.5)
    fake.script(MODEL, [Slow(3)])
    with pytest.raises(ModelUnavailable, match="timed out"):
        gateway.send(ModelRequest([UserTurn(("go",))]))

    fake.script(MODEL, [Slow(3), function_call("give_up", reason="second try")])
    result = ToolLoop(gateway, limiter, sleep=lambda s: None).tool_session("go", TOOLS, Budget())
    assert result.payload == {"reason": "second try"}
    assert any(t["text"].startswith("retrying after") for t in result.transcript
               if t["role"] == "event")  # fmt: skip


def test_server_errors_are_retried_then_the_secondary_of_another_provider_takes_over(
    fake: FakeOpenAI,
) -> None:
    with gemini_server.FakeGemini() as gemini:
        settings = Settings(
            llm=f"openai/{MODEL}",
            llm_base_url=fake.url,
            llm_api_key=KEY,
            llm_secondary="gemini/gemini-2.5-pro",
            gemini_api_key="AIza-secondary-key-0123456789",
            gemini_base_url=gemini.url,
        )
        gateway = gateway_from_settings(settings)
        assert isinstance(gateway.primary, ToolLoop)
        gateway.primary.server_retry_delays = (0.01, 0.01)
        fake.script(MODEL, [server_error()] * 3)
        gemini.script("gemini-2.5-pro", [gemini_server.function_call("give_up", reason="pro")])

        result = gateway.tool_session("go", TOOLS, Budget())

    assert result.payload == {"reason": "pro"}
    assert result.models == [MODEL, "gemini-2.5-pro"]
    assert len(fake.requests) == 3 and gemini.sessions() == 1
    assert result.reason.startswith(f"primary model failed ({MODEL}: 500")


def test_the_api_key_is_in_no_error_message_and_no_transcript(
    fake: FakeOpenAI, limiter: InMemoryLimiter
) -> None:
    echoed = f"upstream saw Authorization: Bearer {KEY}"
    fake.script(
        MODEL,
        [
            function_call("read_log", lines=1),
            api_error(500, echoed, "server_error"),
            api_error(500, echoed, "server_error"),
            api_error(500, echoed, "server_error"),
            api_error(400, echoed, "invalid_request_error"),
            Malformed(echoed.encode()),
        ],
    )
    messages = []
    gateway = loop(fake, limiter)
    with pytest.raises(ModelError) as failed:
        gateway.tool_session("go", TOOLS, Budget())
    messages.append(str(failed.value) + json.dumps(failed.value.partial.transcript))
    for _ in range(2):  # the 400, then the malformed answer
        with pytest.raises(ModelError) as failed:
            gateway.tool_session("go", TOOLS, Budget())
        messages.append(str(failed.value))
    unreachable = OpenAIChatGateway(MODEL, f"http://127.0.0.1:{free_port()}/v1", KEY)
    with pytest.raises(ModelUnavailable) as down:
        unreachable.send(ModelRequest([UserTurn(("go",))]))
    messages += [str(down.value), repr(gateway), str(unreachable.check())]
    messages.append(str(OpenAIChatGateway(MODEL, fake.url, KEY + "-wrong").check()))

    assert all(KEY not in m for m in messages), messages
    assert all("***" in m for m in messages[:3])  # the echo is there, masked
    assert "the key was refused" in messages[-1]


# --- the model's check, and settings -----------------------------------------------


def test_check_names_what_is_wrong_with_a_model_before_any_token_is_spent(
    fake: FakeOpenAI,
) -> None:
    assert OpenAIChatGateway(MODEL, fake.url, KEY).check() is None
    unknown = OpenAIChatGateway("llama-9-huge", fake.url, KEY).check()
    assert unknown == (
        f"model llama-9-huge at {fake.url}: no such model (the server lists local-model,"
        " strong-model)"
    )
    wrong_root = OpenAIChatGateway(MODEL, fake.url.removesuffix("/v1"), KEY).check()
    assert wrong_root is not None and "often .../v1" in wrong_root
    port = free_port()
    down = OpenAIChatGateway(MODEL, f"http://127.0.0.1:{port}/v1").check()
    assert down is not None and "cannot be reached" in down
    assert fake.tokens_in() == 0


def test_each_configured_model_has_its_own_provider_endpoint_key_and_price(
    fake: FakeOpenAI,
) -> None:
    settings = Settings.load(
        env={
            "THEOW_LLM": "gemini/gemini-2.5-flash",
            "GEMINI_API_KEY": "AIza-primary-key-0123456789",
            "THEOW_LLM_SECONDARY": f"openai/{STRONG}",
            "THEOW_LLM_SECONDARY_BASE_URL": fake.url,
            "THEOW_LLM_SECONDARY_API_KEY": KEY,
            "THEOW_LLM_SECONDARY_PRICE": "0,0",
        },
        path=NO_FILE,
    )
    gateway = gateway_from_settings(settings)
    fake.script(STRONG, [function_call("give_up", reason="local")])

    result = gateway.tool_session("go", TOOLS, Budget(), use_secondary=True)

    assert result.payload == {"reason": "local"} and result.models == [STRONG]
    assert settings.model_prices[STRONG] == (0.0, 0.0)
    assert settings.model_prices["gemini-2.5-flash"] == (0.30, 2.50)  # the table still holds


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"THEOW_LLM": "openai/qwen2.5"}, "setting 'llm_base_url' (THEOW_LLM_BASE_URL) '': not set"),
        (
            {"THEOW_LLM": "openai/qwen2.5", "THEOW_LLM_BASE_URL": "localhost:8000/v1"},
            "not an http:// or https:// URL with a host",
        ),
        (
            {"GEMINI_API_KEY": "k", "THEOW_LLM_SECONDARY": "openai/x",
             "THEOW_LLM_SECONDARY_BASE_URL": "http://:pw@gpu:99999/v1"},
            "setting 'llm_secondary_base_url' (THEOW_LLM_SECONDARY_BASE_URL) "
            "'http://:***@gpu:99999/v1': port '99999'",
        ),
        ({"THEOW_LLM": "anthropic/claude"}, "provider 'anthropic' is not supported"),
        ({"THEOW_LLM": "qwen2.5"}, "setting 'llm' (THEOW_LLM): model 'qwen2.5' must be named"),
    ],
    ids=["no-endpoint", "no-scheme", "bad-port", "provider", "no-provider"],
)  # fmt: skip
def test_a_bad_model_setting_is_one_line_naming_the_setting(
    env: dict[str, str], message: str
) -> None:
    settings = Settings.load(env=env, path=NO_FILE)
    with pytest.raises(ConfigError) as bad:
        gateway_from_settings(settings)
    assert message in str(bad.value) and "\n" not in str(bad.value)
    assert ":pw@" not in str(bad.value)


def test_a_price_that_is_not_two_numbers_is_refused_when_settings_load() -> None:
    with pytest.raises(ConfigError, match="bad THEOW_LLM_SECONDARY_PRICE"):
        Settings.load(env={"THEOW_LLM_SECONDARY_PRICE": "1,2,3"}, path=NO_FILE)
    with pytest.raises(ConfigError, match="bad THEOW_LLM_PRICE"):
        Settings.load(env={"THEOW_LLM_PRICE": "-1,0"}, path=NO_FILE)


def test_doctor_deep_asks_the_endpoint_whether_it_serves_the_model(fake: FakeOpenAI) -> None:
    from theow_workers.ops.checks import FAIL, OK, Context, check_llm

    env = {"THEOW_EXPLORE": "1", "THEOW_LLM_BASE_URL": fake.url, "THEOW_LLM_API_KEY": KEY,
           "THEOW_LLM_PRICE": "0,0"}  # fmt: skip
    served = Settings.load(env={**env, "THEOW_LLM": f"openai/{MODEL}"}, path=NO_FILE)
    (found,) = check_llm(Context(served, deep=True))
    assert found.status == OK

    missing = Settings.load(env={**env, "THEOW_LLM": "openai/llama-9-huge"}, path=NO_FILE)
    (found,) = check_llm(Context(missing, deep=True))
    assert found.status == FAIL and "no such model" in found.detail
    assert KEY not in found.detail + found.fix
