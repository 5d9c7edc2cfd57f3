"""The small interfaces the core needs from the outside world: every port, in one place.

Each has a real adapter (MiniLM, Milvus, Redis in ``theow_workers.adapters``, SQL in
``theow_workers.store``) and an in-memory twin in ``theow_workers.adapters.memory``, used
by tests and by ``theow rules test``. The model port (``ModelGateway``, one call
per turn) is here with the words it is typed in (``Tool``, ``ModelRequest``, ``ModelTurn``).
The explanation cache and store are here with ``Explanation``, the value they keep.
A port is typed in words of its own or of ``core.rules``/``core.logs``: ``core.llm``,
``core.resolve`` and ``core.explore`` read their ports here, so none may be read from here.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Protocol, TypeVar, cast

from theow_client.jsontypes import Json, JsonObject
from theow_client.verdict import Status, Verdict
from theow_workers.core.logs.normal import JobNormal

T = TypeVar("T")


class Embedder(Protocol):
    model_name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-length vectors, one per text."""
        ...


@dataclass(frozen=True)
class IndexEntry:
    """One rule or action as the index stores it."""

    id: str  # "rule:<name>" or "action:<name>"
    kind: str  # "rule" | "action"
    name: str
    content_hash: str
    text: str  # what gets embedded
    equals: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SyncReport:
    added: int = 0
    updated: int = 0
    removed: int = 0
    unchanged: int = 0


@dataclass(frozen=True)
class Hit:
    name: str
    similarity: float


class RuleIndex(Protocol):
    def sync(self, entries: Sequence[IndexEntry], embedder: Embedder) -> SyncReport:
        """Make the index hold exactly ``entries``, embedding only what changed."""
        ...

    def search(
        self,
        vector: Sequence[float],
        *,
        kind: str = "rule",
        limit: int = 10,
        facts: dict[str, str] | None = None,
        names: Sequence[str] | None = None,
    ) -> list[Hit]:
        """Nearest entries of ``kind``; ``facts`` pre-filters on equals-facts (a rule
        that does not constrain a key is never excluded by it); ``names`` restricts."""
        ...

    def vectors(self, names: Sequence[str], *, kind: str = "rule") -> dict[str, list[float]]:
        """The stored vectors of the named entries of ``kind``; a name not indexed is absent."""
        ...


@dataclass(frozen=True)
class FailureRecord:
    id: str
    fingerprint: str
    facts: JsonObject
    problem_type: str | None
    source: str
    received_at: datetime
    explore: bool = False
    notes: JsonObject = field(default_factory=dict)
    # The verified agent that sent it (None: replayed history, or recorded before agents had ids).
    agent: str | None = None
    idempotency_key: str | None = None


# An attempt whose client-side actions the build agent has yet to run and report.
CLIENT_PENDING = "client_pending"
# An attempt that offered a fix and ran none: its actions only advise, or a dry run.
SUGGESTED = "suggested"
# Outcomes that say nothing yet of whether the rule's fix works: not in its track record.
UNCONFIRMED = frozenset({CLIENT_PENDING, SUGGESTED})


@dataclass(frozen=True)
class AttemptRecord:
    failure_id: str
    rule: str
    params: list[JsonObject]
    # "success" | "error" | "timeout" | "client_pending" (client-side actions
    # still to run on the build agent: counted when the agent reports back) |
    # "suggested" (a fix offered, none run: counted never)
    outcome: str
    error: str = ""
    duration_ms: float = 0.0
    delivery: int = 1
    evidence: JsonObject | None = None


@dataclass(frozen=True)
class RuleStats:
    successes: int = 0
    failures: int = 0

    @property
    def smoothed_ratio(self) -> float:
        """Laplace-smoothed success ratio: 0.5 for a rule with no record yet."""
        return (self.successes + 1) / (self.successes + self.failures + 2)


def counted(attempts: Iterable[AttemptRecord]) -> Iterator[tuple[str, bool]]:
    """``(rule, success)`` for each attempt that moves its rule's track record.

    A ``client_pending`` attempt counts only once the build agent reports it;
    a ``suggested`` one never: no fix of its ran.
    """
    for attempt in attempts:
        if attempt.outcome not in UNCONFIRMED:
            yield attempt.rule, attempt.outcome == "success"


