"""One chunk of a replay, on a worker: each item through the live resolve path.

Every item goes through ``ResolveService.resolve`` — the same recording,
planning and deciding a live failure gets — as a failure with source
``replay:<job id>`` and a failure id fixed by job id and item key. The
service writes into a ``ChunkStore``; the chunk's failures, verdicts,
attempts, item rows and counter updates are then committed in one
transaction. So:

* a worker killed mid-chunk leaves nothing of the chunk; its redelivery
  starts clean and nothing is counted twice;
* a chunk sent twice (a resume while it was still queued) inserts each row
  once; only item rows that insert move the counters;
* a chunk delivered again (its worker died) runs *carefully*: one item per
  transaction, each with its own delivery count, so an item that kills the
  worker every time is recorded as ``error`` after ``max_deliveries`` and the
  items around it are kept — exactly the live poison-message rule.

A dry run (the default) matches and records but runs no action, and leaves
the rules' track record alone.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from theow_client.jsontypes import JsonObject
from theow_client.lines import FIELD as KEPT_LINES
from theow_client.messages import SubmitRequest
from theow_client.verdict import Status, Verdict
from theow_workers.config import Settings
from theow_workers.core.ports import Deliveries
from theow_workers.core.resolve.service import ResolveService
from theow_workers.delivery import Delivered, DeliveryPolicy
from theow_workers.ledger import replayed
from theow_workers.replay.grouping import error_summary
from theow_workers.replay.jobs import replay_failure_id
from theow_workers.store import StoreError
from theow_workers.store.replay import CANCELLED, INVALID, ItemRecord, Job, ReplayStore
from theow_workers.store.replay_chunk import ChunkStore
from theow_workers.store.results import SqlStore
from theow_workers.store.runs import SqlRuns

log = logging.getLogger("theow.replay")

# Errors of the database or the network: the chunk fails whole and is sent again.
TRANSIENT: tuple[type[BaseException], ...] = (StoreError, ConnectionError, TimeoutError)
DEFAULT_POLICY = DeliveryPolicy.replay(max_deliveries=3, time_limit=300)
# A service resolving into a ChunkStore, for a dry run (True) or not.
ServiceFor = Callable[[bool], tuple[ResolveService, ChunkStore]]
# A replayed failure's verdict, its stored facts and the service that decided it -> its run
# written to the ledger.
Ledger = Callable[[Verdict, JsonObject, ResolveService], object]


class ReplayRunner:
    def __init__(
        self,
        store: ReplayStore,
        service_for: ServiceFor,
        deliveries: Callable[[str], int] | None = None,
        policy: DeliveryPolicy = DEFAULT_POLICY,
        rules_version: Callable[[], str] = lambda: "",
        time_budget: float = 100.0,
        ledger: Ledger | None = None,
    ) -> None:
        self.store = store
        self.ledger = ledger  # writes a history's failed run, once its verdict is made
        # Past this many seconds a chunk stops taking items (the rest is sent again):
        # slow actions under --execute must not run a chunk into its hard time limit.
        self.time_budget = time_budget
        self.service_for = service_for
        self.deliveries = deliveries or (lambda _: 1)
        self.policy = policy
        self.rules_version = rules_version

    def run(self, chunk: JsonObject, delivery: int = 1) -> JsonObject:
        """Replay a chunk; ``delivery`` > 1 means an earlier delivery's worker died."""
        job = self.store.get(str(chunk["job_id"]))
        items: list[JsonObject] = list(chunk.get("items") or [])
        result = {"job_id": job.id, "recorded": 0, "skipped": len(items), "cancelled": False}
        result["timed_out"] = False
        if job.status == CANCELLED:
            return {**result, "cancelled": True}
        done = self.store.decided(job.id, [str(i["key"]) for i in items])
        todo = [i for i in items if str(i["key"]) not in done]
        stored = self.store.failure_facts([str(i["ref"]) for i in todo if "ref" in i])
        service, writes = self.service_for(job.dry_run)
        writes.begin([replay_failure_id(job.id, str(i["key"])) for i in todo])
        careful = delivery > 1
        records: list[ItemRecord] = []
        recorded = 0
        started = time.monotonic()
        try:
            for n, item in enumerate(todo):
                if n and time.monotonic() - started > self.time_budget:  # at least one per chunk
                    result["timed_out"] = True
                    break
                record, timed_out = self._replay_one(job, item, stored, service, writes, careful)
                records.append(record)
                if careful:
                    recorded += self.store.record(job.id, records, writes.flush)
                    records = []
                if timed_out:
                    result["timed_out"] = True
                    break
        finally:
            recorded += self.store.record(job.id, records, writes.flush)
        return {**result, "recorded": recorded, "skipped": len(items) - recorded}

    def _replay_one(
        self,
        job: Job,
        item: JsonObject,
        stored: dict[str, JsonObject],
        service: ResolveService,
        writes: ChunkStore,
        careful: bool,
    ) -> tuple[ItemRecord, bool]:
        key, line = str(item["key"]), item.get("line")
        facts = item.get("facts")
        if "ref" in item:
            facts = stored.get(str(item["ref"]))
            if facts is None:
                problem = f"stored failure {item['ref']} no longer exists"
                return ItemRecord(key, INVALID, line=line, sample=problem), False
        failure_id = replay_failure_id(job.id, key)
        raw = item.get("facts_json")
        request = SubmitRequest(
            failure_id=failure_id,
            facts_json=raw if isinstance(raw, str) else None,
            facts=facts if "facts_json" not in item else (None if isinstance(raw, str) else raw),
            source=f"replay:{job.id}",
            explore=False,  # exploration of a replay goes per group, under its budget
            notes={**(item.get("notes") or {}), "replay": {"job": job.id, "key": key}},
            kept_lines=item.get(KEPT_LINES),
        )
        delivery = self.deliveries(failure_id) if careful else 1
        try:
            delivered = self.policy.resolve(service, request, failure_id, delivery)
        except TRANSIENT:
            raise  # the whole chunk is redelivered
        except Exception as exc:  # this line's own outcome; the chunk's others go on
            log.exception("replay %s line %s: cannot be decided", job.id, key)
            reason = f"cannot be decided: {type(exc).__name__}: {str(exc)[:300]}"
            delivered = Delivered(service.give_up(request, failure_id, reason))
        record = self._record_for(key, line, delivered.verdict, writes, service)
        if item.get("run") is True and self.ledger is not None:
            self._ledger(delivered.verdict, writes, service)
        return record, delivered.timed_out

    def _ledger(self, verdict: Verdict, writes: ChunkStore, service: ResolveService) -> None:
        """A history's failed run into the ledger, with its failure (``ledger.replayed``)."""
        if verdict.status is Status.REJECTED or self.ledger is None:
            return
        failure = writes.failures.get(verdict.failure_id)
        facts = failure.facts if failure is not None else self.store.failure(verdict.failure_id)[1]
        try:
            self.ledger(verdict, facts, service)
        except Exception as exc:  # the verdict is what the replay is for; the run is logged
            log.warning("replayed failure %s: run not recorded: %s", verdict.failure_id, exc)

    def _record_for(
        self,
        key: str,
        line: int | None,
        verdict: Verdict,
        writes: ChunkStore,
        service: ResolveService | None = None,
    ) -> ItemRecord:
        fields: JsonObject = {
            "line": line,
            "failure_id": verdict.failure_id,
            "rule": verdict.rule,
            "rules_version": self.rules_version(),
        }
        if verdict.status in (Status.UNMATCHED, Status.UNEXPLAINED):
            # As recorded by the service: facts redacted, fingerprint computed.
            failure = writes.failures.get(verdict.failure_id)
            if failure is not None:
                fp, facts = failure.fingerprint, failure.facts
            else:
                fp, facts = self.store.failure(verdict.failure_id)
            fields["fingerprint"] = fp
            normal = service.normal_of(facts) if service is not None else None
            is_normal = normal.is_normal if normal else None
            is_wrapper = service.rulebook().is_wrapper if service is not None else None
            fields["sample"], fields["basis"] = error_summary(facts, is_normal, is_wrapper)
        elif verdict.status in (Status.FAILED, Status.ERROR, Status.REJECTED):
            fields["sample"] = verdict.reason[:500]
        elif verdict.evidence:
            fields["sample"] = (
                f"{verdict.evidence['fact']}:{verdict.evidence['line']}: "
                + str(verdict.evidence["text"])[:450]
            )
        return ItemRecord(key, str(verdict.status), **fields)


