"""Resolving one submitted failure: record it, plan, run actions, decide.

Every failure submitted gets exactly one recorded verdict: a malformed
submission is recorded as ``rejected`` with the reason, a redelivered one
returns the verdict already stored, and the store's unique constraint on the
failure id makes a duplicate submit create nothing twice. A resolve writes to
the store twice: the failure when it arrives, then its outcome (attempts,
rule counts, verdict) in one go.

A `fix` rule's match is ``resolved`` only when its fix ran here and worked.
When some of it is left to the build agent (client-side actions), when its
actions only advise (``suggests=True``), or in a dry run, the verdict is
``suggested``: the fix is offered, and the rule's track record does not move.
The agent's report after its re-run (``tasks.client_outcome``) later makes a
client-side fix ``resolved`` or ``failed``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from theow_client import names
from theow_client.facts import (
    DEFAULT_FACT_LIMIT,
    SIDE_LIMITS,
    FactsError,
    bound_facts,
    bound_facts_kept,
    loads_facts,
)
from theow_client.job import job_fact
from theow_client.jsontypes import JsonObject
from theow_client.lines import FIELD as KEPT_LINES
from theow_client.lines import LineMap, LineMapError, compose, parse_kept_lines, to_wire
from theow_client.messages import SubmitRequest
from theow_client.verdict import BoundAction, Status, Verdict, jsonable
from theow_workers.core.actions import ActionError, ActionRegistry, ActionTimeout, call_action
from theow_workers.core.logs.normal import JobNormal
from theow_workers.core.logs.redact import redact, redact_text
from theow_workers.core.logs.summary import wrapper_predicate
from theow_workers.core.ports import (
    CLIENT_PENDING,
    SUGGESTED,
    UNCONFIRMED,
    AttemptRecord,
    FailureRecord,
    RuleStats,
    StepStore,
    Store,
    as_store,
)
from theow_workers.core.resolve.fingerprint import fingerprint, log_text
from theow_workers.core.resolve.plan import (
    Candidate,
    Hints,
    Plan,
    RuleBook,
    Similarity,
    matching_facts,
    plan,
)
from theow_workers.core.resolve.pointing import evidence_in_sent_log, evidence_of, pointed
from theow_workers.core.rules.matching import DEFAULT_REGEX_TIMEOUT, shown_captures
from theow_workers.core.rules.schema import Mode

log = logging.getLogger("theow.resolver")

MODE_STATUS = {Mode.RETRY: Status.RETRY, Mode.TRACK: Status.TRACKED}
PLAN_CACHE_SIZE = 2048
# Said by an unmatched verdict while a newer rules version loads: the rule it needs may be in it.
RULES_LOADING = "; rules are reloading, try again in a few seconds"
STATS_TTL = 5.0  # seconds


@dataclass(frozen=True)
class Submission:
    failure_id: str
    facts: JsonObject
    explore: bool = False
    source: str = "unknown"
    hints: Hints = Hints()
    notes: JsonObject = field(default_factory=dict)
    session_id: str | None = None  # groups LLM sessions under one budget (a replay job)
    fingerprint: str = ""
    # The verified agent that sent it; None for replayed history and in-process callers.
    agent: str | None = None
    idempotency_key: str | None = None
    # For each fact that was cut (by the client, here, or both): which lines of the original
    # it kept, so the lines a verdict points at count in the build's own log.
    lines: dict[str, LineMap] = field(default_factory=dict)

    @functools.cached_property
    def seen(self) -> JsonObject:
        """The facts as rules see them (``plan.matching_facts``): made once, for the
        match and for the lines to look at."""
        return matching_facts(self.facts)

    @classmethod
    def parse(
        cls,
        request: SubmitRequest,
        fallback_id: str,
        fact_limit: int = DEFAULT_FACT_LIMIT,
        agent: str | None = None,
        seen: PreparedFacts | None = None,
    ) -> Submission:
        """Read a submission's facts, notes and hints; FactsError says what is malformed.

        ``agent`` is the sender verified by the task (never read from the
        request): it sets the failure's source, and its idempotency key is kept.
        """
        if request.malformed is not None:
            raise FactsError(request.malformed)
        # Facts come as one JSON text (parsed here, under limits) or, from older
        # clients and in-process callers, as an object.
        raw = request.facts_json if request.facts_json is not None else request.facts
        facts, truncated, print_, cut_here = _prepare(raw, fact_limit, seen)
        notes, _ = bound_facts(request.notes or {}, limits=SIDE_LIMITS, where="notes")
        hints, _ = bound_facts(request.hints or {}, limits=SIDE_LIMITS, where="hints")
        if truncated:
            notes.setdefault("truncated", {}).update(truncated)
        try:
            lines = parse_kept_lines(request.kept_lines, facts)
        except LineMapError as exc:  # line numbers then count in the facts as received
            notes[f"{KEPT_LINES}_ignored"] = str(exc)[:300]
            lines = {}
        for fact, pieces in cut_here.items():  # cut again here: this cut's lines, then the client's
            lines[fact] = compose(lines[fact], pieces) if fact in lines else pieces
        if lines:  # kept with the failure: its stored log is shown numbered as the build's
            notes[KEPT_LINES] = to_wire(lines)
        source = f"agent:{agent}" if agent is not None else request.source
        return cls(
            failure_id=request.failure_id_or(fallback_id),
            facts=facts,
            fingerprint=print_,
            agent=agent,
            idempotency_key=request.idempotency_key if agent is not None else None,
            explore=request.explore,
            source=str(source or "unknown")[:200],
            hints=Hints.from_dict(hints),
            notes=notes,
            session_id=request.session_id,
            lines=lines,
        )


_Prepared = tuple[JsonObject, JsonObject, str, dict[str, LineMap]]
PREPARED_CACHE_SIZE = 256


class PreparedFacts:
    """Facts seen before, already bounded, masked and fingerprinted, the latest kept.

    A fleet sends the same failure many times, and masking and fingerprinting
    a 64 KB log costs ms. Each ``ResolveService`` owns one (a replay's shares
    its worker's), so nothing of it outlives the service.
    """

    def __init__(self, size: int = PREPARED_CACHE_SIZE) -> None:
        self.size = size
        self.items: OrderedDict[str, _Prepared] = OrderedDict()


def _prepare(raw: object, fact_limit: int, seen: PreparedFacts | None = None) -> _Prepared:
    """Facts bounded and masked, notes of what was cut, the fingerprint, the cuts' line maps."""
    key = ""
    if seen is not None:
        try:
            text = raw if isinstance(raw, str) else json.dumps(raw, sort_keys=True)
            key = hashlib.sha256(f"{fact_limit}\n{text}".encode()).hexdigest()
        except (TypeError, ValueError, RecursionError, UnicodeError):
            key = ""  # not JSON (bytes from an in-process caller): prepare without caching
    if seen is not None and key and key in seen.items:
        seen.items.move_to_end(key)
        facts, truncated, print_, cut = seen.items[key]
        # Copies: an action may change its facts.
        return dict(facts), dict(truncated), print_, dict(cut)
    if isinstance(raw, str):
        raw = loads_facts(raw)
    facts, truncated, cut = bound_facts_kept(raw, fact_limit)
    facts = redact(facts)
    cut = {fact: pieces for fact, pieces in cut.items() if fact in facts}
    prepared = (facts, dict(truncated), fingerprint(facts), cut)
    if seen is not None and key:
        seen.items[key] = prepared
        if len(seen.items) > seen.size:
            seen.items.popitem(last=False)
    return prepared


@dataclass(frozen=True)
class ResolveSettings:
    regex_timeout: float = DEFAULT_REGEX_TIMEOUT
    action_timeout: float = 30.0
    fact_limit: int = DEFAULT_FACT_LIMIT
    dry_run: bool = False  # match and record, run no actions (replay)


class ResolveService:
    def __init__(
        self,
        store: Store | StepStore,
        rulebook: Callable[[], RuleBook],
        actions: Callable[[], ActionRegistry],
        similarity: Callable[[JsonObject], Similarity] | None = None,
        settings: ResolveSettings = ResolveSettings(),
        explore: Callable[[Submission, str | None], str] | None = None,
        normals: Callable[[str], JobNormal | None] | None = None,
        prepared: PreparedFacts | None = None,
        loading: Callable[[], bool] | None = None,
    ) -> None:
        """``explore(submission, rule_name)`` hands a failure to an explorer and says how.

        ``normals(job)`` is the job's normal learned from its passing runs, or
        None; a failure whose job has none is handled as if it did not exist.
        ``loading()``: whether a newer rules version is still loading, which an
        unmatched verdict then says (its rule may be on the way).
        """
        self.loading = loading
        # A store written step by step (the replay chunk store) gets the same records.
        self.store = as_store(store)
        self.normals = normals
        self.explore = explore
        self.rulebook = rulebook
        self.actions = actions
        self.similarity = similarity
        self.settings = settings
        self.prepared = prepared if prepared is not None else PreparedFacts()
        # Plans for facts seen before: a fleet sends the same failure many times.
        self._plans: OrderedDict[str, Plan] = OrderedDict()
        self._stats: dict[str, RuleStats] | None = None
        self._stats_at = 0.0
        # Which lines are a wrapper's, for the rule book of that version.
        self._wrappers: tuple[str | None, Callable[[str], bool]] = (None, lambda line: False)

    def resolve(
        self,
        request: SubmitRequest,
        fallback_id: str,
        delivery: int = 1,
        agent: str | None = None,
        ran: list[AttemptRecord] | None = None,
    ) -> Verdict:
        """Decide one failure; ``agent``: its verified sender (see Submission.parse).

        ``ran``, when given, is filled with each attempt as it is made: a caller
        that stops this resolve (a time limit) hands them to :meth:`give_up`.
        """
        try:
            sub = Submission.parse(
                request, fallback_id, self.settings.fact_limit, agent, self.prepared
            )
        except Exception as exc:  # whatever a message holds, it gets an outcome
            return self._reject(request, fallback_id, _why(exc), agent)

        normal = self.normal_for(sub)
        if normal is not None:
            # The root cause is in what the job does not print when it passes.
            sub = replace(sub, fingerprint=fingerprint(sub.facts, normal.is_normal))
        existing = self._record(sub)
        if existing is not None:
            log.info("failure %s already decided: %s", sub.failure_id, existing.status)
            return existing
        # Attempts are written with the verdict; a caller that gives up on this
        # failure (a time limit) records what already ran from ``ran``.
        attempts: list[AttemptRecord] = ran if ran is not None else []
        verdict = self._decide(sub, delivery, normal, attempts)
        verdict = self._pointed(sub, verdict, normal)
        attempts[:] = [
            replace(a, evidence=evidence_in_sent_log(a.evidence, sub.facts, sub.lines))
            for a in attempts
        ]
        stored = self.store.record_outcome(verdict, attempts)
        log.info(
            "failure %s: %s%s",
            sub.failure_id,
            stored.status,
            f" by {stored.rule}" if stored.rule else "",
        )
        return stored

    def give_up(
        self,
        request: SubmitRequest,
        fallback_id: str,
        reason: str,
        ran: Sequence[AttemptRecord] = (),
        agent: str | None = None,
    ) -> Verdict:
        """Record an error verdict without trying again (poison message, hard limit).

        ``ran``: the attempts that already ran in a :meth:`resolve` this stops
        (its ``ran`` list); they are recorded with the verdict.
        """
        try:
            sub = Submission.parse(
                request, fallback_id, self.settings.fact_limit, agent, self.prepared
            )
        except Exception as exc:  # whatever a message holds, it gets an outcome
            return self._reject(request, fallback_id, _why(exc), agent)
        existing = self._record(sub)
        if existing is not None:
            return existing
        attempts = len(ran)
        verdict = Verdict(sub.failure_id, Status.ERROR, reason=reason, attempts=attempts)
        with contextlib.suppress(Exception):  # the lines help; an error verdict is kept without
            verdict = self._pointed(sub, verdict, None)
        return self.store.record_outcome(verdict, list(ran))

    def dead_letter(
        self, request: SubmitRequest, fallback_id: str, reason: str, agent: str | None = None
    ) -> Verdict:
        """Record an error verdict without reading the facts: the message itself is suspect.

        For a message that was delivered too many times: parsing its facts
        may be what killed the worker, so only a bounded preview is kept.
        """
        failure_id = request.failure_id_or(fallback_id)
        record = self._bare_record(request, failure_id, {"dead_letter": reason}, agent)
        existing = self.store.record_failure(record)
        if existing is not None:
            return existing
        log.error("failure %s dead-lettered: %s", failure_id, reason)
        return self.store.record_outcome(Verdict(failure_id, Status.ERROR, reason=reason))

    def _record(self, sub: Submission) -> Verdict | None:
        return self.store.record_failure(
            FailureRecord(
                id=sub.failure_id,
                fingerprint=sub.fingerprint or fingerprint(sub.facts),
                facts=sub.facts,
                problem_type=_text_or_none(sub.facts.get("problem_type")),
                source=sub.source,
                received_at=datetime.now(UTC),
                explore=sub.explore,
                notes=sub.notes,
                agent=sub.agent,
                idempotency_key=sub.idempotency_key,
            )
        )

    def reject(
        self, request: SubmitRequest, fallback_id: str, reason: str, agent: str | None = None
    ) -> Verdict:
        """Record the submission as ``rejected`` with ``reason``; never resolved."""
        return self._reject(request, fallback_id, reason, agent)

    def _reject(
        self, request: SubmitRequest, fallback_id: str, reason: str, agent: str | None = None
    ) -> Verdict:
        failure_id = request.failure_id_or(fallback_id)
        log.warning("failure %s rejected: %s", failure_id, reason)
        record = self._bare_record(request, failure_id, {"rejected": reason}, agent)
        return self.store.record_failure(record) or self.store.record_outcome(
            Verdict(failure_id, Status.REJECTED, reason=reason)
        )

    def _bare_record(
        self,
        request: SubmitRequest,
        failure_id: str,
        notes: JsonObject,
        agent: str | None = None,
    ) -> FailureRecord:
        source = f"agent:{agent}" if agent else request.source
        return FailureRecord(
            id=failure_id,
            fingerprint="",
            facts={},
            problem_type=None,
            source=source[:200] if source else "unknown",
            received_at=datetime.now(UTC),
            notes={**notes, "payload_preview": redact_text(request.preview())},
            agent=agent,
        )

    def _pointed(self, sub: Submission, verdict: Verdict, normal: JobNormal | None) -> Verdict:
        """The verdict with the lines to look at, matched or not, counted in the sent log."""
        book = self.rulebook()
        if self._wrappers[0] != book.version:
            self._wrappers = (book.version, wrapper_predicate(book.rules))
        rule = book.get(verdict.rule) if verdict.rule else None
        specific = rule is not None and not rule.generic and verdict.status != Status.UNEXPLAINED
        return pointed(
            verdict,
            sub.facts,
            sub.lines,
            evidence_of(verdict.evidence) if specific else None,
            is_normal=normal.is_normal if normal is not None else None,
            is_wrapper=self._wrappers[1],
            seen=sub.seen,
        )

    def _rule_stats(self) -> dict[str, RuleStats]:
        """Track records for ranking, re-read at most every few seconds (not per failure)."""
        now = time.monotonic()
        if self._stats is None or now - self._stats_at > STATS_TTL:
            self._stats, self._stats_at = self.store.rule_stats(), now
        return self._stats

    def normal_for(self, sub: Submission) -> JobNormal | None:
        return self.normal_of(sub.facts, sub.failure_id, sub.agent)

    def normal_of(
        self, facts: JsonObject, failure_id: str = "", agent: str | None = None
    ) -> JobNormal | None:
        """The failure's job's normal, when its job is known and passing runs were learned.

        An agent's failure meets the normal its own passing runs taught
        (``names.agent_job``): another agent's cannot teach it. Failing that,
        the normal an operator's replay taught, which no agent can write.
        """
        job = job_fact(facts)
        if job is None or self.normals is None:
            return None
        try:
            if agent is not None:
                own = self.normals(names.agent_job(agent, job))
                if own:
                    return own
            return self.normals(job) or None
        except Exception as exc:  # the job's normal helps; its absence must not fail a resolve
            log.warning("failure %s: job %s's normal unavailable: %s", failure_id, job, exc)
            return None

    def plan_for(self, sub: Submission, book: RuleBook, normal: JobNormal | None = None) -> Plan:
        key = _plan_key(sub, book.version + (f":{normal.digest}" if normal else ""))
        cached = self._plans.get(key)
        if cached is not None:
            self._plans.move_to_end(key)
            return cached
        similarity = self.similarity(sub.facts) if self.similarity is not None else None
        result = plan(
            book,
            sub.seen,
            sub.hints,
            similarity=similarity,
            stats=self._rule_stats() if similarity is not None else None,
            regex_timeout=self.settings.regex_timeout,
            is_normal=normal.is_normal if normal is not None else None,
        )
        # The same facts give the same plan while its order follows from them;
        # an order that fell to track records, which move, is made again.
        if len(result.attempts) <= 1 or not result.scored:
            self._plans[key] = result
            if len(self._plans) > PLAN_CACHE_SIZE:
                self._plans.popitem(last=False)
        return result

    def _decide(
        self,
        sub: Submission,
        delivery: int,
        normal: JobNormal | None,
        tried_attempts: list[AttemptRecord],
    ) -> Verdict:
        """The verdict; each attempt made is appended to ``tried_attempts`` for the store."""
        book = self.rulebook()
        result = self.plan_for(sub, book, normal)
        exploring = sub.explore and self.explore is not None
        # A probabilistic rule runs an LLM session: only when the submitter allowed exploring.
        # A wrapper rule (``generic``) names no cause: it is never tried, it runs nothing.
        validated = [c for c in result.attempts if exploring or not _probabilistic(c)]
        attempts = [c for c in validated if not c.generic]
        if not attempts:
            wrapper = result.wrapper
            # No rule chosen: every wrapper that validated is in `also`, the wrapper named first.
            named = wrapper.rule if wrapper is not None else None
            also = tuple(c.rule for c in validated)
            if exploring and self.explore is not None:
                reason = self.explore(sub, None)
                return Verdict(
                    sub.failure_id, Status.EXPLORING, reason=reason, also=also, wrapper=named
                )
            if wrapper is not None:
                return Verdict(
                    sub.failure_id,
                    Status.UNEXPLAINED,
                    reason=_unexplained_reason(wrapper),
                    also=also,
                    wrapper=named,
                )
            if self.loading is not None and self.loading():
                reason = _unmatched_reason(sub, result, RULES_LOADING)
                extra: JsonObject = {"rules_loading": True}
                return Verdict(sub.failure_id, Status.UNMATCHED, reason=reason, extra=extra)
            return Verdict(sub.failure_id, Status.UNMATCHED, reason=_unmatched_reason(sub, result))

        registry = self.actions()
        errors: list[str] = []
        tried = 0
        for candidate in attempts[: sub.hints.max_retries]:
            tried += 1
            verdict, error = self._attempt(sub, candidate, book, registry, delivery, tried_attempts)
            if verdict is not None:
                also = tuple(c.rule for c in validated if c.rule != candidate.rule)
                seen = tuple(c.rule for c in validated if c.normal)
                return replace(verdict, attempts=tried, also=also, seen_in_passing=seen)
            errors.append(f"{candidate.rule}: {error}")
        return Verdict(
            sub.failure_id,
            Status.FAILED,
            reason="every matching rule failed: " + "; ".join(errors),
            attempts=tried,
        )

    def _attempt(
        self,
        sub: Submission,
        candidate: Candidate,
        book: RuleBook,
        registry: ActionRegistry,
        delivery: int,
        tried_attempts: list[AttemptRecord],
    ) -> tuple[Verdict | None, str]:
        assert candidate.match is not None
        rule = candidate.match.rule
        bound = candidate.match.actions
        evidence = candidate.match.evidence.to_dict() if candidate.match.evidence else None
        status = MODE_STATUS.get(rule.mode, Status.RESOLVED)
        started = time.monotonic()
        outputs: list[JsonObject] = []
        outcome, error = "success", ""
        if rule.llm_config is not None:
            # A probabilistic rule: an LLM session with its prompt runs instead of actions,
            # only when the submitter allowed exploration.
            assert self.explore is not None
            reason = self.explore(sub, rule.name)
            return Verdict(
                sub.failure_id,
                Status.EXPLORING,
                rule=rule.name,
                mode="explore",
                reason=reason,
                evidence=evidence,
            ), ""
        if rule.mode is Mode.FIX and self.settings.dry_run:
            outcome = SUGGESTED  # matched, and nothing of the fix ran
        elif rule.mode is Mode.FIX:
            try:
                outputs = self._run_worker_actions(sub, bound, registry)
            except ActionError as exc:
                outcome = "timeout" if isinstance(exc, ActionTimeout) else "error"
                error = str(exc)
            if outcome == "success" and any(a.client_side for a in bound):
                # Not a success yet: the build agent has still to run the rest.
                outcome = CLIENT_PENDING
            elif outcome == "success" and _only_suggests(bound, registry):
                outcome = SUGGESTED  # the build fails until someone acts on the advice
        if outcome in UNCONFIRMED:
            status = Status.SUGGESTED
        tried_attempts.append(
            AttemptRecord(
                failure_id=sub.failure_id,
                rule=rule.name,
                params=[{"action": a.action, "params": a.params} for a in bound],
                outcome=outcome,
                error=error,
                duration_ms=(time.monotonic() - started) * 1000,
                delivery=delivery,
                evidence=evidence,
            )
        )
        if outcome != "success" and outcome not in UNCONFIRMED:
            log.info("failure %s: rule %s failed: %s", sub.failure_id, rule.name, error)
            return None, error
        return (
            Verdict(
                sub.failure_id,
                status,
                rule=rule.name,
                mode=rule.mode.value,
                actions=bound,
                outputs=tuple(outputs),
                reason=_because(rule.name, candidate),
                evidence=evidence,
                captures=shown_captures(candidate.match.captures),
            ),
            "",
        )

    def _run_worker_actions(
        self, sub: Submission, bound: tuple[BoundAction, ...], registry: ActionRegistry
    ) -> list[JsonObject]:
        outputs = []
        for step in bound:
            if step.client_side:
                continue
            spec = registry.get(step.action)
            if spec is None:
                raise ActionError(f"action {step.action!r} is not registered on this worker")
            output = call_action(
                spec, step.params, facts=sub.facts, timeout=self.settings.action_timeout
            )
            outputs.append({"action": step.action, "output": jsonable(output)})
        return outputs


def _because(rule: str, candidate: Candidate) -> str:
    """The verdict's reason: the evidence line when there is one."""
    if candidate.match is not None and candidate.match.evidence is not None:
        return candidate.match.evidence.describe(rule)
    return candidate.reason


def _unexplained_reason(wrapper: Candidate) -> str:
    """Why no rule explains the failure, with the wrapper line that did match."""
    evidence = wrapper.match.evidence if wrapper.match is not None else None
    where = f" at {evidence.fact} line {evidence.line:,}: {evidence.text}" if evidence else ""
    return f"no rule knows the cause; only the wrapper {wrapper.rule} matched{where}"


def _only_suggests(bound: tuple[BoundAction, ...], registry: ActionRegistry) -> bool:
    """Whether every action of a fix only says what to do (``suggests=True``)."""
    specs = [registry.get(step.action) for step in bound]
    return all(spec is not None and spec.suggests for spec in specs)


def _probabilistic(candidate: Candidate) -> bool:
    return candidate.match is not None and candidate.match.rule.llm_config is not None


def _plan_key(sub: Submission, version: str) -> str:
    blob = json.dumps([version, sub.facts, sub.hints.__dict__], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _unmatched_reason(sub: Submission, result: Plan, note: str = "") -> str:
    if not log_text(sub.facts).strip():
        return "no rule matched; the facts carry no log text (stderr missing or empty)"
    return f"no rule matched ({result.checked} checked{note})"


def _why(exc: Exception) -> str:
    if isinstance(exc, FactsError):
        return str(exc)[:2000]
    return f"unreadable submission ({type(exc).__name__}: {str(exc)[:500]})"


def _text_or_none(value: object) -> str | None:
    return None if value is None else str(value)[:200]
