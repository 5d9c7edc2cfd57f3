"""Replay jobs and their items: the store keeps them, this names a replayed item's failure.

The job and item rows, their counters and every query over them live in
``theow_workers.store.replay`` (see there for why no item is counted twice).
What is the replay's own: the failure id a replayed item is recorded under, and the
error text of an unmatched group recomputed when no item stored it.
"""

from __future__ import annotations

import dataclasses
import uuid

from theow_workers.replay.grouping import error_summary
from theow_workers.store.replay import ItemRecord, ReplayStore

REPLAY_NAMESPACE = uuid.UUID("3d0c5b0e-8f5c-4d56-9a43-4c0e1e5f7b21")


def replay_failure_id(job_id: str, key: str) -> str:
    """The failure id of one replayed item: the same on every delivery and every resume."""
    return str(uuid.uuid5(REPLAY_NAMESPACE, f"{job_id}:{key}"))


def with_basis(store: ReplayStore, items: list[ItemRecord]) -> list[ItemRecord]:
    """A root cause's error text is stored on one of its items; recompute it if none has it."""
    having = {i.fingerprint for i in items if i.basis}
    first: dict[str | None, ItemRecord] = {}
    for item in items:
        if item.fingerprint not in having:
            first.setdefault(item.fingerprint, item)
    if not first:
        return items
    facts = store.failure_facts([i.failure_id for i in first.values() if i.failure_id])
    redone = {}
    for item in first.values():
        sample, basis = error_summary(facts.get(item.failure_id or "", {}))
        redone[id(item)] = dataclasses.replace(item, sample=sample, basis=basis)
    return [redone.get(id(i), i) for i in items]