def replay_runner(
    sql: SqlStore,
    live: ResolveService,
    deliveries: Deliveries,
    settings: Settings,
    rules_version: Callable[[], str],
) -> ReplayRunner:
    """A runner on a worker's clients: the live service's rules, actions and settings,
    each chunk's writes going into a ``ChunkStore`` (one per dry-run flag)."""
    services: dict[bool, tuple[ResolveService, ChunkStore]] = {}

    def service_for(dry_run: bool) -> tuple[ResolveService, ChunkStore]:
        if dry_run not in services:
            writes = ChunkStore(sql, count_rules=not dry_run)
            service = ResolveService(
                writes,
                rulebook=live.rulebook,
                actions=live.actions,
                similarity=live.similarity,
                settings=dataclasses.replace(live.settings, dry_run=dry_run),
                normals=live.normals,  # a replayed failure meets its job's normal too
                prepared=live.prepared,
            )
            services[dry_run] = (service, writes)
        return services[dry_run]

    runs = SqlRuns(sql.engine)

    def ledger(verdict: Verdict, facts: JsonObject, service: ResolveService) -> bool:
        found = service.rulebook().get(verdict.rule) if verdict.rule else None
        tags = found.tags if found is not None else ()
        return replayed.record_failed(runs, verdict.failure_id, facts, verdict.rule, tags)

    return ReplayRunner(
        ReplayStore(sql.engine),
        service_for,
        deliveries=deliveries.count,
        policy=DeliveryPolicy.replay(settings.max_deliveries, settings.resolve_time_limit),
        rules_version=rules_version,
        time_budget=settings.resolve_time_limit / 3,
        ledger=ledger,
    )
