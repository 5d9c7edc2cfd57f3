"""The incidents' read of the ledger (``views.incidents.RunReads``) in SQL: recent runs, origins.

One range read on the indexed ``runs.finished_at``, the newest ``limit`` rows;
each failed run's origin as last revised (``origin``, else ``origin_then``);
each repository's default branch as the ledger knows it (configured, else
learned from its forge, else ``main``). The in-memory twin is
``views.memory.MemoryRunReads``.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import select
from sqlalchemy.engine import Engine

from theow_workers.core.history.model import Decision, Origin, Outcome
from theow_workers.store.run_rows import run_of
from theow_workers.store.runs import SqlRuns
from theow_workers.store.schema import RunRow
from theow_workers.views.incidents import RecentRuns

ORIGINS = frozenset(o.value for o in Origin)


class SqlRunReads:
    def __init__(self, engine: Engine, configured: Mapping[str, str] | None = None) -> None:
        self.ledger = SqlRuns(engine)
        self.configured = dict(configured or {})  # THEOW_DEFAULT_BRANCHES, by casefolded repo

    def recent(self, since: float, limit: int) -> RecentRuns:
        query = (
            select(RunRow)
            .where(RunRow.finished_at >= since)
            .order_by(RunRow.finished_at.desc(), RunRow.id.desc())
            .limit(max(0, limit) + 1)
        )
        with self.ledger.session() as s:
            rows = list(s.scalars(query))
        truncated = len(rows) > limit
        rows = rows[: max(0, limit)][::-1]
        runs = [run_of(row) for row in rows]
        decisions = {row.id: found for row in rows if (found := _decision(row)) is not None}
        repos = {run.repo for run in runs}
        branches = {repo: self.ledger.default_branch(repo, self.configured) for repo in repos}
        return RecentRuns(runs, decisions, branches, truncated)


def _decision(row: RunRow) -> Decision | None:
    origin = row.origin or row.origin_then
    if row.outcome != Outcome.FAILED.value or origin not in ORIGINS:
        return None
    reason = row.origin_reason or ""
    return Decision(Origin(origin), reason, culprit=row.culprit, fixed_by=row.fixed_by)
