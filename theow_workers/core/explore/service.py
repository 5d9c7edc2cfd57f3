"""Exploring one unmatched failure, in the order DESIGN §4 sets.

1. Same root cause (fingerprint) already explored → reuse its outcome; being
   explored right now → come back later (``InFlight``). One LLM session per
   root cause, fleet-wide.
2. Semantic session cache: a recent proposal whose rule *validates against
   these facts* is reused, its params re-bound to them.
3. Session budget per session id; 4. the global rate limit (inside the gateway);
5. the tool session itself, recorded whatever its outcome.
"""

from __future__ import annotations

import hashlib
import logging
import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from theow_client.jsontypes import Json, JsonObject
from theow_workers.core.explore.context import ExplorationContext, render_prompt, result_of
from theow_workers.core.llm.model import (
    MODEL_TEXT_LIMIT,
    Budget,
    FallbackRunner,
    ModelError,
    Outcome,
    QuotaExhausted,
    SessionResult,
    cut,
)
from theow_workers.core.logs.redact import Masker
from theow_workers.core.logs.summary import summarize
from theow_workers.core.ports import Exploration, ExplorationSink, ExploreState
from theow_workers.core.resolve.fingerprint import error_lines
from theow_workers.core.rules.matching import evaluate
from theow_workers.core.rules.schema import Rule, RuleError, parse_rule

log = logging.getLogger("theow.explorer")

CACHE_SIMILARITY = 0.6  # below this a cached proposal is not even validated
REASON_LIMIT = 3900  # a reason and its cut marker fit the 4000 characters SQL keeps
TRANSCRIPT_TURNS = 200  # turns of a transcript kept (a session has 30 tool calls by default)


def refine(fingerprint: str, facts: JsonObject) -> str:
    """A fingerprint that also keeps the numbers: for causes that collide without them."""
    raw = "\n".join(error_lines(summarize(facts)))
    return f"{fingerprint[:16]}-{hashlib.sha256(raw.encode()).hexdigest()[:15]}"


class InFlight(Exception):
    """Another session is exploring this root cause right now."""

    def __init__(self, fingerprint: str, owner: str) -> None:
        super().__init__(f"root cause {fingerprint} is being explored for failure {owner}")
        self.fingerprint = fingerprint
        self.owner = owner


@dataclass(frozen=True)
class ExploreSettings:
    budget: Budget = Budget()
    session_limit: int = 20
    session_ttl: int = 3600
    flight_ttl: int = 900
    prices: dict[str, tuple[float, float]] = field(default_factory=dict)  # model -> $/1M in, out


def cost_of(result: SessionResult, prices: dict[str, tuple[float, float]]) -> float:
    """Dollars for a session; a session that switched models is priced at its last one."""
    model = result.models[-1] if result.models else ""
    price_in, price_out = prices.get(model, prices.get(model.split("/")[-1], (0.0, 0.0)))
    return (result.tokens_in * price_in + result.tokens_out * price_out) / 1_000_000


def _bounded(transcript: list[JsonObject]) -> list[JsonObject]:
    """The transcript with at most TRANSCRIPT_TURNS turns and each text cut.

    The session cuts what it records already; this holds for any gateway.
    """
    kept = transcript[:TRANSCRIPT_TURNS]
    bounded = [
        {k: cut(v, MODEL_TEXT_LIMIT) if isinstance(v, str) else v for k, v in turn.items()}
        for turn in kept
    ]
    if len(transcript) > len(kept):
        bounded.append({"role": "event", "text": f"{len(transcript) - len(kept)} more turns cut"})
    return bounded


def _wrappers(context: ExplorationContext) -> Callable[[str], bool] | None:
    return context.book.is_wrapper if context.book is not None else None


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return dot / norm if norm else 0.0


