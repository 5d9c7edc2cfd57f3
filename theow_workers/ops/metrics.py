"""``theow metrics``: the domain's Prometheus metrics, read from SQL at scrape time.

Flower's ``/metrics`` covers Celery (tasks, workers, queue latency); these say
what the fleet learns. Every value is computed from the SQL store when
Prometheus scrapes, so any number of workers and one metrics process agree
and nothing is lost when a worker restarts.

=======================================  =========  ================================
metric                                   type       labels
=======================================  =========  ================================
``theow_failures_received_total``        counter
``theow_verdicts_total``                 counter    ``status``, ``rule``
``theow_attempts_total``                 counter    ``rule``, ``outcome``
``theow_explorations_total``             counter    ``outcome``
``theow_llm_tokens_total``               counter    ``direction`` (input, output)
``theow_llm_cost_dollars_total``         counter
``theow_proposals``                      gauge      ``status``
``theow_replay_jobs``                    gauge      ``status``
``theow_replay_job_items``               gauge      ``job``, ``kind`` (processed, matched…)
``theow_replay_job_progress_ratio``      gauge      ``job``
``theow_dead_letters_total``             counter    failures given up unread (delivered too often)
``theow_refused_messages_total``         counter    ``task``, ``reason`` (``unverified``: the
                                                    sender's signature; ``rate_limited``: an
                                                    agent past its rate; else the broker edge's)
``theow_broker_dead_letters``            gauge      messages kept in ``theow:dead-letters``
``theow_rules_invalid``                  gauge      1 while workers find the rules directory invalid
``theow_sql_up``                         gauge      1 if this scrape could query SQL
=======================================  =========  ================================

Replay series cover the jobs still in progress and the latest one, so their
number stays small. Counters are ``count(*)`` and ``sum()`` over the tables:
if old rows are ever pruned, Prometheus sees a counter reset.

    $ theow metrics --port 9808 --address 0.0.0.0
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from theow_client import names
from theow_workers.config import Settings

if TYPE_CHECKING:
    from theow_workers.store.figures import Figures

log = logging.getLogger("theow.metrics")

REPLAY_ACTIVE = ("pending", "running", "interrupted")
REPLAY_COUNTERS = ("processed", "matched", "unmatched", "failed", "errors", "invalid", "duplicates")
REPLAY_SERIES_LIMIT = 20


class StoreCollector(Collector):
    """Reads the store's figures on every scrape (``engine``: the store's engine)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def describe(self) -> Iterable[Metric]:
        return []  # no query at registration: the database may not be up yet

    def collect(self) -> Iterator[Metric]:
        from theow_workers.store.figures import Figures

        start = time.monotonic()
        families: list[Metric] = []
        try:
            with Figures.read(self.engine) as figures:
                tables = figures.tables()
                families += _resolves(figures, tables)
                families += _explorations(figures, tables)
                families += _replays(figures, tables)
            up = 1.0
        except Exception as exc:
            log.warning("metrics: cannot query the SQL store: %s", exc)
            families, up = [], 0.0
        yield from families
        yield GaugeMetricFamily("theow_sql_up", "1 if this scrape could query the SQL store", up)
        yield GaugeMetricFamily(
            "theow_metrics_scrape_duration_seconds",
            "Time spent querying SQL for this scrape",
            time.monotonic() - start,
        )


def _resolves(figures: Figures, tables: set[str]) -> list[Metric]:
    if not {"failures", "verdicts", "attempts"} <= tables:
        return []
    # Replayed history is not traffic (live=True): its rows have their own metrics.
    failures = CounterMetricFamily(
        "theow_failures_received",
        "Failures received from build agents",
        figures.failures_received(live=True),
    )
    verdicts = CounterMetricFamily(
        "theow_verdicts", "Verdicts by status and rule", labels=["status", "rule"]
    )
    for verdict in figures.verdicts(live=True):
        verdicts.add_metric([verdict.status, verdict.rule or ""], verdict.count)
    attempts = CounterMetricFamily(
        "theow_attempts", "Rule attempts by rule and outcome", labels=["rule", "outcome"]
    )
    for attempt in figures.attempts(live=True):
        attempts.add_metric([attempt.rule, attempt.outcome], attempt.count)
    dead_letters = CounterMetricFamily(
        "theow_dead_letters",
        "Failures given up without reading them (delivered too often)",
        figures.dead_letters(),
    )
    return [failures, verdicts, attempts, dead_letters]


