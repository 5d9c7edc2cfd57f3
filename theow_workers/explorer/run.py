"""Wiring one exploration request to the services of this worker process.

The ``theow.explore`` task calls :func:`explore_failure` with the
``ExploreRequest`` it read (``theow_client.messages``); the failure's facts
come from SQL (the resolver recorded them, secrets masked).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from theow_client import names
from theow_client.job import job_fact
from theow_client.jsontypes import JsonObject
from theow_client.messages import ExploreRequest
from theow_workers.core.explore.context import ExplorationContext, Probe
from theow_workers.core.explore.proposal import Repository
from theow_workers.core.explore.service import ExploreService, ExploreSettings
from theow_workers.core.llm.model import Budget, Outcome, offered
from theow_workers.core.logs.normal import JobNormal
from theow_workers.core.logs.redact import Masker, settings_secrets
from theow_workers.core.ports import Exploration
from theow_workers.core.resolve.fingerprint import query_text
from theow_workers.core.rules.schema import Rule, prompt_path
from theow_workers.explorer.sandbox import sandbox_problem
from theow_workers.explorer.tools import Workspace, deployment_tools, read_log_tool

if TYPE_CHECKING:
    from redis import Redis

    from theow_workers.config import Settings
    from theow_workers.core.ports import Embedder, Hit, Normals, RuleIndex
    from theow_workers.core.resolve.library import Library
    from theow_workers.store.explore import ExploreStore
    from theow_workers.store.results import SqlStore


class Runtime(Protocol):
    """What an exploration uses of its process's services (``runtime.Runtime``)."""

    settings: Settings

    @property
    def redis(self) -> Redis: ...

    @property
    def store(self) -> SqlStore: ...

    @property
    def embedder(self) -> Embedder: ...

    @property
    def index(self) -> RuleIndex: ...

    @property
    def normals(self) -> Normals: ...

    def knowledge(self) -> Library: ...


def enqueue(runtime: Runtime, failure_id: str, rule: str | None, session_id: str | None) -> str:
    """Send a failure to the explore queue; the reason the verdict gives."""
    from theow_workers.celery_app import app
    from theow_workers.tokens import signed_internal

    request = ExploreRequest(failure_id, rule, session_id).to_wire()
    task_id = names.explore_task_id(failure_id)
    signed = signed_internal(runtime.settings, names.TASK_EXPLORE, request)  # internal task
    app.send_task(names.TASK_EXPLORE, args=[signed], task_id=task_id, queue=names.QUEUE_EXPLORE)
    what = f"probabilistic rule {rule}" if rule else "no rule matched"
    return f"{what}; sent to an explorer (task {task_id})"


def default_session_id(agent: str | None = None) -> str:
    """The verified agent's hourly window: ``session_limit`` LLM sessions per agent per hour.

    Unless an internal job (a replay) names its own. Keyed on the agent the
    failure's signature named, never on anything it sent: one agent cannot
    spend another's sessions, nor give itself a fresh budget per submission.
    Failures with no agent (replayed history) share the fleet's window.
    """
    hour = datetime.now(UTC).strftime("%Y-%m-%dT%H")
    return f"hour:{agent}:{hour}" if agent else f"hour:{hour}"


def service(runtime: Runtime) -> ExploreService:
    from theow_workers.adapters.providers import gateway_from_settings
    from theow_workers.adapters.redis_state import RedisExploreState, RedisLimiter, spend_cap
    from theow_workers.store.explore import ExploreStore

    s = runtime.settings
    limiter = RedisLimiter(runtime.redis, s.llm_requests_per_minute, s.llm_tokens_per_minute)
    budget = Budget(
        max_tool_calls=s.llm_max_tool_calls,
        max_tokens=s.llm_max_tokens,
        max_wait_seconds=s.llm_max_wait_seconds,
    )
    return ExploreService(
        state=RedisExploreState(runtime.redis),
        sink=ExploreStore(runtime.store),
        gateway=lambda: gateway_from_settings(
            s, limiter, spend_cap(runtime.redis, s.llm_daily_budget)
        ),
        embed=lambda text: runtime.embedder.embed([text])[0],
        settings=ExploreSettings(
            budget=budget,
            session_limit=s.session_limit,
            flight_ttl=s.explore_time_limit,
            prices=s.model_prices,
        ),
        regex_timeout=s.regex_timeout,
        load_prompt=lambda template: load_prompt(template, s.rule_layers),
        mask=Masker(settings_secrets(s)),
    )


