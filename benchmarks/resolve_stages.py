"""One verdict's time, stage by stage: what ``benchmarks/resolve.py --profile`` shows.

Each failure is sent through the worker's own task (``theow.resolve``, applied
in-process with a signed payload, as a build agent's client signs it), with
every stage's functions timed. A stage's time is exclusive: a function timed
inside another (SQL inside the parse of a submission) counts in its own stage
only, so the stages add up to the failure's time and ``other`` is the rest.

The stages, in the order a failure meets them:

==================  ==================================================================
receive and verify  the message read, its signature and token checked, its id derived
rules check         whether the rules changed (a directory walk every few seconds)
bound and mask      the facts parsed, bounded and masked
summary and where   the fingerprint (the log's summary) and the lines to look at
scan                the log as rules see it and the one Hyperscan pass
validate            candidate rules checked in full (regex, binding, evidence)
rank                ordering the validated rules (similarity when rules tie)
persist             every store call (the failure, its outcome, lookups)
deliver             the failure's claim and the verdict written to the agent's key
explain marking     whether the verdict is explained, and the explain task sent
==================  ==================================================================
"""

from __future__ import annotations

import os
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock

STAGES = (
    "receive and verify", "rules check", "bound and mask", "summary and where", "scan",
    "validate", "rank", "persist", "deliver", "explain marking",
)  # fmt: skip


class Stopwatch:
    """Exclusive time per stage: a timed call inside another counts only in its own stage."""

    def __init__(self) -> None:
        self.spent: defaultdict[str, float] = defaultdict(float)
        self._stack: list[list[float]] = []  # [start, time spent in timed calls within]

    def wrap(self, func: Callable[..., Any], stage: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            frame = [time.perf_counter(), 0.0]
            self._stack.append(frame)
            try:
                return func(*args, **kwargs)
            finally:
                self._stack.pop()
                elapsed = time.perf_counter() - frame[0]
                self.spent[stage] += elapsed - frame[1]
                if self._stack:
                    self._stack[-1][1] += elapsed

        return timed


class _TimedObject:
    """Every method of ``target`` timed under one stage (the store, the deliveries)."""

    def __init__(self, target: Any, stage: str, watch: Stopwatch) -> None:
        self._target, self._stage, self._watch = target, stage, watch

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._target, attr)
        return self._watch.wrap(value, self._stage) if callable(value) else value


@contextmanager
def _timed(watch: Stopwatch, rt: Any) -> Iterator[None]:
    from theow_client.messages import SubmitRequest
    from theow_workers import explainer, identity, runtime, tasks
    from theow_workers.core.resolve import plan as plan_mod
    from theow_workers.core.resolve import service as service_mod
    from theow_workers.core.rules.scanner import Scanner

    where: list[tuple[Any, str, str]] = [
        (SubmitRequest, "from_wire", "receive and verify"),
        (identity.Verifier, "verify", "receive and verify"),
        (tasks, "_as_sent_by", "receive and verify"),
        (runtime.Runtime, "knowledge", "rules check"),
        (service_mod, "_prepare", "bound and mask"),
        (service_mod, "bound_facts", "bound and mask"),
        (service_mod, "parse_kept_lines", "bound and mask"),
        (service_mod, "fingerprint", "summary and where"),
        (service_mod.ResolveService, "_pointed", "summary and where"),
        (service_mod, "evidence_in_sent_log", "summary and where"),
        (plan_mod, "matching_facts", "scan"),
        (Scanner, "scan", "scan"),
        (Scanner, "candidates", "scan"),
        (plan_mod, "evaluate", "validate"),
        (plan_mod, "_mark", "validate"),
        (service_mod, "plan", "rank"),
        (tasks, "_deliver", "deliver"),
        (tasks, "_resolve_delivered", "deliver"),
        (tasks, "after_verdict", "explain marking"),
        (explainer, "after_verdict", "explain marking"),
    ]
    store = rt.store
    deliveries = type(rt).deliveries
    with ExitStack() as stack:
        for owner, name, stage in where:
            if hasattr(owner, name):
                original = owner.__dict__.get(name, getattr(owner, name))
                if isinstance(original, classmethod):
                    bound = watch.wrap(original.__func__, stage)
                    stack.enter_context(mock.patch.object(owner, name, classmethod(bound)))
                else:
                    stack.enter_context(
                        mock.patch.object(owner, name, watch.wrap(getattr(owner, name), stage))
                    )
        # The store and the deliveries, as every caller reaches them.
        stack.enter_context(mock.patch.object(rt, "_store", _TimedObject(store, "persist", watch)))
        service = rt.service
        stack.enter_context(
            mock.patch.object(service, "store", _TimedObject(service.store, "persist", watch))
        )
        stack.enter_context(
            mock.patch.object(
                type(rt),
                "deliveries",
                property(lambda self: _TimedObject(deliveries.fget(self), "deliver", watch)),
            )
        )
        yield


def stage_profile(rt: Any, failures: list[dict], token: str) -> dict:
    """Each failure through the resolve task in-process; the median and the p99 failure's stages.

    ``rt`` is the process's Runtime (its rules already served), ``token`` an agent token.
    """
    os.environ.setdefault("THEOW_REDIS_URL", rt.settings.redis_url)  # before the app loads
    from theow_client import names, signing
    from theow_client.client import build_payload
    from theow_workers import tasks
    from theow_workers.worker import ServicesTask

    agent = signing.AgentToken.parse(token)
    payloads = []
    for facts in failures:
        payload = build_payload(facts, failure_id=str(uuid.uuid4()))
        payloads.append(signing.sign(names.TASK_RESOLVE, payload, agent.name, agent.signing_key))
    ServicesTask._built = rt
    rows: list[dict[str, float]] = []
    try:
        watch = Stopwatch()
        with _timed(watch, rt):
            for payload in payloads:
                watch.spent.clear()
                started = time.perf_counter()
                tasks.resolve.apply(args=(payload,), task_id=str(uuid.uuid4())).get()
                total = time.perf_counter() - started
                row = {stage: 1000 * watch.spent.get(stage, 0.0) for stage in STAGES}
                row["other"] = 1000 * total - sum(row.values())
                row["total"] = 1000 * total
                rows.append(row)
    finally:
        ServicesTask._built = None
    ordered = sorted(rows, key=lambda r: r["total"])

    def at(q: float) -> dict[str, float]:
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]

    mean = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
    return {
        "failures": len(rows),
        "stages_ms": {"median failure": at(50), "p99 failure": at(99), "mean": mean},
    }


def show(profile: dict, out: Any) -> None:
    from rich.table import Table

    columns = profile["stages_ms"]
    table = Table(
        "stage (ms)",
        *columns,
        title=f"one verdict, stage by stage ({profile['failures']} failures, in-process)",
    )
    for stage in [*STAGES, "other", "total"]:
        table.add_row(stage, *(f"{columns[c][stage]:.2f}" for c in columns))
    out.print(table)
