"""The result store as a replay chunk sees it: reads from SQL, writes in one transaction.

``ResolveService`` records a failure, its attempts and its verdict one
transaction each; over 10,000 replayed failures that is most of the SQL time
and a write lock taken 30,000 times. ``ChunkStore`` implements the same
``Store`` port but keeps a chunk's writes in memory and ``flush`` writes them
in the transaction that also inserts the chunk's item rows and moves the
job's counters. So a chunk lands whole or not at all: a worker killed
mid-chunk leaves nothing half-recorded, and the redelivered chunk starts clean.

Idempotency is the schema's, as for live failures: failures and verdicts are
inserted ``ON CONFLICT DO NOTHING``; attempts and rule counts are written only
for the verdicts this flush actually inserted, so two deliveries of one chunk
racing each other record every attempt once.

With ``count_rules=False`` (dry run) attempts do not move a rule's track
record: a dry run proves that a rule matches, not that its actions work.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from theow_client.verdict import Verdict
from theow_workers.core.ports import AttemptRecord, FailureRecord, RuleStats, counted
from theow_workers.store.results import SqlStore, attempt_values, failure_values, verdict_values
from theow_workers.store.schema import AttemptRow, FailureRow, RuleStatsRow, VerdictRow


class ChunkStore:
    def __init__(self, sql: SqlStore, count_rules: bool = True) -> None:
        self.sql = sql
        self.count_rules = count_rules
        self._dialect = postgresql if sql.engine.dialect.name == "postgresql" else sqlite
        self.clear()

    def clear(self) -> None:
        self.failures: dict[str, FailureRecord] = {}
        self.attempts: list[AttemptRecord] = []
        self.verdicts: dict[str, Verdict] = {}
        self._known: dict[str, Verdict] = {}
        self._stats: dict[str, RuleStats] | None = None

    def begin(self, failure_ids: list[str]) -> None:
        """Start a chunk: verdicts already stored for its failures, in one query."""
        self.clear()
        if not failure_ids:
            return
        query = select(VerdictRow.failure_id).where(VerdictRow.failure_id.in_(failure_ids))
        with self.sql.session() as s:
            found = list(s.execute(query).scalars())
        for failure_id in found:
            stored = self.sql.verdict(failure_id)
            if stored is not None:
                self._known[failure_id] = stored

    # The Store port (theow_workers.core.ports.Store)

    def add_failure(self, failure: FailureRecord) -> bool:
        if failure.id in self.failures:
            return False
        self.failures[failure.id] = failure
        return True

    def verdict(self, failure_id: str) -> Verdict | None:
        return self.verdicts.get(failure_id) or self._known.get(failure_id)

    def add_attempt(self, attempt: AttemptRecord) -> None:
        self.attempts.append(attempt)

    def add_verdict(self, verdict: Verdict) -> Verdict:
        stored = self.verdict(verdict.failure_id)
        if stored is not None:
            return stored
        self.verdicts[verdict.failure_id] = verdict
        return verdict

    def count_attempt(self, rule: str, success: bool) -> None:
        """Counted at ``flush``, from the attempts actually written."""

    def rule_stats(self) -> dict[str, RuleStats]:
        if self._stats is None:
            self._stats = self.sql.rule_stats()
        return self._stats

    # Writing

    def flush(self, s: Session) -> None:
        """Write the pending failures, verdicts, attempts and rule counts in ``s``.

        Passed to ``ReplayStore.record``, which calls it in the transaction of the item rows.
        """
        insert = self._dialect.insert
        if self.failures:
            rows = [failure_values(f) for f in self.failures.values()]
            s.execute(insert(FailureRow).on_conflict_do_nothing(index_elements=["id"]), rows)
        new: set[str] = set()
        if self.verdicts:
            statement = (
                insert(VerdictRow)
                .on_conflict_do_nothing(index_elements=["failure_id"])
                .returning(VerdictRow.failure_id)
            )
            rows = [verdict_values(v) for v in self.verdicts.values()]
            new = {fid for (fid,) in s.execute(statement, rows)}
        attempts = [a for a in self.attempts if a.failure_id in new]
        if attempts:
            s.execute(insert(AttemptRow), [attempt_values(a) for a in attempts])
        if self.count_rules:
            for (rule, success), n in Counter(counted(attempts)).items():
                self._bump(s, rule, success, n)
        self.clear()

    def _bump(self, s: Session, rule: str, success: bool, n: int) -> None:
        column, stamp = (
            ("successes", "last_success_at") if success else ("failures", "last_failure_at")
        )
        s.execute(
            self._dialect.insert(RuleStatsRow)
            .values(rule=rule, successes=0, failures=0)
            .on_conflict_do_nothing(index_elements=["rule"])
        )
        counter = getattr(RuleStatsRow, column)
        values = {column: counter + n, stamp: datetime.now(UTC)}
        s.execute(update(RuleStatsRow).where(RuleStatsRow.rule == rule).values(values))