class ExploreService:
    def __init__(
        self,
        state: ExploreState,
        sink: ExplorationSink,
        gateway: Callable[[], FallbackRunner],
        embed: Callable[[str], list[float]],
        settings: ExploreSettings = ExploreSettings(),
        regex_timeout: float = 0.05,
        load_prompt: Callable[[str], str] = lambda template: template,
        mask: Callable[[Json], Json] | None = None,
    ) -> None:
        """``load_prompt`` turns a rule's ``prompt_template`` (inline or ``file://``) into
        text, raising ValueError for a template it refuses. ``mask`` masks secrets in
        everything a model or a tool wrote (the reason, the transcript) before it is
        recorded: by default the secret rules, the worker adds its deployment's secrets."""
        self.load_prompt = load_prompt
        self.mask: Callable[[Json], Json] = mask or Masker()
        self.state = state
        self.sink = sink
        self.gateway = gateway
        self.embed = embed
        self.settings = settings
        self.regex_timeout = regex_timeout

    def explore(
        self,
        failure_id: str,
        fingerprint: str,
        facts: JsonObject,
        context: ExplorationContext,
        query: str,
        session_id: str,
        rule: Rule | None = None,
        session_limit: int | None = None,
    ) -> Exploration:
        """Decide and record one exploration; raises InFlight to be retried later.

        ``session_limit`` caps the LLM sessions of ``session_id`` instead of the
        configured limit: a replay job's ``--budget``.
        """
        base = Exploration(failure_id, fingerprint, Outcome.ERROR.value, session_id=session_id)
        if rule is not None:
            base.rule = rule.name
        if rule is None:
            reused = self._reuse(base, facts)
            if reused is not None:
                return reused
            fingerprint = base.fingerprint  # refined when a colliding cause was found
        owner = self.state.take_flight(fingerprint, failure_id, self.settings.flight_ttl)
        if owner is not None and owner != failure_id:
            raise InFlight(fingerprint, owner)
        try:
            # Another session may have finished this cause between our look and our flight.
            reused = self._reuse(base, facts) if rule is None else None
            if reused is not None:
                return reused
            limit = self.settings.session_limit if session_limit is None else session_limit
            return self._explore(base, facts, context, query, session_id, rule, limit)
        finally:
            self.state.land(fingerprint)

    def _reuse(self, base: Exploration, facts: JsonObject) -> Exploration | None:
        """The finished exploration of this root cause, if its rule holds for these facts.

        Two causes can share a fingerprint (they differ only by numbers the
        fingerprint normalizes away); when the earlier proposal's rule does
        not validate, this failure gets a refined fingerprint of its own.
        """
        done = self.state.finished(base.fingerprint)
        if done is None:
            return None
        bound = self._validate(done.get("rule_yaml"), facts)
        if done.get("rule_yaml") and bound is None:
            base.fingerprint = refine(base.fingerprint, facts)
            return self._reuse(base, facts) if base.fingerprint != done.get("fingerprint") else None
        log.info(
            "failure %s: root cause already explored (%s)", base.failure_id, done.get("outcome")
        )
        base.bound = bound or []
        return self._record(
            base,
            Outcome.DEDUPLICATED,
            f"same root cause as failure {done['failure_id']} ({done.get('outcome')})",
            proposal_id=done.get("proposal_id"),
        )

    def _validate(self, rule_yaml: str | None, facts: JsonObject) -> list[JsonObject] | None:
        """Bound actions when ``rule_yaml`` validates against ``facts``, else None."""
        if not rule_yaml:
            return None
        try:
            match = evaluate(parse_rule(rule_yaml), facts, regex_timeout=self.regex_timeout)
        except RuleError:
            return None
        return (
            [{"action": a.action, "params": a.params} for a in match.actions] if match.ok else None
        )

    def _explore(
        self,
        base: Exploration,
        facts: JsonObject,
        context: ExplorationContext,
        query: str,
        session_id: str,
        rule: Rule | None,
        limit: int,
    ) -> Exploration:
        vector = self.embed(query)
        if rule is None:
            hit = self._cache_hit(vector, facts)
            if hit is not None:
                proposal_id, bound = hit
                log.info("failure %s: session cache hit, proposal %s", base.failure_id, proposal_id)
                base.bound = bound
                result = self._record(
                    base,
                    Outcome.CACHE_HIT,
                    "a cached proposal validates against these facts",
                    proposal_id=proposal_id,
                )
                self.state.finish(base.fingerprint, result.summary())
                return result
        number = self.state.take_session(session_id, limit, self.settings.session_ttl)
        if number < 0:
            log.info(
                "failure %s: session limit %d reached for %s", base.failure_id, limit, session_id
            )
            return self._record(
                base, Outcome.LIMIT, f"session limit of {limit} reached for {session_id}"
            )

        budget, prompt, tools, use_secondary = (
            self.settings.budget,
            render_prompt(facts, is_normal=context.is_normal, is_wrapper=_wrappers(context)),
            context.meta_tools(),
            False,
        )
        if rule is not None and rule.llm_config is not None:
            config = rule.llm_config
            budget = Budget.from_constraints(config.constraints, budget)
            try:
                extra = self.load_prompt(config.prompt_template)
            except (OSError, ValueError) as exc:
                log.warning("failure %s: rule %s: %s", base.failure_id, rule.name, exc)
                return self._record(base, Outcome.ERROR, f"rule {rule.name}: {exc}")
            prompt = render_prompt(
                facts, extra=extra, is_normal=context.is_normal, is_wrapper=_wrappers(context)
            )
            wanted = {
                "test_rule",
                "submit_rule",
                "give_up",
                *config.tools,
            }  # rule_from_lines if listed
            tools = [t for t in [*tools, *context.extra_tools] if t.name in wanted]
            use_secondary = config.use_secondary
        else:
            tools = tools + context.extra_tools
        # Masked before it leaves: a log may print the deployment's own secrets (the
        # model's key, a password), which the agent's masking cannot know.
        prompt = self.mask(prompt)
        try:
            session = self.gateway().tool_session(
                prompt, tools, budget, use_secondary=use_secondary
            )
        except QuotaExhausted as exc:
            log.warning("failure %s: rate limited: %s", base.failure_id, exc)
            self._account(base, exc.partial)
            return self._record(base, Outcome.RATE_LIMITED, str(exc))
        except ModelError as exc:
            log.warning("failure %s: the model failed: %s", base.failure_id, exc)
            self._account(base, exc.partial)
            return self._record(base, Outcome.ERROR, f"the model failed: {exc}")
        return self._from_session(base, session, vector)

    def _account(self, base: Exploration, session: SessionResult | None) -> None:
        """Copy what a session used onto its record: tokens and cost count even when it failed."""
        if session is None:
            return
        base.models, base.turns, base.transcript = session.models, session.turns, session.transcript
        base.tool_calls = len(session.tool_calls)
        base.tokens_in, base.tokens_out = session.tokens_in, session.tokens_out
        base.cost = cost_of(session, self.settings.prices)

    def _from_session(
        self, base: Exploration, session: SessionResult, vector: list[float]
    ) -> Exploration:
        self._account(base, session)
        result = result_of(session.payload)
        if session.outcome is Outcome.PROPOSAL and result is not None:
            proposal_id = str(uuid.uuid4())
            proposal = {
                "id": proposal_id,
                "rule_name": result.rule.name,
                "rule_yaml": result.rule_yaml,
                "diffs": [d.to_dict() for d in result.actions],
                "status": "pending",
            }
            base.bound = result.bound
            recorded = self._record(
                base,
                Outcome.PROPOSAL,
                session.reason or f"proposed rule {result.rule.name}",
                proposal_id=proposal_id,
                proposal=proposal,
            )
            self.state.remember(proposal_id, vector, result.rule_yaml)
            self.state.finish(
                base.fingerprint,
                {
                    **recorded.summary(),
                    "rule_yaml": result.rule_yaml,
                    "fingerprint": base.fingerprint,
                },
            )
            return recorded
        reason = session.reason or str(session.payload.get("reason", ""))
        recorded = self._record(base, session.outcome, reason)
        if session.outcome in (Outcome.GAVE_UP, Outcome.DONE):
            self.state.finish(base.fingerprint, recorded.summary())
        return recorded

    def _cache_hit(
        self, vector: list[float], facts: JsonObject
    ) -> tuple[str, list[JsonObject]] | None:
        """The most similar cached proposal whose rule validates against ``facts``."""
        entries = sorted(
            ((_cosine(vector, e["vector"]), e) for e in self.state.cached()),
            key=lambda p: p[0],
            reverse=True,
        )
        for similarity, entry in entries:
            if similarity < CACHE_SIMILARITY:
                break
            bound = self._validate(entry["rule_yaml"], facts)
            if bound is not None:
                return entry["proposal_id"], bound
        return None

    def _record(
        self,
        exploration: Exploration,
        outcome: Outcome,
        reason: str,
        proposal_id: str | None = None,
        proposal: JsonObject | None = None,
    ) -> Exploration:
        # Whatever a model or a tool wrote is masked and bounded here, the one way
        # out to SQL, the explore state in Redis, the task's result and the client.
        exploration.outcome, exploration.reason, exploration.proposal_id = (
            outcome.value,
            self.mask(cut(reason, REASON_LIMIT)),
            proposal_id,
        )
        exploration.transcript = self.mask(_bounded(exploration.transcript))
        self.sink.add_exploration(exploration, proposal)
        log.info(
            "failure %s: exploration %s (%s)",
            exploration.failure_id,
            outcome.value,
            exploration.reason[:300],
        )
        return exploration
