"""An OpenAI-compatible chat-completions endpoint: one request, one response.

vLLM, Ollama, llama.cpp's server and hosted services speak the same
``POST {base_url}/chat/completions`` with function calling (``tools``; the
answer's ``tool_calls``; our ``role: tool`` messages answering each call by its
``tool_call_id``). The tool loop is the core's (``core/llm/session.py``), as for
Gemini: the official ``openai`` client makes one attempt per request (its own
retries are off, so every request passes the core's rate limiter), and the
answer is read from the raw JSON, so a server that answers something else is a
ModelError naming what was missing, not an attribute error.

>>> gateway = OpenAIChatGateway("qwen2.5-coder:14b", "http://127.0.0.1:11434/v1")  # doctest: +SKIP
>>> turn = gateway.send(ModelRequest([UserTurn(("Say hello",))]))  # doctest: +SKIP

Warning: a server that reports no usage is charged an offline estimate
(``estimate_tokens`` of what was sent and received), so budgets still hold.
"""

from __future__ import annotations

import email.utils
import itertools
import json
import re
import time

import httpx2  # the transport the openai client uses
import openai

from theow_client.jsontypes import Json, JsonObject
from theow_workers.core.llm.model import ModelError, estimate_tokens
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

REQUEST_TIMEOUT = 300.0  # seconds: a local model on a CPU answers slowly
CHECK_TIMEOUT = 10.0
# A key a local server without authentication accepts: the client insists on one.
NO_KEY = "no-key"
# How a 429 says waiting a minute will not help: OpenAI's per-day limits and spent credit.
_DAILY = re.compile(r"per day|\bRPD\b|\bTPD\b|insufficient_quota", re.I)
_ids = itertools.count(1)


class OpenAIChatGateway:
    """One model of an OpenAI-compatible endpoint; ``model`` is the id the server knows."""

    def __init__(
        self, model: str, base_url: str, api_key: str = "", timeout: float = REQUEST_TIMEOUT
    ) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self._secret = api_key.strip()
        self._client = openai.OpenAI(
            api_key=self._secret or NO_KEY,
            base_url=self.base_url,
            timeout=timeout,
            # One attempt: retries (429 above all) are the core's, through the limiter.
            max_retries=0,
        )

    def __repr__(self) -> str:
        return f"OpenAIChatGateway({self.model!r}, {self.base_url!r})"

    def check(self) -> str | None:
        """Why this model cannot be used (endpoint unreachable, key refused, no such
        model), or None. ``GET /models``: it costs no tokens."""
        where = f"model {self.model} at {self.base_url}"
        try:
            response = self._client.get(
                "/models", cast_to=httpx2.Response, options={"timeout": CHECK_TIMEOUT}
            )
        except openai.APIStatusError as exc:
            if exc.status_code in (401, 403):
                return str(self.scrub(f"{where}: {exc.status_code}: the key was refused"))
            if exc.status_code == 404:
                return f"{where}: 404 for /models: is the base URL the API's root (often .../v1)?"
            return None  # a 429 or a 5xx now says nothing about the configuration
        except openai.APIConnectionError as exc:  # timeouts included
            return str(self.scrub(f"{where}: the endpoint cannot be reached: {_cause(exc)}"))
        try:
            listed = [str(m["id"]) for m in response.json()["data"]]
        except (ValueError, KeyError, TypeError):
            return None  # a server that lists nothing readable may still serve the model
        if listed and self.model not in listed:
            shown = ", ".join(listed[:5]) + (", …" if len(listed) > 5 else "")
            return f"{where}: no such model (the server lists {shown})"
        return None

    def send(self, request: ModelRequest) -> ModelTurn:
        """One ``chat/completions`` call; the server's errors become the core's."""
        body = _body(self.model, request)
        try:
            response = self._client.post("/chat/completions", cast_to=httpx2.Response, body=body)
        except openai.RateLimitError as exc:
            raise RateLimited(*_limit_details(exc)) from None
        except openai.APIStatusError as exc:
            message = self.scrub(f"{exc.status_code}: {_error_text(exc)}")
            if exc.status_code >= 500 or exc.status_code == 408:
                raise ModelUnavailable(message) from None
            raise ModelError(f"{self.model}: {message}") from None
        except openai.APIConnectionError as exc:  # network, timeout
            raise ModelUnavailable(self.scrub(f"{type(exc).__name__}: {_cause(exc)}")) from None
        try:
            return _turn(response.json(), sent=body)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            shown = self.scrub(response.text[:300])
            raise ModelError(f"{self.model}: malformed answer ({exc!r}): {shown!r}") from None

    def scrub(self, value: Json) -> Json:
        """The value with the API key masked wherever it appears."""
        if isinstance(value, str):
            return value.replace(self._secret, "***") if self._secret else value
        if isinstance(value, dict):
            return {k: self.scrub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.scrub(v) for v in value]
        return value


