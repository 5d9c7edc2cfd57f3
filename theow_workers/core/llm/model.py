"""The LLM side of exploration: tools, budgets, errors and session results.

A gateway runs a tool-calling session: our own loop (``core/llm/session.py``), one
model request per turn, so every turn's tokens are counted and every request
passes the rate limiter. Tools are plain typed, documented callables; a tool that ends the
session (``submit_rule`` accepted, ``give_up``) raises SessionEnd.

>>> def read_log(lines: int = 50) -> str:
...     '''Read the last lines of the failure's log.
...
...     Args:
...         lines: how many lines from the end.
...     '''
...     return "..."
>>> tool = tool_from_callable(read_log)
>>> tool.parameters["properties"]["lines"]
{'type': 'integer', 'description': 'how many lines from the end.'}
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from theow_client.facts import CUT_MARKER
from theow_client.jsontypes import Json, JsonObject
from theow_workers.core.ports import Permission, Tool

# What one model turn or one tool result may weigh: a model answer of 8 MB is
# kept (and stored, and carried to the client) as its first 64 KB and a marker.
MODEL_TEXT_LIMIT = 64_000
TOOL_RESULT_LIMIT = 32_000


class Outcome(StrEnum):
    PROPOSAL = "proposal"  # submit_rule accepted
    DONE = "done"  # a probabilistic rule's session ended with the LLM saying done
    GAVE_UP = "gave_up"
    BUDGET = "budget"  # tool calls or tokens exhausted
    RATE_LIMITED = "rate_limited"  # per-day quota, or waiting longer than allowed
    CACHE_HIT = "cache_hit"  # no LLM call: a cached proposal validated
    DEDUPLICATED = "deduplicated"  # the same root cause was explored by another session
    LIMIT = "session_limit"  # the session id's budget of LLM sessions is used up
    ERROR = "error"


class ToolError(Exception):
    """A tool refused its arguments; the message goes back to the LLM as the result."""


class SessionEnd(Exception):
    """Raised by a terminal tool: the session ends with ``outcome``."""

    def __init__(self, outcome: Outcome, payload: JsonObject | None = None) -> None:
        super().__init__(outcome.value)
        self.outcome = outcome
        self.payload = payload or {}


class ModelError(Exception):
    """The model failed (server error, malformed answer): the secondary may take over.

    ``partial`` carries what the failed session used, so its tokens still count.
    """

    def __init__(self, message: str, partial: SessionResult | None = None) -> None:
        super().__init__(message)
        self.partial = partial


class QuotaExhausted(Exception):
    """A 429 the session cannot wait out: per-day quota, or a delay beyond the budget.

    ``partial`` carries what the session used before it stopped, as for ModelError.
    """

    def __init__(
        self,
        model: str,
        reason: str,
        retry_after: float,
        daily: bool,
        partial: SessionResult | None = None,
    ) -> None:
        super().__init__(f"{model}: {reason}")
        self.model = model
        self.reason = reason
        self.retry_after = retry_after
        self.daily = daily
        self.partial = partial


class BudgetReached(QuotaExhausted):
    """The day's spend cap would be exceeded by this call: it was not sent.

    A per-day stop as a per-day 429 is (``daily=True``), so the explorer and
    explain record it and stop the same way; ``retry_after`` runs to the end of
    the UTC day.
    """

    def __init__(self, reason: str, retry_after: float, partial: SessionResult | None = None):
        super().__init__("budget", reason, retry_after, daily=True, partial=partial)


def cost(price: tuple[float, float] | None, tokens_in: int, tokens_out: int) -> float:
    """Dollars for the tokens at ``price`` (dollars per million, input and output)."""
    if price is None:
        return 0.0
    return (tokens_in * price[0] + tokens_out * price[1]) / 1_000_000


@dataclass(frozen=True)
class Budget:
    """Limits of one session. Defaults are sized for real build logs (tens of KB)."""

    max_tool_calls: int = 30
    max_tokens: int = 600_000  # prompt + output tokens summed over every turn
    warn_fraction: float = 0.8  # a warning turn once this share of either limit is used
    max_wait_seconds: float = 120.0  # longest rate-limit wait before giving up the session

    @classmethod
    def from_constraints(cls, constraints: JsonObject, default: Budget | None = None) -> Budget:
        base = default or cls()
        return cls(
            max_tool_calls=int(constraints.get("max_tool_calls", base.max_tool_calls)),
            max_tokens=int(constraints.get("max_tokens", base.max_tokens)),
            warn_fraction=base.warn_fraction,
            max_wait_seconds=base.max_wait_seconds,
        )


@dataclass
class ToolCallRecord:
    name: str
    args: JsonObject
    result: Json = None
    error: str = ""


@dataclass
class SessionResult:
    outcome: Outcome
    models: list[str] = field(default_factory=list)
    turns: int = 0
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0
    transcript: list[JsonObject] = field(default_factory=list)  # JSON-able
    payload: JsonObject = field(default_factory=dict)  # from the terminal tool
    reason: str = ""


class SessionRunner(Protocol):
    """What runs sessions over one model: ``session.ToolLoop``. Not a port (nothing outside
    the core implements it; the model port is ``core.ports.ModelGateway``)."""

    def tool_session(self, prompt: str, tools: Sequence[Tool], budget: Budget) -> SessionResult:
        """Run a tool loop until a tool raises SessionEnd, the model stops, or the budget ends."""
        ...

    def generate(
        self,
        prompt: str,
        schema: JsonObject | None = None,
        max_output_tokens: int | None = None,
    ) -> JsonObject:
        """One request; with ``schema``, the reply is JSON of that shape."""
        ...

    def check(self) -> str | None:
        """Why the model cannot be used (unreachable, key refused, unknown), or None."""
        ...


def cut(text: str, limit: int) -> str:
    """``text``, or its first ``limit`` characters and a marker saying how many were cut."""
    if len(text) <= limit:
        return text
    return text[:limit] + CUT_MARKER.format(omitted=len(text) - limit).rstrip("\n")


def estimate_tokens(text: str) -> int:
    """How many tokens ``text`` costs at most, estimated offline before it is sent.

    Gemini's tokenizer averages about four characters of English or code per
    token, so ASCII counts a quarter token per character; any other character
    counts a whole token, which bounds scripts whose characters are one token or
    more each. No request is spent on counting (``count_tokens`` is a request of
    its own, and rate limited like the turn it would measure).
    """
    ascii_chars = len(text.encode("ascii", "ignore"))
    return ascii_chars // 4 + (len(text) - ascii_chars) + 1


def split_model(name: str) -> tuple[str, str]:
    """``"gemini/gemini-2.5-flash"`` → ``("gemini", "gemini-2.5-flash")``."""
    provider, sep, model = name.partition("/")
    if not sep or not provider or not model:
        raise ValueError(
            f"model {name!r} must be named provider/model, e.g. gemini/gemini-2.5-flash"
        )
    return provider, model


def offered(tools: Iterable[Tool], granted: Iterable[Permission | str]) -> list[Tool]:
    """Default deny: only tools whose every permission was granted."""
    allowed = {Permission(p) for p in granted}
    return [t for t in tools if t.permissions <= allowed]


_JSON_TYPES: dict[object, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_ARG_LINE = re.compile(r"^\s{2,}(\w+)\s*(?:\([^)]*\))?:\s*(.*)$")


def _schema(annotation: object) -> JsonObject:
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _schema(args[0])
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    if origin in (list, tuple, Sequence) or annotation in (list, tuple):
        item = _schema(args[0]) if args else {"type": "string"}
        return {"type": "array", "items": item}
    if origin is dict or annotation is dict:
        return {"type": "object"}
    if origin is typing.Literal:
        return {"type": "string", "enum": [str(a) for a in typing.get_args(annotation)]}
    raise TypeError(f"cannot declare a tool parameter of type {annotation!r}")


def _docstring(func: Callable[..., object]) -> tuple[str, dict[str, str]]:
    doc = inspect.getdoc(func) or ""
    summary, _, rest = doc.partition("\n\nArgs:")
    params: dict[str, str] = {}
    current = ""
    for line in ("    " + rest.replace("\n", "\n    ")).splitlines() if rest else []:
        found = _ARG_LINE.match(line)
        if found and line.startswith("    ") and not line.startswith("     " * 2):
            current = found.group(1)
            params[current] = found.group(2).strip()
        elif current and line.strip():
            params[current] += " " + line.strip()
    return " ".join(summary.split()), params


def tool_from_callable(
    func: Callable[..., object],
    *,
    name: str | None = None,
    permissions: Iterable[Permission | str] = (),
) -> Tool:
    """Declare a typed, documented callable as a tool (type hints → JSON schema)."""
    description, param_docs = _docstring(func)
    if not description:
        raise TypeError(f"tool {name or func.__name__!r} needs a docstring: the LLM reads it")
    hints = typing.get_type_hints(func)
    properties: JsonObject = {}
    required: list[str] = []
    for param in inspect.signature(func).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.name not in hints:
            raise TypeError(f"tool {func.__name__!r}: parameter {param.name!r} has no type hint")
        schema = _schema(hints[param.name])
        if param.name in param_docs:
            schema["description"] = param_docs[param.name]
        properties[param.name] = schema
        if param.default is param.empty:
            required.append(param.name)
    parameters: JsonObject = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    return Tool(
        name=name or func.__name__,
        description=description,
        parameters=parameters,
        func=func,
        permissions=frozenset(Permission(p) for p in permissions),
    )


def call_tool(tool: Tool, args: JsonObject) -> object:
    """Call a tool with the LLM's arguments; wrong arguments become a ToolError."""
    try:
        inspect.signature(tool.func).bind(**args)
    except TypeError as exc:
        raise ToolError(f"bad arguments for {tool.name}: {exc}") from exc
    return tool.func(**args)


