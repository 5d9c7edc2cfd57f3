"""What one delivery of a failure may do: the rule the resolve task and a replay share.

Messages are acked late, so a worker that dies mid-resolve gets its failure
delivered again. The policy:

* a failure delivered more than ``max_deliveries`` times gets an ``error``
  verdict instead of another try: it is what killed the worker each time
  (a poison message);
* a resolve that runs past the soft time limit stops, and the failure gets an
  ``error`` verdict with the attempts that already ran;
* anything else the resolve raises is the caller's (a live failure waits for
  the store or for valid rules; a replay chunk is sent again).

>>> policy = DeliveryPolicy.live(max_deliveries=3, time_limit=300)
>>> policy.soft_time_limit
285
"""

from __future__ import annotations

from dataclasses import dataclass

from celery.exceptions import SoftTimeLimitExceeded

from theow_client.messages import SubmitRequest
from theow_client.verdict import Verdict
from theow_workers.core.ports import AttemptRecord
from theow_workers.core.resolve.service import ResolveService

# What the soft time limit leaves of the hard one to record the outcome, seconds.
RECORD_SECONDS = 15


@dataclass(frozen=True)
class Delivered:
    verdict: Verdict
    timed_out: bool = False  # stopped at the soft time limit


@dataclass(frozen=True)
class DeliveryPolicy:
    max_deliveries: int
    time_limit: int  # THEOW_RESOLVE_TIME_LIMIT: the hard limit of one resolve, seconds
    # A poison message is recorded without reading its facts (they may be what kills
    # the worker); a replay's come from history and are read.
    read_poison: bool = False
    died: str = "worker crashed or was killed each time"
    timeout: str = ""  # the reason a resolve stopped at the soft limit gives; "" says the limits

    @classmethod
    def live(cls, max_deliveries: int, time_limit: int) -> DeliveryPolicy:
        """The resolve task's policy."""
        return cls(max_deliveries, time_limit)

    @classmethod
    def replay(cls, max_deliveries: int, time_limit: int) -> DeliveryPolicy:
        """A replay item's: its facts are read, its reasons name the chunk."""
        return cls(
            max_deliveries,
            time_limit,
            read_poison=True,
            died="a worker died each time",
            timeout="replay chunk exceeded its time limit on this failure",
        )

    @property
    def soft_time_limit(self) -> int:
        return max(1, self.time_limit - RECORD_SECONDS)

    def timeout_reason(self) -> str:
        return self.timeout or (
            f"resolution ran past its soft time limit ({self.soft_time_limit}s: "
            f"THEOW_RESOLVE_TIME_LIMIT={self.time_limit}s less {RECORD_SECONDS}s "
            "to record the outcome)"
        )

    def resolve(
        self,
        service: ResolveService,
        request: SubmitRequest,
        failure_id: str,
        delivery: int,
        agent: str | None = None,
    ) -> Delivered:
        """Resolve the ``delivery``-th delivery of a failure under this policy."""
        if delivery > self.max_deliveries:
            reason = f"delivered {delivery} times without a verdict ({self.died})"
            if self.read_poison:
                return Delivered(service.give_up(request, failure_id, reason, agent=agent))
            return Delivered(service.dead_letter(request, failure_id, reason, agent))
        ran: list[AttemptRecord] = []
        try:
            return Delivered(service.resolve(request, failure_id, delivery, agent, ran=ran))
        except SoftTimeLimitExceeded:
            verdict = service.give_up(request, failure_id, self.timeout_reason(), ran, agent)
            return Delivered(verdict, timed_out=True)