def with_outputs(params: list[JsonObject], outputs: Sequence[object]) -> list[JsonObject]:
    """An attempt's bound actions, each with the output the build agent reported for it."""
    reported = {o.get("action"): o.get("output") for o in outputs if isinstance(o, dict)}
    return [
        {**step, "output": reported[step.get("action")]} if step.get("action") in reported else step
        for step in params
    ]


def settled_status(worked: bool, error: str) -> tuple[Status, str]:
    """A suggested verdict's status once its agent reported, and its new reason ("": unchanged)."""
    if worked:
        return Status.RESOLVED, ""
    return Status.FAILED, f"the client-side fix did not work: {error}"[:4000]


class Store(Protocol):
    """What resolving a failure reads and writes: two writes per failure.

    ``record_failure`` then ``record_outcome``; in the SQL store
    (``theow_workers.store``) each is one statement on PostgreSQL (one round
    trip), one transaction on SQLite.
    """

    def record_failure(self, failure: FailureRecord) -> Verdict | None:
        """Record a failure unless its id exists (idempotent); the verdict stored for it, if any."""
        ...

    def record_outcome(self, verdict: Verdict, attempts: Sequence[AttemptRecord] = ()) -> Verdict:
        """Record the attempts, count their rules and store the verdict unless one
        exists, together; return whichever verdict is stored."""
        ...

    def verdict(self, failure_id: str) -> Verdict | None: ...

    def rule_stats(self) -> dict[str, RuleStats]: ...


class StepStore(Protocol):
    """A store written one step at a time (the replay chunk store, which batches its writes)."""

    def add_failure(self, failure: FailureRecord) -> bool: ...

    def verdict(self, failure_id: str) -> Verdict | None: ...

    def add_attempt(self, attempt: AttemptRecord) -> None: ...

    def add_verdict(self, verdict: Verdict) -> Verdict: ...

    def count_attempt(self, rule: str, success: bool) -> None: ...

    def rule_stats(self) -> dict[str, RuleStats]: ...


class OwnerTimeout(Exception):
    """The delivery that holds a key kept it longer than this one may wait."""

    def __init__(self, key: str, waited: float) -> None:
        super().__init__(f"{key}: held by another delivery for more than {waited:g}s")
        self.key = key


class Claim(Protocol):
    """One delivery's claim on a key: at most one claim holds a key at a time.

    A held claim stays alive while its process does; a killed worker's claim
    lapses within seconds, so the redelivered message can take over.
    """

    held: bool

    def try_take(self) -> bool:
        """Hold the key if no other claim does; whether this claim holds it now."""
        ...

    def wait(self, outcome: Callable[[], T | None], timeout: float) -> T | None:
        """Take the key (None), or return the outcome its owner recorded meanwhile.

        Polls ``outcome`` and the key until one is there; raises OwnerTimeout
        after ``timeout`` seconds of neither."""
        ...

    def release(self) -> None: ...

    def __enter__(self) -> Claim: ...

    def __exit__(self, *exc: object) -> None: ...


class Deliveries(Protocol):
    """Messages delivered more than once (late acks, duplicate submits), made safe.

    >>> with deliveries.claim(failure_id) as claim:  # doctest: +SKIP
    ...     decided = claim.wait(lambda: store.verdict(failure_id), timeout=60)
    ...     if decided is None:  # ours: no other delivery holds or decided it
    ...         resolve(failure_id, delivery=deliveries.count(failure_id))
    """

    def claim(self, key: str) -> Claim:
        """A claim on ``key``, not yet taken; leaving ``with`` releases it."""
        ...

    def count(self, key: str) -> int:
        """Count one more delivery of ``key``: its number, 1 for the first (kept a day)."""
        ...

    def uncount(self, key: str) -> None:
        """Take back the last count: that delivery was put off, not lost."""
        ...


def wait_for_owner(
    key: str,
    try_take: Callable[[], bool],
    outcome: Callable[[], T | None],
    timeout: float,
    sleep: Callable[[float], None] = time.sleep,
) -> T | None:
    """``Claim.wait`` for any claim: poll the key and the outcome, backing off to 0.5 s."""
    deadline = time.monotonic() + timeout
    pause = 0.02
    while not try_take():
        decided = outcome()
        if decided is not None:
            return decided
        if time.monotonic() > deadline:
            raise OwnerTimeout(key, timeout)
        sleep(pause)
        pause = min(pause * 2, 0.5)
    return None