class FallbackRunner:
    """The primary model, with the secondary taking over when the primary fails.

    ``use_secondary=True`` (a probabilistic rule asking for the stronger model)
    starts on the secondary.
    """

    def __init__(self, primary: SessionRunner, secondary: SessionRunner | None = None) -> None:
        self.primary = primary
        self.secondary = secondary

    def tool_session(
        self, prompt: str, tools: Sequence[Tool], budget: Budget, use_secondary: bool = False
    ) -> SessionResult:
        if use_secondary and self.secondary is not None:
            return self.secondary.tool_session(prompt, tools, budget)
        try:
            return self.primary.tool_session(prompt, tools, budget)
        except (ModelError, QuotaExhausted) as exc:
            if self.secondary is None or isinstance(exc, BudgetReached):
                raise
            result = self.secondary.tool_session(prompt, tools, budget)
            partial = getattr(exc, "partial", None)
            if partial is not None:
                result.models = [*partial.models, *result.models]
                result.turns += partial.turns
                result.tokens_in += partial.tokens_in
                result.tokens_out += partial.tokens_out
                result.transcript = [*partial.transcript, *result.transcript]
            result.reason = f"primary model failed ({exc}); {result.reason}".rstrip("; ")
            return result

    def generate(
        self,
        prompt: str,
        schema: JsonObject | None = None,
        max_output_tokens: int | None = None,
    ) -> JsonObject:
        try:
            return self.primary.generate(prompt, schema, max_output_tokens)
        except BudgetReached:
            raise  # the cap is the fleet's: the secondary would be refused too
        except (ModelError, QuotaExhausted):
            if self.secondary is None:
                raise
            return self.secondary.generate(prompt, schema, max_output_tokens)