def explorer_problem(settings: Settings) -> str | None:
    """Why a worker with these settings cannot explore, or None if it can.

    Checked before an explorer starts, so that a missing key or an unusable
    model name stops it at once instead of failing every queued exploration.
    """
    from theow_workers.adapters.providers import gateway_from_settings
    from theow_workers.config import ConfigError

    if not settings.explore:
        return "THEOW_EXPLORE is not set: a worker on the explore queue needs THEOW_EXPLORE=1"
    sandboxed = sorted({"shell", "network"} & set(settings.explore_permissions))
    if sandboxed and (problem := sandbox_problem(settings.explore_bwrap)):
        granted = ", ".join(sandboxed)
        return f"THEOW_EXPLORE_PERMISSIONS grants {granted}, which run only in a sandbox: {problem}"
    try:
        gateway = gateway_from_settings(settings)
    except ConfigError as exc:
        return str(exc)
    models = [gateway.primary, gateway.secondary] if gateway.secondary else [gateway.primary]
    problems = [p for p in (m.check() for m in models) if p]
    return "; ".join(problems) or None


def load_prompt(template: str, rule_layers: Sequence[Path]) -> str:
    """An inline prompt, or ``file://PATH`` in a rule layer or the ``prompts/`` folder
    beside it (the last layer first).

    Only those folders: the prompt goes to the model, so an absolute path, ``..``
    or a symlink (which could name ``/proc/self/environ`` or a secret file) is
    refused with a ValueError, as is a missing file.
    """
    relative = prompt_path(template)
    if relative is None:
        return template
    for layer in reversed(rule_layers):
        for base in (layer.parent, layer):
            if base == layer.parent and relative.parts[0] != "prompts":
                continue  # beside a rule layer, only its prompts/ folder
            path = base / relative
            if path.is_symlink() or any(p.is_symlink() for p in _between(base, path)):
                raise ValueError(f"prompt template {template!r} is a symlink ({path}): refused")
            if path.is_file():
                return path.read_text(encoding="utf-8")
    where = ", ".join(f"{layer}, {layer.parent / 'prompts'}" for layer in rule_layers)
    raise ValueError(f"prompt template {template!r} not found in {where}")


def _between(base: Path, path: Path) -> list[Path]:
    """The folders from ``base`` (excluded) down to ``path``'s parent."""
    parts = path.relative_to(base).parts
    return [base.joinpath(*parts[:i]) for i in range(1, len(parts))]


def explore_failure(
    runtime: Runtime, request: ExploreRequest, explorer: ExploreService
) -> Exploration:
    from theow_workers.store.explore import ExploreStore

    failure_id = request.failure_id
    failure = ExploreStore(runtime.store).failure(failure_id)
    if failure is None:
        raise LookupError(f"failure {failure_id} is not in the database")
    facts = dict(failure.facts)
    s = runtime.settings
    if not s.explore:
        exploration = Exploration(
            failure_id,
            failure.fingerprint,
            Outcome.ERROR.value,
            reason="THEOW_EXPLORE is not set on this worker: exploring is off",
        )
        ExploreStore(runtime.store).add_exploration(exploration)
        return exploration

    knowledge = runtime.knowledge()
    rule = knowledge.book.get(request.rule) if request.rule else None
    actions_dir = s.user_actions_dir.resolve()
    repo = Repository(
        rule_names=frozenset(r.name for r in knowledge.rules.rules),
        action_files={spec.name: Path(spec.source_file) for spec in knowledge.actions},
        actions_dir=actions_dir,
        root=actions_dir.parent,
    )

    def search(query: str, kind: str, limit: int) -> list[Hit]:
        return runtime.index.search(runtime.embedder.embed([query])[0], kind=kind, limit=limit)

    context = ExplorationContext(
        facts, knowledge.rules.rules, knowledge.actions, repo, search, s.regex_timeout
    )
    job = job_fact(facts)
    normal = _normal(runtime.normals, job, failure.agent) if job is not None else None
    context.is_normal = normal.is_normal if normal is not None else None
    context.book = knowledge.book
    context.probe = draft_probe(ExploreStore(runtime.store), normal)
    workspace = Workspace(facts, s.explore_permissions, s.explore_bwrap)
    try:
        candidates = [read_log_tool(facts), *workspace.tools(), *deployment_tools(s.explore_tools)]
        context.extra_tools = offered(candidates, s.explore_permissions)
        return explorer.explore(
            failure_id,
            failure.fingerprint,
            facts,
            context,
            query_text(facts),
            session_id=request.session_id or default_session_id(failure.agent),
            rule=rule,
            session_limit=request.session_limit,
        )
    finally:
        workspace.close()


