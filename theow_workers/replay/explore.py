"""A replay's unmatched groups go to the explorer: one LLM session per group, at most the budget.

At the end of ``theow replay --explore --budget N`` (or with
``theow replay explore JOB --budget N`` on a finished job), the job's
unmatched failures are grouped (``grouping``), and the groups are taken
largest first:

* a group whose root cause was explored before (an exploration of one of its
  fingerprints ended with a proposal, a give-up or a reuse) is **reused**:
  nothing is sent, nothing is paid twice;
* otherwise, while fewer than N groups were sent, its most representative
  failure (the first of the largest text variant the group was built from) is
  sent to the explore queue with ``session_id = replay:<job>`` and
  ``session_limit = N``, so the explorer's atomic session budget in Redis holds
  the job to N LLM sessions across every explorer worker;
* the rest are reported **not explored** (over the budget).

One row per sent or reused group (``replay_explorations``), written *before*
its task is sent: a driver killed mid-exploration and resumed sends exactly
the groups without a row, re-sends a group whose row says ``sending`` (the
explorer's per-fingerprint flight and finished record make a second delivery
a reuse, not a second session), and waits for the rest. Per group, the job
shows the exploration's outcome, its proposal and the proposal's status,
tokens and cost, read from the explorer's own rows.

Replayed failures themselves are submitted with ``explore=False``: exploring
per failure would spend one session per repeat of the same root cause.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from theow_client.jsontypes import JsonObject
from theow_client.messages import ExploreRequest
from theow_workers.replay.grouping import Group, group_unmatched
from theow_workers.replay.jobs import with_basis
from theow_workers.store.replay import UNKNOWN, Job, ReplayStore
from theow_workers.store.replay_explore import (
    REUSED,
    SENDING,
    SENT,
    ExplorationOutcome,
    GroupRecord,
    ReplayExplorations,
)

if TYPE_CHECKING:
    from celery.result import AsyncResult

# Outcomes that settle a root cause: a later group with its fingerprint reuses them.
SETTLED = ("proposal", "gave_up", "done", "deduplicated", "cache_hit")


@dataclass(frozen=True)
class GroupExploration:
    """What became of one unmatched group: the job view and the report show these."""

    rank: int
    size: int
    sample: str
    failure_id: str
    state: str  # explored | exploring | reused | not explored
    outcome: str = ""
    reason: str = ""
    proposal_id: str | None = None
    proposal_status: str | None = None
    rule_name: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    llm_sessions: int = 0

    def to_dict(self) -> JsonObject:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def session_id(job: Job) -> str:
    """The explorer's session id for a replay: its budget is counted per job."""
    return f"replay:{job.id}"


def representative(group: Group) -> str:
    """The failure to investigate: the first of the text variant the group was built on."""
    return group.failure_ids[0]


def celery_explore_sender() -> Callable[[JsonObject], AsyncResult]:
    from theow_client import names
    from theow_workers.celery_app import app, settings
    from theow_workers.tokens import signed_internal

    def send(request: JsonObject) -> AsyncResult:
        return app.send_task(
            names.TASK_EXPLORE,
            args=[signed_internal(settings, names.TASK_EXPLORE, request)],
            task_id=names.explore_task_id(str(request["failure_id"])),
            queue=names.QUEUE_EXPLORE,
        )

    return send


