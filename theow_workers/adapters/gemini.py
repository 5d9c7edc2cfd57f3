"""Gemini through google-genai 3.x: one request, one response.

The tool loop is the core's (``core/llm/session.py``); this gateway translates one
:class:`ModelRequest` into a ``generate_content`` call and its answer into a
:class:`ModelTurn`. Automatic function calling is off and the SDK's own retries
are off, so every request passes the core's rate limiter and every turn's usage
is counted. Each model turn goes back to Gemini unchanged (``ModelTurn.native``):
a function-call turn without its thought signature is refused.

>>> gateway = GeminiGateway("gemini-2.5-flash", api_key)  # doctest: +SKIP
>>> turn = gateway.send(ModelRequest([UserTurn(("Say hello",))]))  # doctest: +SKIP
"""

from __future__ import annotations

import re

import httpx2  # the transport google-genai 3.x uses
import pydantic
from google import genai
from google.genai import errors, types

from theow_client.jsontypes import Json
from theow_workers.config import ConfigError
from theow_workers.core.llm.model import ModelError
from theow_workers.core.ports import (
    ModelRequest,
    ModelTurn,
    ModelUnavailable,
    RateLimited,
    Tool,
    ToolAnswer,
    ToolCall,
    UserTurn,
)

API_VERSION = "v1beta"
REQUEST_TIMEOUT_MS = 300_000
CHECK_TIMEOUT_MS = 10_000
_DELAY = re.compile(r"^\s*([0-9.]+)s\s*$")


class GeminiGateway:
    """One Gemini model; ``model`` is the bare id, e.g. ``gemini-2.5-flash``."""

    def __init__(
        self,
        model: str,
        api_key: str,
        base_url: str | None = None,
        api_version: str = API_VERSION,
        timeout: float = REQUEST_TIMEOUT_MS / 1000,
    ) -> None:
        if not api_key.strip():
            raise ConfigError("GEMINI_API_KEY is not set: exploring needs a Gemini API key")
        self.model = model
        self._secret = api_key.strip()
        self._client = genai.Client(
            api_key=self._secret,
            http_options=types.HttpOptions(
                base_url=base_url or None,
                api_version=api_version,
                timeout=int(timeout * 1000),
                # One attempt: retries (429 above all) are the core's, through the limiter.
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
                return str(
                    self.scrub(f"model {self.model}: {exc.code} {exc.message or exc.status}")
                )
            return None  # a 429 or a 5xx now says nothing about the configuration
        except (httpx2.TransportError, OSError) as exc:
            return str(self.scrub(f"model {self.model}: the endpoint cannot be reached: {exc}"))
        return None

    def send(self, request: ModelRequest) -> ModelTurn:
        """One ``generate_content`` call; Google's errors become the core's."""
        try:
            response = self._client.models.generate_content(
                model=self.model, contents=_contents(request), config=_config(request)
            )
        except errors.APIError as exc:
            if exc.code == 429:
                raise RateLimited(*_quota_details(exc.details)) from None
            message = self.scrub(f"{exc.code} {exc.status}: {exc.message}")
            if exc.code >= 500:
                raise ModelUnavailable(message) from exc
            raise ModelError(f"{self.model}: {message}") from exc
        except (httpx2.TransportError, OSError) as exc:  # network, timeout
            raise ModelUnavailable(self.scrub(f"{type(exc).__name__}: {exc}")) from exc
        except (errors.UnknownApiResponseError, pydantic.ValidationError) as exc:
            raise ModelError(self.scrub(f"{self.model}: malformed answer: {exc}")) from exc
        return _turn(response)

    def scrub(self, value: Json) -> Json:
        """The value with the API key masked wherever it appears."""
        if isinstance(value, str):
            return value.replace(self._secret, "***")
        if isinstance(value, dict):
            return {k: self.scrub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.scrub(v) for v in value]
        return value


# --- one request, one response ---------------------------------------------------


def _config(request: ModelRequest) -> types.GenerateContentConfig:
    if request.schema is not None:
        return types.GenerateContentConfig(
            response_mime_type="application/json",
            response_json_schema=request.schema,
            max_output_tokens=request.max_output_tokens,
        )
    declarations = [_declaration(t) for t in request.tools]
    return types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=declarations)] if declarations else None,
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        max_output_tokens=request.max_output_tokens,
    )


def _contents(request: ModelRequest) -> list[types.Content]:
    contents = []
    for turn in request.history:
        if isinstance(turn, UserTurn):
            contents.append(types.Content(role="user", parts=[_part(p) for p in turn.parts]))
        elif isinstance(turn.native, types.Content):
            contents.append(turn.native)  # unchanged: it carries the thought signatures
        else:
            calls = [types.Part(function_call=_call(c)) for c in turn.calls]
            text = [types.Part(text=turn.text)] if turn.text else []
            contents.append(types.Content(role="model", parts=text + calls))
    return contents


def _part(part: str | ToolAnswer) -> types.Part:
    if isinstance(part, str):
        return types.Part(text=part)
    answer = types.FunctionResponse(name=part.call.name, id=part.call.id, response=part.response)
    return types.Part(function_response=answer)


def _call(call: ToolCall) -> types.FunctionCall:
    return types.FunctionCall(name=call.name, args=call.args, id=call.id)


def _turn(response: types.GenerateContentResponse) -> ModelTurn:
    tokens_in, tokens_out = _usage(response.usage_metadata)
    candidate = response.candidates[0] if response.candidates else None
    if candidate is None or candidate.content is None or not candidate.content.parts:
        finish = candidate.finish_reason if candidate else None
        feedback = response.prompt_feedback.block_reason if response.prompt_feedback else None
        why = f"no content (finish reason {finish}, block reason {feedback})"
        return ModelTurn(tokens_in=tokens_in, tokens_out=tokens_out, unusable=why)
    content = candidate.content
    parts = content.parts or []
    calls = tuple(
        ToolCall(p.function_call.name or "", dict(p.function_call.args or {}), p.function_call.id)
        for p in parts
        if p.function_call
    )
    text = "".join(p.text for p in parts if p.text and not p.thought)
    return ModelTurn(text, calls, tokens_in, tokens_out, native=content)


def _declaration(tool: Tool) -> types.FunctionDeclaration:
    return types.FunctionDeclaration(
        name=tool.name, description=tool.description, parameters_json_schema=tool.parameters
    )


def _usage(usage: types.GenerateContentResponseUsageMetadata | None) -> tuple[int, int]:
    if usage is None:
        return 0, 0
    output = (usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0)
    return usage.prompt_token_count or 0, output


def _quota_details(body: Json) -> tuple[float | None, bool, str]:
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