class RulesCollector(Collector):
    """What workers keep in Redis: whether the rules directory is invalid (``last_good``),
    and how many task messages they refused: at the broker edge (``theow_workers.edge``,
    by reason) and for their sender (``theow_workers.identity``, reason ``unverified``)."""

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        import redis

        from theow_workers.edge.dead_letters import counts
        from theow_workers.identity import refusals
        from theow_workers.last_good import current_error

        client = redis.Redis.from_url(self.redis_url, socket_connect_timeout=2, socket_timeout=2)
        try:
            invalid = 1.0 if current_error(client) else 0.0
            refused = client.hgetall(names.KEY_REFUSED)  # theow_workers.identity
            edge = counts(client)
        except redis.RedisError as exc:
            log.warning("metrics: cannot read the rules state from Redis: %s", exc)
            return
        finally:
            client.close()
        yield GaugeMetricFamily(
            "theow_rules_invalid", "1 while workers find the rules directory invalid", invalid
        )
        counter = CounterMetricFamily(
            "theow_refused_messages",
            "Task messages refused, by task and reason (unverified: the sender's signature; "
            "rate_limited: an agent past its rate)",
            labels=["task", "reason"],
        )
        for (task, reason), count in sorted(refusals(refused).items()):
            counter.add_metric([task, reason], float(count))
        for (label, reason), n in sorted(edge.refused.items()):
            counter.add_metric([label, reason], float(n))
        yield counter
        yield GaugeMetricFamily(
            "theow_broker_dead_letters",
            f"Refused messages kept in {names.KEY_DEAD_LETTERS} (at most {names.DEAD_LETTER_CAP})",
            float(edge.kept),
        )


def _explorations(figures: Figures, tables: set[str]) -> list[Metric]:
    if not {"explorations", "proposals"} <= tables:
        return []
    outcomes = CounterMetricFamily(
        "theow_explorations", "Explorations by outcome", labels=["outcome"]
    )
    explorations = figures.explorations()
    for exploration in explorations:
        outcomes.add_metric([exploration.outcome], exploration.count)
    tokens = CounterMetricFamily(
        "theow_llm_tokens", "LLM tokens used by explorations", labels=["direction"]
    )
    tokens.add_metric(["input"], sum(e.tokens_in for e in explorations))
    tokens.add_metric(["output"], sum(e.tokens_out for e in explorations))
    dollars = CounterMetricFamily(
        "theow_llm_cost_dollars",
        "Estimated LLM cost of explorations (THEOW_LLM_PRICES)",
        sum(e.cost for e in explorations),
    )
    proposals = GaugeMetricFamily("theow_proposals", "Proposals by status", labels=["status"])
    for status, n in figures.proposals().items():
        proposals.add_metric([status], n)
    return [outcomes, tokens, dollars, proposals]


def _replays(figures: Figures, tables: set[str]) -> list[Metric]:
    if "replay_jobs" not in tables:
        return []
    by_status = figures.replay_jobs()
    jobs = GaugeMetricFamily("theow_replay_jobs", "Replay jobs by status", labels=["status"])
    for status, n in by_status.items():
        jobs.add_metric([status], n)
    items = GaugeMetricFamily(
        "theow_replay_job_items",
        "Items of a replay job (active jobs and the latest one) by kind",
        labels=["job", "kind"],
    )
    progress = GaugeMetricFamily(
        "theow_replay_job_progress_ratio", "Processed / total items of a replay job", labels=["job"]
    )
    for job in figures.replay_job_items(REPLAY_ACTIVE, REPLAY_COUNTERS, REPLAY_SERIES_LIMIT):
        for kind, n in job.counters.items():
            items.add_metric([job.id, kind], n)
        if job.total is not None:
            items.add_metric([job.id, "total"], job.total)
            ratio = job.counters["processed"] / job.total if job.total else 1.0
            progress.add_metric([job.id], ratio)
    return [jobs, items, progress]


def registry_for(settings: Settings) -> CollectorRegistry:
    from theow_workers.store import make_engine

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(make_engine(settings.store_url)))
    registry.register(RulesCollector(settings.redis_url))
    return registry