class Stepwise:
    """The Store port over a StepStore: the same records, one step each."""

    def __init__(self, steps: StepStore) -> None:
        self.steps = steps

    def record_failure(self, failure: FailureRecord) -> Verdict | None:
        self.steps.add_failure(failure)
        return self.steps.verdict(failure.id)

    def record_outcome(self, verdict: Verdict, attempts: Sequence[AttemptRecord] = ()) -> Verdict:
        for attempt in attempts:
            self.steps.add_attempt(attempt)
        for rule, success in counted(attempts):
            self.steps.count_attempt(rule, success)
        return self.steps.add_verdict(verdict)

    def verdict(self, failure_id: str) -> Verdict | None:
        return self.steps.verdict(failure_id)

    def rule_stats(self) -> dict[str, RuleStats]:
        return self.steps.rule_stats()


def as_store(store: Store | StepStore) -> Store:
    """``store`` when it records outcomes whole, else the same records step by step."""
    if hasattr(store, "record_outcome"):
        return cast(Store, store)
    return Stepwise(store)


# --- model calls: the fleet's limits (adapters.redis_state; adapters.memory) ---------------


class Spending(Protocol):
    """The fleet's daily spend cap on model calls (``adapters.redis_state.RedisSpend``).

    A call reserves its most before it is sent and settles what it cost after;
    a reservation that would pass the cap raises BudgetReached and nothing is sent.
    """

    def reserve(self, dollars: float) -> str:
        """Reserve ``dollars``; a ticket for ``settle``. Raises BudgetReached."""
        ...

    def settle(self, ticket: str, dollars: float) -> None:
        """The reserved call cost ``dollars`` (0: it was not charged)."""
        ...


class RateLimiter(Protocol):
    def acquire(self, model: str, tokens: int, max_wait: float) -> None:
        """Block until one request of ``tokens`` is allowed for ``model``.

        Raises QuotaExhausted when exploring is stopped for the model (per-day
        quota) or the wait would exceed ``max_wait``."""
        ...

    def settle(self, model: str, estimated: int, actual: int) -> None:
        """Correct the token count of a request once its usage is known."""
        ...

    def back_off(self, model: str, seconds: float, daily: bool, reason: str) -> None:
        """Shared back-off after a 429: every worker waits (or stops, if daily)."""
        ...


# --- exploring: one LLM session per root cause (adapters.redis_state, store.explore) --------


class ExploreState(Protocol):
    def take_flight(self, fingerprint: str, failure_id: str, ttl: int) -> str | None: ...
    def land(self, fingerprint: str) -> None: ...
    def finish(self, fingerprint: str, record: JsonObject) -> None: ...
    def finished(self, fingerprint: str) -> JsonObject | None: ...
    def take_session(self, session_id: str, limit: int, ttl: int) -> int: ...
    def remember(self, proposal_id: str, vector: list[float], rule_yaml: str) -> None: ...
    def cached(self) -> list[JsonObject]: ...


# --- an exploration, as the explorer records it ---------------------------------------------


@dataclass
class Exploration:
    failure_id: str
    fingerprint: str
    outcome: str
    reason: str = ""
    session_id: str = ""
    rule: str | None = None
    models: list[str] = field(default_factory=list)
    turns: int = 0
    tool_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    proposal_id: str | None = None
    transcript: list[JsonObject] = field(default_factory=list)
    bound: list[JsonObject] = field(default_factory=list)  # actions re-bound on a cache hit
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def summary(self) -> JsonObject:
        """What the client reads as the exploration's outcome."""
        return {
            "exploration_id": self.id,
            "failure_id": self.failure_id,
            "outcome": self.outcome,
            "proposal_id": self.proposal_id,
            "rule": self.rule,
            "reason": self.reason,
            "actions": self.bound,
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "cost": round(self.cost, 6),
        }


class ExplorationSink(Protocol):
    def add_exploration(
        self, exploration: Exploration, proposal: JsonObject | None = None
    ) -> None: ...


