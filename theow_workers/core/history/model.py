"""The ledger's vocabulary: a job run, the origin of a failed one, and what the decision saw.

A :class:`Run` is one job run, passed or failed, with where it ran. A failed
run carries its ``cause``: the key that says two failures are the same (the
matched rule and the tool's message with volatile parts masked, error codes
kept); a passed run carries none. A :class:`Decision` is what the
classification says of one failed run: its origin, the culprit commit when
the default branch broke, the commit that fixed it, and one line saying why.

>>> run = Run(id="r1", repo="o/r", job="test", branch="main", sha="abc", outcome=Outcome.FAILED,
...           finished_at=1.0, cause="pytest|E assert <n> == <n>")
>>> run.failed, run.on_branch("main")
(True, True)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Outcome(StrEnum):
    PASSED = "passed"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


class Origin(StrEnum):
    CHANGE = "change"  # probably caused by this change
    MAIN = "main"  # the same cause fails on the default branch at or before this change's base
    FLAKY = "flaky"  # passed on the same sha, or fails intermittently across unrelated commits
    INFRA = "infra"  # an infrastructure cause, or one cause failing many repositories at once
    UNKNOWN = "unknown"  # too little history to say

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Run:
    """One job run. ``pr`` and ``base_sha`` are set for pull-request runs only."""

    id: str
    repo: str
    job: str
    branch: str
    sha: str
    outcome: Outcome
    finished_at: float  # seconds since the epoch
    cause: str | None = None  # failed runs: what identifies the cause (see the module's note)
    category: str | None = None  # the matched rule's category, when a rule matched
    pr: str | None = None
    base_sha: str | None = None
    attempt: int = 1
    started_at: float | None = None

    @property
    def failed(self) -> bool:
        return self.outcome is Outcome.FAILED

    def on_branch(self, default_branch: str) -> bool:
        """Whether the run is on the default branch itself (not a pull request)."""
        return self.pr is None and self.branch == default_branch


@dataclass(frozen=True)
class Decision:
    """The origin of one failed run, with the commits that matter and the reason in one line."""

    origin: Origin
    reason: str
    culprit: str | None = None  # origin main: the first default-branch commit failing this way
    fixed_by: str | None = None  # origin main: the first default-branch commit passing again
    flip_rate: float | None = None  # origin flaky: share of the cause's recent runs that flipped

    def to_dict(self) -> dict[str, object]:
        return {
            "origin": self.origin.value,
            "culprit": self.culprit,
            "fixed_by": self.fixed_by,
            "flip_rate": self.flip_rate,
            "reason": self.reason,
        }