def _normal(normals: Normals, job: str, agent: str | None) -> JobNormal | None:
    """The job's normal as the resolver reads it: the failure's verified agent's own first.

    Then the one an operator's replay taught (``core.resolve.service.normal_of``).
    """
    own = normals.normal(names.agent_job(agent, job)) if agent else None
    return own or normals.normal(job)


PROBE_FAILURES = 2_000  # stored failures a draft is tried on per test_rule: seconds, not minutes


def draft_probe(
    store: ExploreStore, normal: JobNormal | None, limit: int = PROBE_FAILURES
) -> Probe:
    """``test_rule``'s "where else would it fire": the first ``limit`` stored failures
    (by id: no recency bias) and the templates of the job's passing runs."""
    from theow_workers.core.resolve.plan import matching_facts
    from theow_workers.core.rules.matching import evaluate

    templates = _templates(normal)

    def probe(rule: Rule) -> JsonObject:
        fired, scanned, after = 0, 0, ""
        examples: list[str] = []
        while scanned < limit:
            page = store.failure_facts(after, min(500, limit - scanned))
            if not page:
                break
            for fid, facts in page:
                scanned += 1
                if evaluate(rule, matching_facts(facts)).ok:
                    fired += 1
                    examples += [fid] if len(examples) < 5 else []
            after = page[-1][0]
        passing = _fires_on_templates(rule, templates)
        return {
            "stored_failures": fired,
            "scanned": scanned,
            "examples": examples,
            "passing_templates": len(passing) if normal is not None else None,
            "passing_examples": passing[:3],
        }

    return probe


# A template's masks, filled with a value of their kind so a draft's pattern can be tried on it.
_SAMPLES = {
    "<n>": "1",
    "<hex>": "0123abc",
    "<uuid>": "00000000-0000-0000-0000-000000000000",
    "<ts>": "2020-01-01T00:00:00Z",
    "<dur>": "1s",
    "<path>/": "/p/",
    "<*>": "x",
}
_MASKS = re.compile("|".join(re.escape(m) for m in _SAMPLES))


def _fires_on_templates(rule: Rule, templates: list[str]) -> list[str]:
    """The passing-run templates every ``log`` pattern of ``rule`` finds (masks filled in;
    case aside: templates are lower-cased), a pattern that runs too long counted as firing."""
    import regex

    patterns = [
        regex.compile(c.regex, regex.IGNORECASE | regex.MULTILINE | regex.DOTALL)
        for c in rule.when
        if c.fact == "log" and c.regex
    ]
    if not patterns:
        return []
    found = []
    for template in templates:
        line = _MASKS.sub(lambda m: _SAMPLES[m.group(0)], template)
        try:
            if all(p.search(line, timeout=0.05) for p in patterns):
                found.append(template)
        except TimeoutError:
            found.append(template)
    return found


def _templates(normal: JobNormal | None) -> list[str]:
    """The job's passing-run templates as lines (a wildcard as ``<*>``)."""
    if normal is None:
        return []
    shapes = [" ".join(tokens) for group in normal.wildcard.values() for tokens in group]
    return sorted(normal.exact) + shapes


def record_explore_error(runtime: Runtime, request: ExploreRequest, reason: str) -> JsonObject:
    """Record an exploration that could not finish, so the failure keeps one outcome."""
    from theow_workers.store.explore import ExploreStore

    failure_id = request.failure_id
    store = ExploreStore(runtime.store)
    failure = store.failure(failure_id)
    exploration = Exploration(
        failure_id, failure.fingerprint if failure else "", Outcome.ERROR.value, reason=reason
    )
    store.add_exploration(exploration)
    return exploration.summary()
