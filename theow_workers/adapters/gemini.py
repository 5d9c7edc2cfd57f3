"""Gemini through google-genai 3.x: our own tool loop, one request per turn.

Automatic function calling is off and the SDK's own retries are off, so every
request passes the rate limiter and every turn's usage is counted. Each model
turn goes back to Gemini unchanged: a function-call turn without its thought
signature is refused.

>>> gateway = gateway_from_settings(Settings.load())  # doctest: +SKIP
>>> result = gateway.tool_session(prompt, offered(tools, granted), Budget())  # doctest: +SKIP

Warning: a tool raising anything but SessionEnd is reported to the model as an
error and the session goes on, so a time limit that arrives as an Exception
while a tool runs is reported, not propagated.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from collections.abc import Sequence
from typing import Any

import httpx2  # the transport google-genai 3.x uses
import pydantic
from google import genai
from google.genai import errors, types

from theow_workers.config import ConfigError, Settings
from theow_workers.core.limits import InMemoryLimiter
from theow_workers.core.llm import (
    Budget,
    FallbackGateway,
    ModelError,
    Outcome,
    QuotaExhausted,
    RateLimiter,
    SessionEnd,
    SessionResult,
    Tool,
    ToolCallRecord,
    ToolError,
    call_tool,
    split_model,
)

API_VERSION = "v1beta"
REQUEST_TIMEOUT_MS = 300_000
CHECK_TIMEOUT_MS = 10_000
DAY = 24 * 3600.0
DEFAULT_RETRY_DELAY = 10.0  # a per-minute 429 without RetryInfo
MAX_QUOTA_RETRIES = 5  # per-minute 429s waited out for one turn
TOKEN_MARGIN = 512  # added to each request's token estimate
TRANSCRIPT_LIMIT = 2048  # characters kept of each function response
NUDGE = "Call a tool: submit_rule or give_up"
WARNING = "You have {calls} tool calls / {tokens} tokens left: call submit_rule or give_up now."
_DONE = re.compile(r"^\s*done\s*$", re.I | re.M)
_DELAY = re.compile(r"^\s*([0-9.]+)s\s*$")


log = logging.getLogger("theow.llm")


class GeminiGateway:
    """One Gemini model; ``model`` is the bare id, e.g. ``gemini-2.5-flash``."""

    server_retry_delays: tuple[float, ...] = (1.0, 3.0)  # quick retries of a 5xx or network error

    def __init__(
        self,
        model: str,
        api_key: str,
        base_url: str | None = None,
        limiter: RateLimiter | None = None,
        api_version: str = API_VERSION,
    ) -> None:
        if not api_key.strip():
            raise ConfigError("GEMINI_API_KEY is not set: exploring needs a Gemini API key")
        self.model = model
        self.limiter: RateLimiter = limiter or InMemoryLimiter()
        self._secret = api_key.strip()
        self._client = genai.Client(
            api_key=self._secret,
            http_options=types.HttpOptions(
                base_url=base_url or None,
                api_version=api_version,
                timeout=REQUEST_TIMEOUT_MS,
                # One attempt: retries (429 above all) are ours, through the limiter.
                retry_options=types.HttpRetryOptions(attempts=1),
            ),
        )

    def __repr__(self) -> str:
        return f"GeminiGateway({self.model!r})"

    def check(self) -> str | None:
        """Why this model cannot be used (endpoint unreachable, key refused, no such
        model), or None. One metadata request: it costs no tokens."""
        options = types.GetModelConfig(http_options=types.HttpOptions(timeout=CHECK_TIMEOUT_MS))
        try:
            self._client.models.get(model=self.model, config=options)
        except errors.APIError as exc:
            if exc.code in (400, 401, 403, 404):
                return self._scrub(f"model {self.model}: {exc.code} {exc.message or exc.status}")
            return None  # a 429 or a 5xx now says nothing about the configuration
        except (httpx2.TransportError, OSError) as exc:
            return self._scrub(f"model {self.model}: the endpoint cannot be reached: {exc}")
        return None

    def tool_session(self, prompt: str, tools: Sequence[Tool], budget: Budget) -> SessionResult:
        by_name = {tool.name: tool for tool in tools}
        config = types.GenerateContentConfig(
            tools=[types.Tool(function_declarations=[_declaration(t) for t in tools])]
            if tools
            else None,
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        )
        result = SessionResult(outcome=Outcome.ERROR, models=[self.model])
        history = [types.Content(role="user", parts=[types.Part(text=prompt)])]
        self._record(result, {"role": "user", "text": prompt})
        declared = json.dumps([t.declaration() for t in tools])
        estimate = (len(prompt) + len(declared)) // 4 + TOKEN_MARGIN
        wait = _WaitBudget(budget.max_wait_seconds)
        warned = nudged = False
        while True:
            stop = _exhausted(result, budget)
            if stop:
                return _end(result, Outcome.BUDGET, reason=stop)
            response = self._send(history, config, estimate, wait, result)
            content, tokens_in, tokens_out = self._unpack(response, result)
            history.append(content)
            calls = [p.function_call for p in content.parts or [] if p.function_call]
            self._record(result, _model_turn(self.model, content, tokens_in, tokens_out))
            parts: list[types.Part] = []
            if not calls:
                said = _text(content)
                if _DONE.search(said):
                    return _end(result, Outcome.DONE, payload={"text": said})
                if nudged:
                    return _end(result, Outcome.GAVE_UP, reason="model stopped without a tool call")
                nudged = True
                parts.append(types.Part(text=NUDGE))
            for call in calls:
                if len(result.tool_calls) >= budget.max_tool_calls:
                    return _end(result, Outcome.BUDGET, reason=_exhausted(result, budget))
                try:
                    parts.append(self._run(call, by_name, result))
                except SessionEnd as end:
                    return _end(result, end.outcome, payload=end.payload)
            if not warned and _near_end(result, budget):
                warned = True
                left_calls = max(budget.max_tool_calls - len(result.tool_calls), 0)
                left_tokens = max(budget.max_tokens - result.tokens_in - result.tokens_out, 0)
                parts.append(types.Part(text=WARNING.format(calls=left_calls, tokens=left_tokens)))
            history.append(types.Content(role="user", parts=parts))
            self._record(result, _user_turn(parts))
            added = sum(
                len(json.dumps(p.model_dump(mode="json", exclude_none=True))) for p in parts
            )
            estimate = tokens_in + tokens_out + added // 4 + TOKEN_MARGIN

    def generate(self, prompt: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
        config = (
            types.GenerateContentConfig(
                response_mime_type="application/json", response_json_schema=schema
            )
            if schema is not None
            else None
        )
        contents = [types.Content(role="user", parts=[types.Part(text=prompt)])]
        estimate = len(prompt) // 4 + TOKEN_MARGIN
        response = self._send(contents, config, estimate, _WaitBudget(Budget().max_wait_seconds))
        content, tokens_in, tokens_out = self._unpack(response, None)
        said = _text(content)
        parsed: Any = None
        if schema is not None:
            try:
                parsed = json.loads(said)
            except ValueError:
                parsed = None
        return {"text": said, "json": parsed, "tokens_in": tokens_in, "tokens_out": tokens_out}

    # --- one request ------------------------------------------------------

    def _send(
        self,
        contents: list[types.Content],
        config: types.GenerateContentConfig | None,
        estimate: int,
        wait: _WaitBudget,
        result: SessionResult | None = None,
    ) -> types.GenerateContentResponse:
        """One turn through the limiter: per-minute 429s waited out, 5xx retried."""
        failures = quota_hits = 0
        while True:
            started = time.monotonic()
            try:
                self.limiter.acquire(self.model, estimate, wait.left())
            except QuotaExhausted as exc:
                raise QuotaExhausted(
                    exc.model, exc.reason, exc.retry_after, exc.daily, result
                ) from None
            finally:
                wait.spend(time.monotonic() - started)
            try:
                response = self._client.models.generate_content(
                    model=self.model, contents=contents, config=config
                )
            except errors.APIError as exc:
                self.limiter.settle(self.model, estimate, 0)
                if exc.code == 429:
                    quota_hits += 1
                    self._quota_hit(exc, wait, result, last=quota_hits > MAX_QUOTA_RETRIES)
                    continue
                message = f"{exc.code} {exc.status}: {exc.message}"
                if exc.code < 500 or failures >= len(self.server_retry_delays):
                    raise ModelError(self._scrub(f"{self.model}: {message}"), result) from exc
            except (httpx2.TransportError, OSError) as exc:  # network, timeout
                self.limiter.settle(self.model, estimate, 0)
                message = f"{type(exc).__name__}: {exc}"
                if failures >= len(self.server_retry_delays):
                    raise ModelError(self._scrub(f"{self.model}: {message}"), result) from exc
            except (errors.UnknownApiResponseError, pydantic.ValidationError) as exc:
                self.limiter.settle(self.model, estimate, 0)
                raise ModelError(
                    self._scrub(f"{self.model}: malformed answer: {exc}"), result
                ) from exc
            else:
                usage = response.usage_metadata
                used = _usage(usage)
                self.limiter.settle(self.model, estimate, used[0] + used[1])
                return response
            self._record(result, {"role": "event", "text": f"retrying after {message}"})
            time.sleep(self.server_retry_delays[failures])
            failures += 1

    def _quota_hit(
        self, exc: errors.APIError, wait: _WaitBudget, result: SessionResult | None, last: bool
    ) -> None:
        """Share the back-off a 429 asks for; raise unless it is worth waiting for."""
        delay, daily, quota = _quota_details(exc.details)
        if daily:
            reason = f"per-day quota exhausted ({quota})"
            seconds = delay or DAY
            self.limiter.back_off(self.model, seconds, daily=True, reason=reason)
            self._record(result, {"role": "event", "text": f"429: {reason}"})
            raise QuotaExhausted(self.model, reason, seconds, daily=True, partial=result)
        reason = f"per-minute quota exceeded ({quota or 'unknown quota'})"
        seconds = DEFAULT_RETRY_DELAY if delay is None else delay
        self.limiter.back_off(self.model, seconds, daily=False, reason=reason)
        self._record(result, {"role": "event", "text": f"429: {reason}, retry in {seconds:g}s"})
        if last or seconds > wait.left():
            why = "too many retries" if last else f"beyond the {wait.total:g}s wait allowed"
            raise QuotaExhausted(
                self.model,
                f"{reason}: retry in {seconds:g}s is {why}",
                seconds,
                daily=False,
                partial=result,
            )

    def _unpack(
        self, response: types.GenerateContentResponse, result: SessionResult | None
    ) -> tuple[types.Content, int, int]:
        tokens_in, tokens_out = _usage(response.usage_metadata)
        if result is not None:
            result.turns += 1
            result.tokens_in += tokens_in
            result.tokens_out += tokens_out
        candidate = response.candidates[0] if response.candidates else None
        if candidate is None or candidate.content is None or not candidate.content.parts:
            finish = candidate.finish_reason if candidate else None
            feedback = response.prompt_feedback.block_reason if response.prompt_feedback else None
            raise ModelError(
                f"{self.model}: malformed answer: no content (finish reason {finish}, "
                f"block reason {feedback})",
                result,
            )
        return candidate.content, tokens_in, tokens_out

    # --- tools and records ------------------------------------------------

    def _run(
        self, call: types.FunctionCall, by_name: dict[str, Tool], result: SessionResult
    ) -> types.Part:
        """Run one tool call; its result or error becomes the function response."""
        name = call.name or ""
        args = dict(call.args or {})
        record = ToolCallRecord(name=name, args=args)
        result.tool_calls.append(record)
        log.info("%s: tool call %s(%s)", self.model, name, ", ".join(sorted(args))[:200])
        response: dict[str, Any]
        try:
            tool = by_name.get(name)
            if tool is None:
                raise ToolError(f"unknown tool {name!r}; the tools are {sorted(by_name)}")
            record.result = _plain(call_tool(tool, args))
            response = {"result": record.result}
        except SessionEnd as end:
            record.result = {"outcome": end.outcome.value, **end.payload}
            self._record(result, {"role": "tool", "name": name, "ended": end.outcome.value})
            raise
        except ToolError as exc:
            record.error = str(exc)
            log.info("%s: tool %s refused: %s", self.model, name, record.error[:300])
            response = {"error": record.error}
        except Exception as exc:  # a tool's bug is the model's information, not our crash
            record.error = f"{type(exc).__name__}: {exc}"
            response = {"error": record.error}
        return types.Part(
            function_response=types.FunctionResponse(name=name, id=call.id, response=response)
        )

    def _record(self, result: SessionResult | None, turn: dict[str, Any]) -> None:
        if result is not None:
            result.transcript.append(self._scrub(turn))

    def _scrub(self, value: Any) -> Any:
        """The value with the API key masked wherever it appears."""
        if isinstance(value, str):
            return value.replace(self._secret, "***")
        if isinstance(value, dict):
            return {k: self._scrub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._scrub(v) for v in value]
        return value


def gateway_from_settings(
    settings: Settings, limiter: RateLimiter | None = None
) -> FallbackGateway:
    """The primary model (``llm``) with the optional secondary (``llm_secondary``)."""
    shared = limiter or InMemoryLimiter()

    def build(setting: str, name: str) -> GeminiGateway:
        try:
            provider, model = split_model(name)
        except ValueError as exc:
            raise ConfigError(f"setting {setting!r}: {exc}") from None
        if provider != "gemini":
            raise ConfigError(
                f"setting {setting!r}: provider {provider!r} is not supported (only gemini/...)"
            )
        return GeminiGateway(
            model,
            settings.gemini_api_key.get_secret_value(),
            settings.gemini_base_url or None,
            shared,
        )

    primary = build("llm", settings.llm)
    secondary = build("llm_secondary", settings.llm_secondary) if settings.llm_secondary else None
    return FallbackGateway(primary, secondary)


@dataclasses.dataclass
class _WaitBudget:
    """Seconds a session may still spend waiting on the rate limiter."""

    total: float
    spent: float = 0.0

    def left(self) -> float:
        return max(self.total - self.spent, 0.0)

    def spend(self, seconds: float) -> None:
        self.spent += seconds


def _declaration(tool: Tool) -> types.FunctionDeclaration:
    return types.FunctionDeclaration(
        name=tool.name, description=tool.description, parameters_json_schema=tool.parameters
    )


def _usage(usage: types.GenerateContentResponseUsageMetadata | None) -> tuple[int, int]:
    if usage is None:
        return 0, 0
    output = (usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0)
    return usage.prompt_token_count or 0, output


def _quota_details(body: Any) -> tuple[float | None, bool, str]:
    """(retry delay in seconds, per-day?, quota id) from a 429's google.rpc details."""
    error = body.get("error", body) if isinstance(body, dict) else {}
    delay: float | None = None
    quotas: list[str] = []
    for detail in error.get("details", []) if isinstance(error, dict) else []:
        kind = str(detail.get("@type", ""))
        if kind.endswith("google.rpc.RetryInfo"):
            found = _DELAY.match(str(detail.get("retryDelay", "")))
            delay = float(found.group(1)) if found else None
        elif kind.endswith("google.rpc.QuotaFailure"):
            quotas += [str(v.get("quotaId", "")) for v in detail.get("violations", [])]
    daily = any("PerDay" in q for q in quotas)
    return delay, daily, ", ".join(q for q in quotas if q)


