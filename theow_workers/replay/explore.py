"""Where a replay's unmatched failures will go to the explorer — not wired yet.

``theow replay --explore --budget N`` records the request and the budget on
the job; ``send_unmatched_groups_to_explorer`` is the single place that will
enqueue exploration once the explorer worker exists (DESIGN §4): one
``theow.explore`` task per unmatched group (largest first, its sample failure
as the one to investigate), under the session id ``replay:<job id>`` so the
explorer's atomic session budget caps the job at ``budget`` LLM sessions.
Replayed failures themselves are submitted with ``explore=False``: exploring
per failure would spend one session per repeat of the same root cause. When
wired, a group's sample failure can be sent as a submission with
``explore=True`` and ``session_id=session_id(job)`` (``Submission`` reads it).

Today it enqueues nothing and says so, in the job row, the CLI and the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from theow_workers.replay.grouping import Group, group_unmatched
from theow_workers.replay.jobs import Job, ReplayStore

NOT_WIRED = "recorded, nothing enqueued: the explorer is not built yet"


@dataclass(frozen=True)
class ExploreRequest:
    budget: int
    groups: int
    sent: int
    status: str

    def describe(self) -> str:
        return (
            f"exploration of {min(self.groups, self.budget)} of {self.groups} unmatched group(s) "
            f"(budget {self.budget} LLM sessions): {self.status}"
        )


def session_id(job: Job) -> str:
    """The explorer's session id for a replay: its budget is counted per job."""
    return f"replay:{job.id}"


def send_unmatched_groups_to_explorer(
    job: Job, groups: Sequence[Group], budget: int
) -> ExploreRequest:
    """Hook: send the largest unmatched groups to the explorer, at most ``budget`` sessions.

    Not wired yet: returns the request as recorded, with nothing sent.
    """
    return ExploreRequest(budget=budget, groups=len(groups), sent=0, status=NOT_WIRED)


def explore_unmatched(store: ReplayStore, job: Job) -> ExploreRequest:
    """At the end of a replay run with ``--explore``: group, call the hook, record what it did."""
    items = store.items(job.id, "unmatched")
    groups = group_unmatched(
        (i.failure_id or "", i.key, i.fingerprint or "", i.sample, i.basis) for i in items
    )
    request = send_unmatched_groups_to_explorer(job, groups, job.explore_budget or 0)
    store.update(job.id, explore_status=request.describe())
    return request
