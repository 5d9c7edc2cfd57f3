"""The Gemini gateway, through the real google-genai client, against the fake Gemini server.

The fake checks what Gemini checks (API key header, thought signatures sent
back, one function response per function call), so a session that ends well
here also kept the protocol.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from google import genai
from google.genai import errors, types

from tests.conftest import free_port
from tests.fakes.gemini_server import (
    FakeGemini,
    api_error,
    combine,
    declared,
    function_call,
    function_responses,
    quota_error,
    server_error,
    text,
    user_texts,
    with_usage,
)
from theow_workers.adapters.gemini import GeminiGateway
from theow_workers.adapters.memory import InMemoryLimiter
from theow_workers.adapters.providers import gateway_from_settings
from theow_workers.config import ConfigError, Settings
from theow_workers.core.llm.model import (
    Budget,
    FallbackRunner,
    ModelError,
    Outcome,
    QuotaExhausted,
    SessionEnd,
    ToolError,
    offered,
    tool_from_callable,
)
from theow_workers.core.llm.session import NUDGE, ToolLoop
from theow_workers.core.ports import Permission

KEY = "AIzaSyFAKE-test-key-0123456789abcdefghij"
MODEL = "gemini-2.5-flash"
SECONDARY = "gemini-2.5-pro"


@pytest.fixture
def fake() -> Iterator[FakeGemini]:
    with FakeGemini(api_key=KEY) as server:
        yield server


@pytest.fixture
def limiter() -> InMemoryLimiter:
    return InMemoryLimiter()


@pytest.fixture
def gateway(fake: FakeGemini, limiter: InMemoryLimiter) -> ToolLoop:
    return ToolLoop(GeminiGateway(MODEL, api_key=KEY, base_url=fake.url), limiter)


# --- the deployment's tools, as a test declares them ------------------------

LOG = "error: could not resolve host: proxy.internal\nexit status 128"
calls: list[tuple[str, dict[str, Any]]] = []


def read_log(lines: int = 50) -> str:
    """Read the last lines of the failure's log.

    Args:
        lines: how many lines from the end.
    """
    calls.append(("read_log", {"lines": lines}))
    return "\n".join(LOG.splitlines()[-lines:])


def read_file(path: str) -> str:
    """Read a file of the build's workspace.

    Args:
        path: relative to the workspace.
    """
    if path != "Makefile":
        raise ToolError(f"no such file: {path}")
    return "all:\n\tgit fetch"


def run_shell(command: str) -> str:
    """Run a shell command in the workspace.

    Args:
        command: the command line.
    """
    raise AssertionError("never offered")


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


TOOLS = [
    tool_from_callable(read_log, permissions=[Permission.FS_READ]),
    tool_from_callable(read_file, permissions=[Permission.FS_READ]),
    tool_from_callable(run_shell, permissions=[Permission.SHELL]),
    tool_from_callable(submit_rule),
    tool_from_callable(give_up),
]
RULE = "name: proxy_dns\nwhen:\n  - fact: stderr\n    contains: could not resolve host\n"


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    calls.clear()


def tools(*granted: Permission) -> list[Any]:
    return offered(TOOLS, granted or [Permission.FS_READ])


# --- sessions ---------------------------------------------------------------


def test_a_session_calls_tools_with_the_models_arguments_and_ends_with_a_proposal(
    fake: FakeGemini, gateway: ToolLoop
) -> None:
    fake.script(
        MODEL,
        [
            function_call("read_log", lines=1),
            function_call("submit_rule", rule_yaml=RULE, actions=[]),
        ],
    )

    result = gateway.tool_session("The build failed: fix it.", tools(), Budget())

    assert result.outcome is Outcome.PROPOSAL
    assert result.payload == {"rule_yaml": RULE, "actions": []}
    assert calls == [("read_log", {"lines": 1})]
    assert [(c.name, c.args) for c in result.tool_calls] == [
        ("read_log", {"lines": 1}),
        ("submit_rule", {"rule_yaml": RULE, "actions": []}),
    ]
    # The second request carried the tool's result back, under the call's id, and the
    # fake accepted the model turn: its thought signature came back unchanged.
    second = fake.bodies(MODEL)[1]
    [answer] = function_responses(second)
    assert answer["name"] == "read_log"
    assert answer["response"] == {"result": "exit status 128"}
    assert answer["id"] == second["contents"][1]["parts"][0]["functionCall"]["id"]
    assert second["contents"][1]["parts"][0]["thoughtSignature"]
    assert fake.rejections == []
    assert result.turns == 2
    assert result.models == [MODEL]
    assert (result.tokens_in, result.tokens_out) == (fake.tokens_in(), fake.tokens_out())
    assert result.tokens_in > 0 and result.tokens_out > 0


def test_parallel_function_calls_are_each_answered(fake: FakeGemini, gateway: ToolLoop) -> None:
    fake.script(
        MODEL,
        [
            combine(
                function_call("read_log", lines=1), function_call("read_file", path="Makefile")
            ),
            function_call("give_up", reason="seen enough"),
        ],
    )

    result = gateway.tool_session("go", tools(), Budget())

    assert result.outcome is Outcome.GAVE_UP
    assert [r["name"] for r in function_responses(fake.bodies()[1])] == ["read_log", "read_file"]
    assert fake.rejections == []


def test_the_fake_refuses_a_function_call_turn_without_its_thought_signature(
    fake: FakeGemini,
) -> None:
    fake.script(MODEL, [function_call("read_log", lines=1), text("DONE")])
    client = genai.Client(
        api_key=KEY,
        http_options=types.HttpOptions(
            base_url=fake.url, retry_options=types.HttpRetryOptions(attempts=1)
        ),
    )
    history = [types.Content(role="user", parts=[types.Part(text="go")])]
    reply = client.models.generate_content(model=MODEL, contents=history)
    turn = reply.candidates[0].content  # type: ignore[index]
    assert turn is not None and turn.parts
    call = turn.parts[0].function_call
    assert call is not None
    stripped = types.Content(role="model", parts=[types.Part(function_call=call)])
    answer = types.Part(
        function_response=types.FunctionResponse(name=call.name, id=call.id, response={})
    )

    with pytest.raises(errors.ClientError) as refused:
        client.models.generate_content(
            model=MODEL, contents=[*history, stripped, types.Content(role="user", parts=[answer])]
        )

    assert refused.value.code == 400
    assert "thought_signature" in str(refused.value.message)


def test_a_tool_error_goes_back_to_the_model_which_corrects_itself(
    fake: FakeGemini, gateway: ToolLoop
) -> None:
    def brain(model: str, request: dict[str, Any]) -> dict[str, Any]:
        answers = function_responses(request)
        if not answers:
            return function_call("read_file", path="makefile")
        if "error" in answers[-1]["response"]:
            return function_call("read_file", path="Makefile")
        return function_call("give_up", reason=answers[-1]["response"]["result"])

    fake.brain = brain

    result = gateway.tool_session("go", tools(), Budget())

    assert result.outcome is Outcome.GAVE_UP
    assert result.reason == "all:\n\tgit fetch"
    first, second, _ = result.tool_calls
    assert (first.args, first.error) == ({"path": "makefile"}, "no such file: makefile")
    assert (second.args, second.error) == ({"path": "Makefile"}, "")
    assert function_responses(fake.bodies()[1])[0]["response"] == {
        "error": "no such file: makefile"
    }


def test_wrong_arguments_and_unknown_tools_are_errors_for_the_model_not_crashes(
    fake: FakeGemini, gateway: ToolLoop
) -> None:
    fake.script(
        MODEL,
        [
            function_call("read_log", count=3),
            function_call("run_shell", command="rm -rf /"),
            function_call("give_up", reason="stuck"),
        ],
    )

    result = gateway.tool_session("go", tools(), Budget())

    assert result.outcome is Outcome.GAVE_UP
    errors_seen = [c.error for c in result.tool_calls[:2]]
    assert errors_seen[0].startswith("bad arguments for read_log")
    assert errors_seen[1].startswith("unknown tool 'run_shell'")
    assert calls == []


def test_give_up_ends_the_session_with_its_reason(fake: FakeGemini, gateway: ToolLoop) -> None:
    fake.script(MODEL, [function_call("give_up", reason="the log is empty")])

    result = gateway.tool_session("go", tools(), Budget())

    assert result.outcome is Outcome.GAVE_UP
    assert result.reason == "the log is empty"
    assert [c.name for c in result.tool_calls] == ["give_up"]
    assert result.transcript[-1] == {"role": "tool", "name": "give_up", "ended": "gave_up"}


def test_a_line_saying_done_ends_a_session_without_a_tool(
    fake: FakeGemini, gateway: ToolLoop
) -> None:
    fake.script(MODEL, [text("I restarted the runner.\nDone\n")])

    result = gateway.tool_session("go", tools(), Budget())

    assert result.outcome is Outcome.DONE
    assert result.payload == {"text": "I restarted the runner.\nDone\n"}


def test_a_model_that_stops_twice_without_a_tool_call_gives_up(
    fake: FakeGemini, gateway: ToolLoop
) -> None:
    fake.script(MODEL, [text("Looks like DNS, done."), text("I think so.")])

    result = gateway.tool_session("go", tools(), Budget())

    assert result.outcome is Outcome.GAVE_UP
    assert result.reason == "model stopped without a tool call"
    assert user_texts(fake.bodies()[1])[-1] == NUDGE
    assert fake.rejections == []  # the text turn went back with its signature


# --- budgets ----------------------------------------------------------------


def test_the_tool_call_budget_stops_the_session_after_one_warning(
    fake: FakeGemini, gateway: ToolLoop
) -> None:
    fake.brain = lambda model, request: with_usage(
        function_call("read_log", lines=1), prompt=100, output=10
    )

    result = gateway.tool_session("go", tools(), Budget(max_tool_calls=3, warn_fraction=0.6))

    assert result.outcome is Outcome.BUDGET
    assert result.reason == "tool call budget used: 3 of 3 calls"
    assert len(fake.requests) == 3
    # Two of three calls used (over 60%): the third request carries the warning, once.
    warnings = [t for t in user_texts(fake.bodies()[-1]) if t.startswith("You have")]
    assert warnings == [
        "You have 1 tool calls / 599780 tokens left: call submit_rule or give_up now."
    ]
    assert not any(t.startswith("You have") for t in user_texts(fake.bodies()[1]))


def test_the_token_budget_warns_first_then_stops_before_a_turn_it_cannot_afford(
    fake: FakeGemini, gateway: ToolLoop
) -> None:
    fake.brain = lambda model, request: with_usage(
        function_call("read_log", lines=1), prompt=400, output=60, thoughts=40
    )

    result = gateway.tool_session("go", tools(), Budget(max_tokens=2000, warn_fraction=0.25))

    assert result.outcome is Outcome.BUDGET
    # The third turn would send about 400 + 100 tokens of history, its answers and the
    # margin: more than the 1000 left, so it was never sent and the budget holds.
    assert result.reason.startswith("token budget: the next turn would send about ")
    assert result.reason.endswith("1000 of 2000 are left; it was not sent")
    assert (result.tokens_in, result.tokens_out) == (800, 200)  # thoughts count as output
    bodies = fake.bodies()
    assert len(bodies) == 2
    warnings = [t for body in bodies for t in user_texts(body) if t.startswith("You have")]
    # The warning went out once, in the second request, after 500 of 2000 tokens.
    assert set(warnings) == {
        "You have 29 tool calls / 1500 tokens left: call submit_rule or give_up now."
    }
    assert not any(t.startswith("You have") for t in user_texts(bodies[0]))


# --- rate limits ------------------------------------------------------------


def test_a_per_minute_429_is_waited_out_then_the_turn_is_retried(
    fake: FakeGemini, gateway: ToolLoop
) -> None:
    fake.script(MODEL, [quota_error(retry_delay="1.5s"), function_call("give_up", reason="fine")])

    started = time.monotonic()
    result = gateway.tool_session("go", tools(), Budget())
    elapsed = time.monotonic() - started

    assert result.outcome is Outcome.GAVE_UP
    assert elapsed >= 1.5
    assert len(fake.requests) == 2
    assert fake.bodies()[0] == fake.bodies()[1]  # the same turn, sent again
    assert any("429" in turn.get("text", "") for turn in result.transcript)


def test_a_per_minute_429_longer_than_the_wait_budget_ends_the_session(
    fake: FakeGemini, gateway: ToolLoop
) -> None:
    fake.script(MODEL, [quota_error(retry_delay="30s")])

    with pytest.raises(QuotaExhausted) as stopped:
        gateway.tool_session("go", tools(), Budget(max_wait_seconds=5))

    assert len(fake.requests) == 1  # not waited out and asked again
    assert not stopped.value.daily
    assert stopped.value.retry_after == 30


def test_a_per_day_429_stops_this_model_until_the_quota_resets(
    fake: FakeGemini, limiter: InMemoryLimiter
) -> None:
    fake.script(
        MODEL, [function_call("read_log", lines=1), quota_error(per_day=True, retry_delay=None)]
    )
    gateway = ToolLoop(GeminiGateway(MODEL, api_key=KEY, base_url=fake.url), limiter)

    with pytest.raises(QuotaExhausted) as stopped:
        gateway.tool_session("go", tools(), Budget())

    assert stopped.value.daily
    assert stopped.value.retry_after == 24 * 3600
    assert "GenerateRequestsPerDayPerProjectPerModel-FreeTier" in stopped.value.reason
    partial = stopped.value.partial
    assert partial is not None and partial.turns == 1 and partial.tokens_in > 0

    # Later sessions sharing the limiter are refused before any request is sent.
    sent = len(fake.requests)
    again = ToolLoop(GeminiGateway(MODEL, api_key=KEY, base_url=fake.url), limiter)
    with pytest.raises(QuotaExhausted) as refused:
        again.tool_session("another failure", tools(), Budget())
    assert refused.value.daily
    assert len(fake.requests) == sent


# --- the secondary model ------------------------------------------------------


def test_the_secondary_takes_over_when_the_primary_keeps_failing(fake: FakeGemini) -> None:
    settings = Settings(
        llm=f"gemini/{MODEL}",
        llm_secondary=f"gemini/{SECONDARY}",
        gemini_api_key=KEY,
        gemini_base_url=fake.url,
    )
    gateway = gateway_from_settings(settings)
    assert isinstance(gateway.primary, ToolLoop)
    gateway.primary.server_retry_delays = (0.01, 0.01)
    fake.script(
        MODEL, [function_call("read_log", lines=1), server_error(), server_error(), server_error()]
    )
    fake.script(SECONDARY, [function_call("submit_rule", rule_yaml=RULE, actions=[])])

    result = gateway.tool_session("go", tools(), Budget())

    assert result.outcome is Outcome.PROPOSAL
    assert result.models == [MODEL, SECONDARY]
    assert len(fake.bodies(MODEL)) == 4  # one turn, then the failing turn tried three times
    assert fake.sessions(SECONDARY) == 1
    assert result.tokens_in == fake.tokens_in(MODEL) + fake.tokens_in(SECONDARY)
    assert result.tokens_out == fake.tokens_out()
    assert result.reason.startswith(f"primary model failed ({MODEL}: 500 INTERNAL")


def test_a_daily_quota_on_the_primary_hands_over_to_the_secondary(fake: FakeGemini) -> None:
    limiter = InMemoryLimiter()
    primary = ToolLoop(GeminiGateway(MODEL, api_key=KEY, base_url=fake.url), limiter)
    secondary = ToolLoop(GeminiGateway(SECONDARY, api_key=KEY, base_url=fake.url), limiter)
    gateway = FallbackRunner(primary, secondary)
    fake.script(MODEL, [quota_error(per_day=True)])
    fake.brain = lambda model, request: function_call("give_up", reason=model)

    first = gateway.tool_session("go", tools(), Budget())
    second = gateway.tool_session("go", tools(), Budget())

    assert first.payload == second.payload == {"reason": SECONDARY}
    assert first.models == [MODEL, SECONDARY]
    assert "per-day quota exhausted" in first.reason
    assert len(fake.bodies(MODEL)) == 1  # the second session never tried the primary


# --- what the model is offered, and secrets -----------------------------------


def test_tools_whose_permission_was_not_granted_are_never_declared(
    fake: FakeGemini, gateway: ToolLoop
) -> None:
    fake.script(MODEL, [function_call("give_up", reason="x")])

    gateway.tool_session("go", tools(Permission.FS_READ), Budget())

    assert declared(fake.bodies()[0]) == ["read_log", "read_file", "submit_rule", "give_up"]
    schema = fake.bodies()[0]["tools"][0]["functionDeclarations"][0]
    assert schema["description"] == "Read the last lines of the failure's log."


def test_the_api_key_never_reaches_transcripts_or_error_messages(fake: FakeGemini) -> None:
    def leaky_tool() -> str:
        """Print the environment."""
        return f"GEMINI_API_KEY={KEY}"

    leaky = tool_from_callable(leaky_tool)
    gateway = ToolLoop(GeminiGateway(MODEL, api_key=KEY, base_url=fake.url), InMemoryLimiter())
    gateway.server_retry_delays = ()
    fake.script(
        MODEL,
        [
            function_call("leaky_tool"),
            api_error(500, "INTERNAL", f"upstream echoed x-goog-api-key: {KEY}"),
        ],
    )

    with pytest.raises(ModelError) as failed:
        gateway.tool_session("go", [leaky], Budget())

    partial = failed.value.partial
    assert partial is not None
    assert KEY not in json.dumps(partial.transcript)
    assert KEY not in str(failed.value)
    assert KEY not in repr(gateway)
    assert "***" in str(failed.value)


def test_a_missing_api_key_or_an_unknown_provider_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="GEMINI_API_KEY"):
        gateway_from_settings(Settings(gemini_api_key=""))
    with pytest.raises(ConfigError, match="provider 'anthropic' is not supported"):
        gateway_from_settings(Settings(llm="anthropic/claude", gemini_api_key=KEY))
    with pytest.raises(ConfigError, match="llm_secondary"):
        gateway_from_settings(Settings(llm_secondary="gemini-2.5-pro", gemini_api_key=KEY))


def test_an_answer_without_content_is_a_model_error(fake: FakeGemini, gateway: ToolLoop) -> None:
    fake.script(MODEL, [{"candidates": [{"finishReason": "MALFORMED_FUNCTION_CALL"}]}])

    with pytest.raises(ModelError, match="MALFORMED_FUNCTION_CALL") as failed:
        gateway.tool_session("go", tools(), Budget())

    assert failed.value.partial is not None and failed.value.partial.turns == 1


# --- one-shot generation --------------------------------------------------------


def test_generate_asks_for_json_of_the_schema_and_parses_it(
    fake: FakeGemini, gateway: ToolLoop
) -> None:
    schema = {"type": "object", "properties": {"cause": {"type": "string"}}}
    fake.script(MODEL, [text('{"cause": "dns"}')])

    answer = gateway.generate("Why did it fail?", schema)

    assert answer["json"] == {"cause": "dns"}
    assert answer["text"] == '{"cause": "dns"}'
    assert answer["tokens_in"] == fake.tokens_in() and answer["tokens_out"] == fake.tokens_out()
    config = fake.bodies()[0]["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseJsonSchema"] == schema


def test_an_answer_the_sdk_cannot_read_is_a_model_error(
    fake: FakeGemini, gateway: ToolLoop
) -> None:
    fake.script(MODEL, [{"candidates": "not a list"}])

    with pytest.raises(ModelError, match="malformed answer"):
        gateway.tool_session("go", tools(), Budget())


def test_an_unreachable_server_is_a_model_error_after_quick_retries() -> None:
    unreachable = GeminiGateway(MODEL, api_key=KEY, base_url=f"http://127.0.0.1:{free_port()}")
    gateway = ToolLoop(unreachable, InMemoryLimiter())
    gateway.server_retry_delays = (0.01, 0.01)

    with pytest.raises(ModelError, match="ConnectError") as failed:
        gateway.tool_session("go", tools(), Budget())

    partial = failed.value.partial
    assert partial is not None
    events = [t["text"] for t in partial.transcript if t["role"] == "event"]
    assert len(events) == 2 and events[0].startswith("retrying after ConnectError")
    assert KEY not in str(failed.value)


def test_another_process_reaches_the_fake_through_the_environment(fake: FakeGemini) -> None:
    fake.script(MODEL, [function_call("give_up", reason="from a worker")])
    script = (
        "from theow_workers.adapters.providers import gateway_from_settings\n"
        "from theow_workers.config import Settings\n"
        "from theow_workers.core.llm.model import Budget, Outcome, SessionEnd, tool_from_callable\n"
        "def give_up(reason: str) -> None:\n"
        "    '''Stop.'''\n"
        "    raise SessionEnd(Outcome.GAVE_UP, {'reason': reason})\n"
        "result = gateway_from_settings(Settings.load()).tool_session(\n"
        "    'go', [tool_from_callable(give_up)], Budget())\n"
        "print(result.outcome, result.reason)\n"
    )
    env = {
        **os.environ,
        "GEMINI_API_KEY": KEY,
        "THEOW_GEMINI_BASE_URL": fake.url,
        "THEOW_LLM": f"gemini/{MODEL}",
        "THEOW_CONFIG": "/nonexistent/theow.yaml",
    }
    env.pop("GOOGLE_API_KEY", None)

    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "gave_up from a worker"
    assert fake.sessions(MODEL) == 1