def _exhausted(result: SessionResult, budget: Budget) -> str:
    calls, tokens = len(result.tool_calls), result.tokens_in + result.tokens_out
    if calls >= budget.max_tool_calls:
        return f"tool call budget used: {calls} of {budget.max_tool_calls} calls"
    if tokens >= budget.max_tokens:
        return f"token budget used: {tokens} of {budget.max_tokens} tokens"
    return ""


def _near_end(result: SessionResult, budget: Budget) -> bool:
    calls = len(result.tool_calls) / max(budget.max_tool_calls, 1)
    tokens = (result.tokens_in + result.tokens_out) / max(budget.max_tokens, 1)
    return max(calls, tokens) >= budget.warn_fraction


def _end(
    result: SessionResult,
    outcome: Outcome,
    reason: str = "",
    payload: dict[str, Any] | None = None,
) -> SessionResult:
    result.outcome = outcome
    result.payload = payload or {}
    result.reason = reason or str(result.payload.get("reason", ""))
    return result


def _text(content: types.Content) -> str:
    return "".join(p.text for p in content.parts or [] if p.text and not p.thought)


def _model_turn(
    model: str, content: types.Content, tokens_in: int, tokens_out: int
) -> dict[str, Any]:
    calls = [
        {"name": p.function_call.name, "args": _plain(p.function_call.args or {})}
        for p in content.parts or []
        if p.function_call
    ]
    turn: dict[str, Any] = {"role": "model", "model": model, "text": _text(content)}
    if calls:
        turn["function_calls"] = calls
    turn["tokens_in"], turn["tokens_out"] = tokens_in, tokens_out
    return turn


def _user_turn(parts: list[types.Part]) -> dict[str, Any]:
    responses = [
        {"name": p.function_response.name, "response": _cut(p.function_response.response)}
        for p in parts
        if p.function_response
    ]
    turn: dict[str, Any] = {"role": "user", "text": "\n".join(p.text for p in parts if p.text)}
    if responses:
        turn["function_responses"] = responses
    return turn


def _cut(value: Any) -> Any:
    """A function response as the transcript keeps it: about 2 KB at most."""
    text = json.dumps(value, default=str)
    if len(text) <= TRANSCRIPT_LIMIT:
        return value
    return f"{text[:TRANSCRIPT_LIMIT]}… [{len(text) - TRANSCRIPT_LIMIT} more characters]"


def _plain(value: Any) -> Any:
    """A tool's return value as JSON can carry it to the model."""

    def fallback(obj: Any) -> Any:
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return dataclasses.asdict(obj)
        if isinstance(obj, set | frozenset | tuple):
            return list(obj)
        return str(obj)

    return json.loads(json.dumps(value, default=fallback))