# --- one request, one response ---------------------------------------------------


def _body(model: str, request: ModelRequest) -> JsonObject:
    body: JsonObject = {"model": model, "messages": _messages(request)}
    if request.max_output_tokens is not None:
        # ``max_tokens``: what vLLM, Ollama and llama.cpp's server all read.
        body["max_tokens"] = request.max_output_tokens
    if request.schema is not None:
        schema = {"name": "answer", "schema": request.schema}
        body["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif request.tools:
        body["tools"] = [_declaration(t) for t in request.tools]
    return body


def _messages(request: ModelRequest) -> list[JsonObject]:
    messages: list[JsonObject] = []
    for turn in request.history:
        if isinstance(turn, UserTurn):
            # Tool answers first: they must follow the assistant turn whose calls they answer.
            answers = [p for p in turn.parts if isinstance(p, ToolAnswer)]
            texts = [p for p in turn.parts if isinstance(p, str)]
            messages += [_tool_message(a) for a in answers]
            if texts:
                messages.append({"role": "user", "content": "\n\n".join(texts)})
            continue
        message: JsonObject = {"role": "assistant", "content": turn.text or None}
        if turn.calls:
            message["tool_calls"] = [_call(c) for c in turn.calls]
        messages.append(message)
    return messages


def _tool_message(answer: ToolAnswer) -> JsonObject:
    content = json.dumps(answer.response, default=str)
    return {"role": "tool", "tool_call_id": answer.call.id, "content": content}


def _call(call: ToolCall) -> JsonObject:
    function = {"name": call.name, "arguments": json.dumps(call.args)}
    return {"id": call.id, "type": "function", "function": function}


def _declaration(tool: Tool) -> JsonObject:
    function = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
    return {"type": "function", "function": function}


def _turn(answer: Json, sent: JsonObject) -> ModelTurn:
    """A ModelTurn from the answer's JSON; KeyError/TypeError/ValueError when it is not one."""
    choices = answer["choices"]
    if not choices:
        tokens_in, tokens_out = _usage(answer, sent, "")
        return ModelTurn(tokens_in=tokens_in, tokens_out=tokens_out, unusable="no choices")
    choice = choices[0]
    message = choice["message"]
    text = message.get("content") or ""
    if not isinstance(text, str):
        raise TypeError(f"message content is {type(text).__name__}, not text")
    calls = tuple(_tool_call(c) for c in message.get("tool_calls") or [])
    tokens_in, tokens_out = _usage(answer, sent, json.dumps(message))
    if not text and not calls and choice.get("finish_reason") == "content_filter":
        why = "no content (finish reason content_filter)"
        return ModelTurn(tokens_in=tokens_in, tokens_out=tokens_out, unusable=why)
    return ModelTurn(text, calls, tokens_in, tokens_out)


def _tool_call(call: JsonObject) -> ToolCall:
    function = call["function"]
    raw = function.get("arguments") or "{}"
    args = json.loads(raw) if isinstance(raw, str) else raw
    if not isinstance(args, dict):
        raise TypeError(f"arguments of {function['name']!r} are not a JSON object")
    # A server that gives no id (some local ones) gets one: the answer must name its call.
    return ToolCall(str(function["name"]), args, str(call.get("id") or f"call_{next(_ids)}"))


def _usage(answer: JsonObject, sent: JsonObject, received: str) -> tuple[int, int]:
    usage = answer.get("usage") or {}
    if "prompt_tokens" in usage:
        return int(usage["prompt_tokens"]), int(usage.get("completion_tokens") or 0)
    return estimate_tokens(json.dumps(sent)), estimate_tokens(received)


def _limit_details(exc: openai.APIStatusError) -> tuple[float | None, bool, str]:
    """(retry delay in seconds, per-day?, which limit) from a 429's headers and body."""
    text = _error_text(exc)
    error = exc.body if isinstance(exc.body, dict) else {}
    quota = str(error.get("code") or error.get("type") or "") or "rate limit"
    return _retry_after(exc.response.headers), bool(_DAILY.search(text)), quota


def _retry_after(headers: httpx2.Headers) -> float | None:
    """Seconds from ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date)."""
    try:
        if "retry-after-ms" in headers:
            return max(float(headers["retry-after-ms"]) / 1000, 0.0)
        value = headers.get("retry-after")
        if value is None:
            return None
        if value.strip().replace(".", "", 1).isdigit():
            return float(value)
        when = email.utils.parsedate_to_datetime(value).timestamp()
        return max(when - time.time(), 0.0)
    except (ValueError, TypeError):
        return None


def _error_text(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        return str(body.get("message") or body)
    return str(body or exc.message)[:500]


def _cause(exc: BaseException) -> str:
    """The underlying network error's text (the client's own says only "Connection error.")."""
    cause = exc.__cause__ or exc.__context__
    return f"{exc} ({cause})" if cause is not None and str(cause) else str(exc)
