"""The model gateway port: one model call per turn, nothing else.

The tool loop (``core/llm/session.py``) builds each :class:`ModelRequest` from the
session's history and turns each :class:`ModelTurn` into tool calls, budgets
and transcript. A gateway translates one request and one response for its
provider (``adapters/gemini.py``) or replays a script (the unit tests).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from theow_client.jsontypes import Json, JsonObject
from theow_workers.core.llm.model import Tool


@dataclass(frozen=True)
class ToolCall:
    name: str
    args: JsonObject
    id: str | None = None  # the model's id for the call, echoed in its answer


@dataclass(frozen=True)
class ToolAnswer:
    """What a tool call returned (``{"result": ...}``) or why it failed (``{"error": ...}``)."""

    call: ToolCall
    response: JsonObject


@dataclass(frozen=True)
class UserTurn:
    """Our turn: text and tool answers, in the order they are sent."""

    parts: tuple[str | ToolAnswer, ...]


@dataclass(frozen=True)
class ModelTurn:
    """One answer of the model, with what it cost.

    ``native`` is the provider's own form of the turn, sent back unchanged in
    the history (Gemini refuses a function-call turn without its thought
    signature). ``unusable`` says why an answer has no content; the session
    then fails with a ModelError once the turn's tokens are counted.
    """

    text: str = ""
    calls: tuple[ToolCall, ...] = ()
    tokens_in: int = 0
    tokens_out: int = 0
    native: object = None
    unusable: str = ""


Turn = UserTurn | ModelTurn


@dataclass(frozen=True)
class ModelRequest:
    history: Sequence[Turn]  # starts with the user's prompt
    tools: Sequence[Tool] = ()
    schema: JsonObject | None = None  # ask for a JSON answer of this shape
    # The most output tokens the answer may have (the provider stops there): what bounds
    # the call's cost, and so what it reserves of the daily budget. None: the model's own.
    max_output_tokens: int | None = None


class RateLimited(Exception):
    """The model answered 429. ``delay``: the retry delay it asked for, if any."""

    def __init__(self, delay: float | None, daily: bool, quota: str) -> None:
        super().__init__(f"429 ({quota or 'unknown quota'})")
        self.delay, self.daily, self.quota = delay, daily, quota


class ModelUnavailable(Exception):
    """A server error or a network failure: worth a quick retry of the same turn."""


class ModelGateway(Protocol):
    model: str  # the bare model id, e.g. ``gemini-2.5-flash``

    def send(self, request: ModelRequest) -> ModelTurn:
        """One model call. Raises RateLimited, ModelUnavailable, or ModelError (final)."""
        ...

    def check(self) -> str | None:
        """Why this model cannot be used (unreachable, key refused, unknown), or None."""
        ...

    def scrub(self, value: Json) -> Json:
        """``value`` (str, dict, list) with the gateway's credentials masked."""
        ...