# --- where the library is: rule and action layers (config.Settings) ------------------------


class Layers(Protocol):
    """Where the rules and actions are (``Settings``: earliest layer first)."""

    @property
    def rule_layers(self) -> Sequence[Path]: ...

    @property
    def action_layers(self) -> Sequence[Path]: ...


# --- each job's normal (adapters.normals; adapters.memory) ---------------------------------


class Normals(Protocol):
    """Each job's normal, learned from its passing runs (``RedisNormals``, ``MemoryNormals``)."""

    def templates(self, job: str) -> list[str]: ...

    def learn(self, job: str, lines: Iterable[str], now: float | None = None) -> int:
        """Merge a passing run's lines into the job's normal; the number of templates kept."""
        ...

    def normal(self, job: str) -> JobNormal | None:
        """The job's normal, or None when no passing run of it was learned."""
        ...


# --- the model: one call per turn (adapters.gemini, adapters.openai_chat; scripted in tests) -
#
# The model gateway port: one model call per turn, nothing else.
#
# The tool loop (``core/llm/session.py``) builds each :class:`ModelRequest` from the
# session's history and turns each :class:`ModelTurn` into tool calls, budgets
# and transcript. A gateway translates one request and one response for its
# provider (``adapters/gemini.py``) or replays a script (the unit tests).


class Permission(StrEnum):
    FS_READ = "fs-read"
    FS_WRITE = "fs-write"
    SHELL = "shell"
    NETWORK = "network"


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: JsonObject  # JSON schema of an object
    func: Callable[..., object]
    permissions: frozenset[Permission] = frozenset()

    def declaration(self) -> JsonObject:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


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


# --- explanations per cause (adapters.explanations: Redis; store.explanations: SQL) ---------


# What an explanation is in: ``explained`` and ``malformed`` were paid for (a cause is
# asked once); the others say why there is none yet and are asked again later.
EXPLAINED, MALFORMED, FAILED, BUDGET, RATE_LIMITED, PENDING = (
    "explained",
    "malformed",
    "failed",
    "budget",
    "rate_limited",
    "pending",
)
STATES = (EXPLAINED, MALFORMED, FAILED, BUDGET, RATE_LIMITED, PENDING)


@dataclass(frozen=True)
class Explanation:
    """What explain says about one cause, or why it says nothing (``state``, ``reason``)."""

    state: str
    text: str = ""
    cause: str = ""
    next_step: str = ""
    model: str = ""
    reason: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0

    @property
    def paid(self) -> bool:
        """Whether the model answered for this cause: it is not asked again."""
        return self.state in (EXPLAINED, MALFORMED)

    def to_dict(self) -> JsonObject:
        return asdict(self)

    def shown(self) -> JsonObject:
        """What a verdict carries: the answer, not the accounting."""
        keys = ("state", "text", "cause", "next_step", "model", "reason")
        return {k: v for k, v in self.to_dict().items() if k in keys and v != ""}

    @classmethod
    def from_dict(cls, data: object) -> Explanation | None:
        """An explanation read back (cache, store); None for anything that is not one."""
        if not isinstance(data, dict) or data.get("state") not in STATES:
            return None
        known = {f.name for f in fields(cls)}
        try:
            return cls(**{k: v for k, v in data.items() if k in known})
        except TypeError:
            return None


class ExplanationCache(Protocol):
    """Explanations per cause shared by the fleet, and its single-flight (Redis)."""

    def get(self, cause: str) -> Explanation | None: ...

    def put(self, cause: str, explanation: Explanation) -> None: ...

    def flight(self, cause: str, wait: float) -> contextlib.AbstractContextManager[bool]:
        """Hold the cause's lock while inside; False when another held it ``wait`` seconds."""
        ...


class ExplanationStore(Protocol):
    """Explanations in SQL: per cause, and with each failure's verdict."""

    def explanation(self, cause: str) -> Explanation | None: ...

    def save_explanation(self, cause: str, project: str, explanation: Explanation) -> None: ...

    def attach_explanation(self, failure_id: str, explanation: Explanation) -> Verdict | None:
        """Store it with the failure's verdict; the verdict as it now reads (None: no verdict)."""
        ...
