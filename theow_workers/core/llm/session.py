"""The tool loop: one LLM session, driven turn by turn over a one-call model port.

The session is domain logic and lives here: turns, tool dispatch, budgets,
the rate limiter around every request, usage per turn, the transcript. A
:class:`ModelGateway` (Gemini in ``adapters/gemini.py``, a scripted model in
tests) makes one model call per turn and translates nothing else.

>>> loop = ToolLoop(GeminiGateway("gemini-2.5-flash", key), limiter)  # doctest: +SKIP
>>> result = loop.tool_session(prompt, offered(tools, granted), Budget())  # doctest: +SKIP

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from theow_client.jsontypes import Json, JsonObject
from theow_workers.core.llm.model import (
    MODEL_TEXT_LIMIT,
    TOOL_RESULT_LIMIT,
    Budget,
    BudgetReached,
    ModelError,
    Outcome,
    QuotaExhausted,
    SessionEnd,
    SessionResult,
    ToolCallRecord,
    ToolError,
    call_tool,
    cost,
    cut,
    estimate_tokens,
)
from theow_workers.core.logs.redact import Masker
from theow_workers.core.ports import (
    ModelGateway,
    ModelRequest,
    ModelTurn,
    ModelUnavailable,
    RateLimited,
    RateLimiter,
    Spending,
    Tool,
    ToolAnswer,
    ToolCall,
    Turn,
    UserTurn,
)

DAY = 24 * 3600.0
DEFAULT_RETRY_DELAY = 10.0  # a per-minute 429 without a retry delay
MAX_QUOTA_RETRIES = 5  # per-minute 429s waited out for one turn
TOKEN_MARGIN = 512  # added to each request's token estimate
# Output tokens a request without its own bound reserves of the daily cap: Gemini 2.5's
# most (thinking included), so an unbounded answer never costs more than was reserved.
DEFAULT_OUTPUT_BOUND = 65_536
TRANSCRIPT_LIMIT = 2048  # characters kept of each function response
NUDGE = "Call a tool: submit_rule or give_up"
WARNING = "You have {calls} tool calls / {tokens} tokens left: call submit_rule or give_up now."
_DONE = re.compile(r"^\s*done\s*$", re.I | re.M)

log = logging.getLogger("theow.llm")


@dataclass
class _WaitBudget:
    """Seconds a session may still spend waiting on the rate limiter."""

    total: float
    spent: float = 0.0

    def left(self) -> float:
        return max(self.total - self.spent, 0.0)

    def spend(self, seconds: float) -> None:
        self.spent += seconds


@dataclass
class _Session:
    result: SessionResult
    wait: _WaitBudget
    history: list[Turn] = field(default_factory=list)


class ToolLoop:
    """Sessions and one-shot requests of one model, every request through ``limiter``."""

    server_retry_delays: tuple[float, ...] = (1.0, 3.0)  # quick retries of a 5xx or network error

    def __init__(
        self,
        gateway: ModelGateway,
        limiter: RateLimiter,
        sleep: Callable[[float], None] = time.sleep,
        interrupts: tuple[type[BaseException], ...] = (),
        mask: Callable[[Json], Json] | None = None,
        spend: Spending | None = None,
        price: tuple[float, float] | None = None,
        max_output_tokens: int | None = None,
        max_wait: float | None = None,
    ) -> None:
        """``interrupts``: exceptions that end the session whatever raises them (a task's
        soft time limit), never reported to the model as a tool's error. ``mask`` masks
        secrets in every tool result sent to the model and every transcript turn (by
        default the secret rules; the worker adds its deployment's own secrets).

        ``spend``: the daily cap every request reserves its most from before it is
        sent (its estimated prompt and ``max_output_tokens`` at ``price``, dollars per
        million tokens in and out); a model without a price costs nothing. ``max_wait``:
        seconds a one-shot request (``generate``) may wait on the rate limiter."""
        self.mask: Callable[[Json], Json] = mask or Masker()
        self.spend = spend
        self.price = price
        self.max_output_tokens = max_output_tokens
        self.max_wait = Budget().max_wait_seconds if max_wait is None else max_wait
        self.gateway = gateway
        self.limiter = limiter
        self._sleep = sleep
        self._interrupts = interrupts

    def __repr__(self) -> str:
        return f"ToolLoop({self.gateway!r})"

    def check(self) -> str | None:
        return self.gateway.check()

    def tool_session(self, prompt: str, tools: Sequence[Tool], budget: Budget) -> SessionResult:
        """Run turns until a tool raises SessionEnd, the model stops, or the budget ends."""
        by_name = {tool.name: tool for tool in tools}
        session = _Session(
            SessionResult(outcome=Outcome.ERROR, models=[self.gateway.model]),
            _WaitBudget(budget.max_wait_seconds),
        )
        result = session.result
        session.history.append(UserTurn((prompt,)))
        self._record(result, {"role": "user", "text": prompt})
        declared = json.dumps([t.declaration() for t in tools])
        estimate = estimate_tokens(prompt) + estimate_tokens(declared) + TOKEN_MARGIN
        warned = nudged = False
        while True:
            stop = _exhausted(result, budget) or _unaffordable(result, budget, estimate)
            if stop:
                return _end(result, Outcome.BUDGET, reason=stop)
            request = ModelRequest(
                list(session.history), tools, max_output_tokens=self.max_output_tokens
            )
            answer = self._turn(session, request, estimate)
            reply = _bounded(answer)
            session.history.append(reply)
            parts: list[str | ToolAnswer] = []
            if not reply.calls:
                if _DONE.search(reply.text):
                    return _end(result, Outcome.DONE, payload={"text": reply.text})
                if nudged:
                    return _end(result, Outcome.GAVE_UP, reason="model stopped without a tool call")
                nudged = True
                parts.append(NUDGE)
            for call in reply.calls:
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
                parts.append(WARNING.format(calls=left_calls, tokens=left_tokens))
            turn = UserTurn(tuple(parts))
            session.history.append(turn)
            self._record(result, _user_turn(turn))
            added = sum(estimate_tokens(json.dumps(_part(p), default=str)) for p in parts)
            # The answer goes back as sent: cut, it costs what its kept text costs.
            answered = reply.tokens_out if reply is answer else estimate_tokens(reply.text)
            estimate = reply.tokens_in + answered + added + TOKEN_MARGIN

    def generate(
        self,
        prompt: str,
        schema: JsonObject | None = None,
        max_output_tokens: int | None = None,
    ) -> JsonObject:
        """One request; with ``schema``, the reply is JSON of that shape."""
        session = _Session(SessionResult(Outcome.ERROR), _WaitBudget(self.max_wait))
        most = max_output_tokens or self.max_output_tokens
        request = ModelRequest([UserTurn((prompt,))], schema=schema, max_output_tokens=most)
        reply = self._turn(session, request, estimate_tokens(prompt) + TOKEN_MARGIN, record=False)
        parsed: Json = None
        if schema is not None:
            try:
                parsed = json.loads(reply.text)
            except ValueError:
                parsed = None
        return {
            "text": reply.text,
            "json": parsed,
            "tokens_in": reply.tokens_in,
            "tokens_out": reply.tokens_out,
            "model": self.gateway.model,
            "cost": cost(self.price, reply.tokens_in, reply.tokens_out),
        }

    # --- one turn -------------------------------------------------------------

    def _turn(
        self, session: _Session, request: ModelRequest, estimate: int, record: bool = True
    ) -> ModelTurn:
        """One turn through the limiter: per-minute 429s waited out, 5xx retried."""
        model, result, wait = self.gateway.model, session.result, session.wait
        partial = result if record else None
        failures = quota_hits = 0
        while True:
            started = time.monotonic()
            try:
                self.limiter.acquire(model, estimate, wait.left())
            except QuotaExhausted as exc:
                raise QuotaExhausted(
                    exc.model, exc.reason, exc.retry_after, exc.daily, partial
                ) from None
            finally:
                wait.spend(time.monotonic() - started)
            try:
                ticket = self._reserve(request, estimate)
            except BudgetReached as exc:
                self.limiter.settle(model, estimate, 0)
                self._record(partial, {"role": "event", "text": f"not sent: {exc.reason}"})
                raise BudgetReached(exc.reason, exc.retry_after, partial) from None
            try:
                reply = self.gateway.send(request)
            except RateLimited as hit:
                self._settle(ticket, 0.0)  # a 429 is not charged
                self.limiter.settle(model, estimate, 0)
                quota_hits += 1
                self._quota_hit(hit, wait, partial, last=quota_hits > MAX_QUOTA_RETRIES)
                continue
            except ModelUnavailable as exc:
                # A timed-out request may still be charged: its reservation stays spent.
                self._settle(ticket, None)
                self.limiter.settle(model, estimate, 0)
                if failures >= len(self.server_retry_delays):
                    raise ModelError(f"{model}: {exc}", partial) from exc
                self._record(partial, {"role": "event", "text": f"retrying after {exc}"})
                self._sleep(self.server_retry_delays[failures])
                failures += 1
                continue
            except ModelError as exc:
                self._settle(ticket, None)
                self.limiter.settle(model, estimate, 0)
                exc.partial = partial
                raise
            except BaseException:  # a time limit mid-request: what it cost is not known
                self._settle(ticket, None)
                raise
            self._settle(ticket, cost(self.price, reply.tokens_in, reply.tokens_out))
            self.limiter.settle(model, estimate, reply.tokens_in + reply.tokens_out)
            result.turns += 1
            result.tokens_in += reply.tokens_in
            result.tokens_out += reply.tokens_out
            if reply.unusable:
                raise ModelError(f"{model}: malformed answer: {reply.unusable}", partial)
            if record:
                self._record(result, _model_turn(model, reply))
            return reply

    def _reserve(self, request: ModelRequest, estimate: int) -> str | None:
        """Reserve the request's most from the daily cap: its prompt as estimated and every
        output token it may write. None when nothing is capped (no cap, or no price)."""
        if self.spend is None or self.price is None or self.price == (0.0, 0.0):
            return None
        most = request.max_output_tokens or self.max_output_tokens or DEFAULT_OUTPUT_BOUND
        return self.spend.reserve(cost(self.price, estimate, most))

    def _settle(self, ticket: str | None, dollars: float | None) -> None:
        """What the reserved request cost; None keeps the whole reservation spent."""
        if ticket is not None and self.spend is not None and dollars is not None:
            self.spend.settle(ticket, dollars)

    def _quota_hit(
        self, hit: RateLimited, wait: _WaitBudget, result: SessionResult | None, last: bool
    ) -> None:
        """Share the back-off a 429 asks for; raise unless it is worth waiting for."""
        model = self.gateway.model
        if hit.daily:
            reason = f"per-day quota exhausted ({hit.quota})"
            seconds = hit.delay or DAY
            self.limiter.back_off(model, seconds, daily=True, reason=reason)
            self._record(result, {"role": "event", "text": f"429: {reason}"})
            raise QuotaExhausted(model, reason, seconds, daily=True, partial=result)
        reason = f"per-minute quota exceeded ({hit.quota or 'unknown quota'})"
        seconds = DEFAULT_RETRY_DELAY if hit.delay is None else hit.delay
        self.limiter.back_off(model, seconds, daily=False, reason=reason)
        self._record(result, {"role": "event", "text": f"429: {reason}, retry in {seconds:g}s"})
        if last or seconds > wait.left():
            why = "too many retries" if last else f"beyond the {wait.total:g}s wait allowed"
            raise QuotaExhausted(
                model, f"{reason}: retry in {seconds:g}s is {why}", seconds, False, result
            )

    # --- tools and records ------------------------------------------------------

    def _run(self, call: ToolCall, by_name: dict[str, Tool], result: SessionResult) -> ToolAnswer:
        """Run one tool call; its result or error becomes the answer to the model."""
        record = ToolCallRecord(name=call.name, args=dict(call.args))
        result.tool_calls.append(record)
        log.info(
            "%s: tool call %s(%s)",
            self.gateway.model,
            call.name,
            ", ".join(sorted(call.args))[:200],
        )
        response: JsonObject
        try:
            tool = by_name.get(call.name)
            if tool is None:
                raise ToolError(f"unknown tool {call.name!r}; the tools are {sorted(by_name)}")
            record.result = _plain(call_tool(tool, dict(call.args)))
            response = {"result": _capped(record.result)}
        except SessionEnd as end:
            record.result = {"outcome": end.outcome.value, **end.payload}
            self._record(result, {"role": "tool", "name": call.name, "ended": end.outcome.value})
            raise
        except ToolError as exc:
            record.error = str(exc)
            log.info("%s: tool %s refused: %s", self.gateway.model, call.name, record.error[:300])
            response = {"error": cut(record.error, TOOL_RESULT_LIMIT)}
        except Exception as exc:  # a tool's bug is the model's information, not our crash
            if isinstance(exc, self._interrupts):
                raise
            record.error = f"{type(exc).__name__}: {exc}"
            response = {"error": cut(record.error, TOOL_RESULT_LIMIT)}
        # Masked before the model reads it: a tool that read a secret must not send it out.
        return ToolAnswer(call, self.mask(response))

    def _record(self, result: SessionResult | None, turn: JsonObject) -> None:
        if result is not None:
            result.transcript.append(self.mask(self.gateway.scrub(turn)))


def _exhausted(result: SessionResult, budget: Budget) -> str:
    calls, tokens = len(result.tool_calls), result.tokens_in + result.tokens_out
    if calls >= budget.max_tool_calls:
        return f"tool call budget used: {calls} of {budget.max_tool_calls} calls"
    if tokens >= budget.max_tokens:
        return f"token budget used: {tokens} of {budget.max_tokens} tokens"
    return ""


def _unaffordable(result: SessionResult, budget: Budget, estimate: int) -> str:
    """Why the next turn is not sent: its estimated tokens exceed what the budget has left.

    Checked before the request, so one huge turn (a test_rule answer of megabytes,
    a runaway history) never costs more than the session was allowed.
    """
    left = budget.max_tokens - result.tokens_in - result.tokens_out
    if estimate <= left:
        return ""
    return (
        f"token budget: the next turn would send about {estimate} tokens (estimated) and"
        f" {max(left, 0)} of {budget.max_tokens} are left; it was not sent"
    )


def _bounded(reply: ModelTurn) -> ModelTurn:
    """The reply with its text cut to MODEL_TEXT_LIMIT, in the history sent back too.

    A turn with function calls keeps its native form (Gemini wants the thought
    signatures back); its text is what the session reads and records.
    """
    if len(reply.text) <= MODEL_TEXT_LIMIT:
        return reply
    native = reply.native if reply.calls else None
    return dataclasses.replace(reply, text=cut(reply.text, MODEL_TEXT_LIMIT), native=native)


def _capped(value: Json) -> Json:
    """A tool's result as the model gets it: TOOL_RESULT_LIMIT characters of JSON at most."""
    text = json.dumps(value, default=str)
    return value if len(text) <= TOOL_RESULT_LIMIT else cut(text, TOOL_RESULT_LIMIT)


def _near_end(result: SessionResult, budget: Budget) -> bool:
    calls = len(result.tool_calls) / max(budget.max_tool_calls, 1)
    tokens = (result.tokens_in + result.tokens_out) / max(budget.max_tokens, 1)
    return max(calls, tokens) >= budget.warn_fraction


def _end(
    result: SessionResult,
    outcome: Outcome,
    reason: str = "",
    payload: JsonObject | None = None,
) -> SessionResult:
    result.outcome = outcome
    result.payload = payload or {}
    result.reason = reason or str(result.payload.get("reason", ""))
    return result


def _part(part: str | ToolAnswer) -> JsonObject:
    """A part as the model receives it, to estimate its tokens."""
    if isinstance(part, str):
        return {"text": part}
    answer = {"id": part.call.id, "name": part.call.name, "response": part.response}
    return {"function_response": answer}


def _model_turn(model: str, reply: ModelTurn) -> JsonObject:
    turn: JsonObject = {
        "role": "model",
        "model": model,
        "text": cut(reply.text, MODEL_TEXT_LIMIT),
    }
    if reply.calls:
        turn["function_calls"] = [
            {"name": c.name, "args": _cut(_plain(c.args), MODEL_TEXT_LIMIT)} for c in reply.calls
        ]
    turn["tokens_in"], turn["tokens_out"] = reply.tokens_in, reply.tokens_out
    return turn


def _user_turn(turn: UserTurn) -> JsonObject:
    answers = [
        {"name": p.call.name, "response": _cut(p.response)}
        for p in turn.parts
        if isinstance(p, ToolAnswer)
    ]
    texts = [p for p in turn.parts if isinstance(p, str)]
    record: JsonObject = {"role": "user", "text": "\n".join(texts)}
    if answers:
        record["function_responses"] = answers
    return record


def _cut(value: Json, limit: int = TRANSCRIPT_LIMIT) -> Json:
    """A function response (or call) as the transcript keeps it: ``limit`` characters at most."""
    text = json.dumps(value, default=str)
    if len(text) <= limit:
        return value
    return f"{text[:limit]}… [{len(text) - limit} more characters]"


def _plain(value: object) -> Json:
    """A tool's return value as JSON can carry it to the model."""

    def fallback(obj: object) -> Json:
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return dataclasses.asdict(obj)
        if isinstance(obj, set | frozenset | tuple):
            return list(obj)
        return str(obj)

    return json.loads(json.dumps(value, default=fallback))