class ReplayExplorer:
    """Sends a finished replay's unmatched groups to the explorer and follows them."""

    def __init__(self, store: ReplayStore, send: Callable[[JsonObject], object]) -> None:
        self.store, self.send = store, send
        self.explorations = ReplayExplorations(store)

    def groups(self, job: Job) -> list[Group]:
        items = with_basis(self.store, self.store.items(job.id, UNKNOWN))
        return group_unmatched(
            (i.failure_id or "", i.key, i.fingerprint or "", i.sample, i.basis) for i in items
        )

    def start(self, job: Job, budget: int) -> list[GroupExploration]:
        """Send what the budget allows and has not been sent; returns every group's state."""
        groups = self.groups(job)
        rows = self.explorations.groups(job.id)
        sent = sum(1 for r in rows.values() if r.status in (SENDING, SENT))
        for rank, group in enumerate(groups, 1):
            failure_id = representative(group)
            row = rows.get(failure_id)
            if row is not None:
                if row.status == SENDING:  # the driver died between the row and the send
                    self._send(job, failure_id, budget)
                continue
            earlier = self.explorations.settled(group.fingerprints, SETTLED, session_id(job))
            if earlier is not None:
                self._insert(job, rank, group, REUSED, reused_from=earlier)
            elif sent < budget:
                self._insert(job, rank, group, SENDING)
                self._send(job, failure_id, budget)
                sent += 1
        self.store.update(job.id, explore_budget=budget, explore_status=self.describe(job))
        return self.status(job, groups)

    def wait(
        self,
        job: Job,
        timeout: float,
        poll: float = 0.5,
        tick: Callable[[int, int], None] = lambda d, t: None,
    ) -> bool:
        """Wait until every sent group's exploration is recorded; False on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            states = [g for g in self.status(job) if g.state in ("explored", "exploring")]
            done = sum(1 for g in states if g.state == "explored")
            tick(done, len(states))
            if done == len(states):
                self.store.update(job.id, explore_status=self.describe(job))
                return True
            if time.monotonic() > deadline:
                self.store.update(job.id, explore_status=self.describe(job))
                return False
            time.sleep(poll)

    def status(self, job: Job, groups: Sequence[Group] | None = None) -> list[GroupExploration]:
        """Every unmatched group, largest first, with what its exploration did."""
        groups = self.groups(job) if groups is None else groups
        rows = self.explorations.groups(job.id)
        session = session_id(job)
        ids = [r.failure_id for r in rows.values()] + [
            r.reused_from for r in rows.values() if r.reused_from
        ]
        explorations = self.explorations.outcomes(ids)
        by_failure: dict[str, list[ExplorationOutcome]] = {}
        for e in explorations:
            by_failure.setdefault(e.failure_id, []).append(e)
        out = []
        for rank, group in enumerate(groups, 1):
            failure_id = representative(group)
            row = rows.get(failure_id)
            base: JsonObject = {
                "rank": rank,
                "size": group.size,
                "sample": group.sample,
                "failure_id": failure_id,
            }
            if row is None:
                out.append(GroupExploration(**base, state="not explored", reason="over the budget"))
                continue
            if row.status == REUSED:
                mine = [
                    e for e in by_failure.get(row.reused_from or "", []) if e.outcome in SETTLED
                ]
            else:
                mine = [e for e in by_failure.get(failure_id, []) if e.session_id == session]
            if not mine:
                out.append(GroupExploration(**base, state="exploring"))
                continue
            last = max(mine, key=lambda e: e.finished_at)
            paid = [] if row.status == REUSED else mine
            out.append(
                GroupExploration(
                    **base,
                    state="reused" if row.status == REUSED else "explored",
                    outcome=last.outcome,
                    reason=last.reason[:300],
                    proposal_id=last.proposal_id,
                    proposal_status=last.proposal_status,
                    rule_name=last.rule_name,
                    tokens_in=sum(e.tokens_in for e in paid),
                    tokens_out=sum(e.tokens_out for e in paid),
                    cost=round(sum(e.cost for e in paid), 6),
                    llm_sessions=sum(1 for e in paid if e.models),
                )
            )
        return out

    def describe(self, job: Job) -> str:
        states = self.status(job)
        count = {
            s: sum(1 for g in states if g.state == s) for s in ("explored", "exploring", "reused")
        }
        proposals = sum(1 for g in states if g.proposal_id and g.state == "explored")
        cost = sum(g.cost for g in states)
        left = len(states) - sum(count.values())
        return (
            f"{count['explored']} group(s) explored ({proposals} proposal(s), ${cost:.4f}), "
            f"{count['exploring']} exploring, {count['reused']} reused an earlier exploration, "
            f"{left} not explored (budget {job.explore_budget})"
        )

    def _insert(
        self, job: Job, rank: int, group: Group, status: str, reused_from: str | None = None
    ) -> None:
        self.explorations.add_group(
            GroupRecord(
                job_id=job.id,
                failure_id=representative(group),
                rank=rank,
                size=group.size,
                sample=group.sample,
                fingerprints=sorted(group.fingerprints),
                status=status,
                reused_from=reused_from,
            )
        )

    def _send(self, job: Job, failure_id: str, budget: int) -> None:
        self.send(ExploreRequest(failure_id, None, session_id(job), budget).to_wire())
        self.explorations.mark_sent(job.id, failure_id)
