"""The ledger of job runs in SQL: what the classification asks of history, and what it decided.

Every job run an agent, a forge's webhook or a replayed history reports is one
row (``runs``), keyed by its sender and its id: a redelivered or repeated
report records nothing twice, and no agent writes another's runs. A run is
reported passed or failed; a failure that arrives after a passed report of the
same run (another step of the job failed) turns it failed, never the other
way round, and a failed run reported without its failure (``theow.run``, a
webhook) gets its failure, cause and category when the failure's verdict comes.

The ``History`` port's two questions (``core.history.ports``) are two indexed
range reads: ``(repo, job, finished_at)`` and ``(cause, finished_at)``. Runs
older than the retention (``THEOW_RUN_RETENTION_DAYS``, 90) are purged.

A repository's default branch is the configured one (``THEOW_DEFAULT_BRANCHES``,
``owner/name=branch,...``), else the last one its forge's webhooks named
(``repositories``), else ``main`` (a replayed history's: else as its runs
show it, ``ledger.replayed.branches``).

>>> runs = SqlRuns(make_engine("sqlite://"))  # doctest: +SKIP
>>> runs.record(LedgerRun(Run(...), agent="ci-1", source="client"))  # doctest: +SKIP
'recorded'
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Literal

from sqlalchemy import bindparam, delete, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.orm import sessionmaker

from theow_client.jsontypes import JsonObject
from theow_workers.core.history.model import Decision, Outcome, Run
from theow_workers.store import run_twins
from theow_workers.store.run_rows import MAX_CAUSE as MAX_CAUSE  # re-exported: callers' names
from theow_workers.store.run_rows import RUN_COLUMNS, entry_of, run_of_columns, values_of
from theow_workers.store.run_rows import LedgerRun as LedgerRun
from theow_workers.store.schema import (
    FailureRow,
    RepositoryRow,
    RunRow,
    TestOutcomeRow,
    TestReportRow,
)

SOURCES = ("client", "intake", "webhook", "replay")
# The sender of replayed history's runs: no agent token can have it (names start [a-z0-9]).
REPLAY_AGENT = "@replay"
DEFAULT_BRANCH = "main"
DEFAULT_RETENTION_DAYS = 90
MAX_LIST = 1000
MAX_REASON = 1000

Recorded = Literal["recorded", "updated", "merged", "duplicate"]
# The History port's two questions, built once: building a statement costs more than running
# it on SQLite (a verdict asks a few; a revision, a few per failure it decides again).
_IN_WINDOW = (RunRow.finished_at >= bindparam("since"), RunRow.finished_at <= bindparam("until"))
_JOB_RUNS = (
    select(*RUN_COLUMNS)
    .where(RunRow.repo == bindparam("repo"), RunRow.job == bindparam("job"), *_IN_WINDOW)
    .order_by(RunRow.finished_at, RunRow.id)
)
_CAUSE_FAILURES = (
    select(*RUN_COLUMNS)
    .where(RunRow.cause == bindparam("cause"), RunRow.outcome == Outcome.FAILED.value, *_IN_WINDOW)
    .order_by(RunRow.finished_at, RunRow.id)
)


class SqlRuns:
    """The ledger on one engine (SQLite or PostgreSQL); the ``History`` port in SQL."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.session = sessionmaker(engine, expire_on_commit=False)
        dialect: Any = postgresql if engine.dialect.name == "postgresql" else sqlite
        self._insert = (
            dialect.insert(RunRow)
            .on_conflict_do_nothing(index_elements=["agent", "id"])
            .returning(RunRow.id)
        )

    # Writing

    def record(self, entry: LedgerRun) -> Recorded:
        """Record one run unless its sender recorded it already; what happened.

        ``updated``: the run was recorded passed (or failed without its failure)
        and this report is its failure; or, replayed again, the run now links
        the newest replay's failure. A passed report never undoes a failure.
        ``merged``: a webhook's report of a run an agent reported, or the other
        way round, merged into the first (``run_twins``): no row of its own.
        """
        if entry.source not in SOURCES:
            raise ValueError(f"run source {entry.source!r} is not one of {', '.join(SOURCES)}")
        values = values_of(entry)
        mergeable = run_twins.may_merge(entry.agent, entry.run.repo)
        with self.engine.begin() as conn:
            if mergeable:
                run_twins.lock(conn, entry.run.repo, entry.run.id)
            # RETURNING, not rowcount: psycopg counts a skipped conflicting row as -1.
            if conn.execute(self._insert.values(**values)).first() is not None:
                # Looked for once the insert holds the write lock: a twin is never missed.
                first = run_twins.twin(conn, values) if mergeable else None
                if first is None:
                    return "recorded"
                run_twins.fold(conn, first, values)
                return "merged"
            if not entry.run.failed:
                return "duplicate"
            run = entry.run
            unlinked = or_(RunRow.outcome == Outcome.PASSED.value, RunRow.failure_id.is_(None))
            if entry.source == "replay" and entry.failure_id:  # the newest replay's failure
                unlinked = or_(unlinked, RunRow.failure_id != entry.failure_id)
            done = conn.execute(
                update(RunRow)
                .where(RunRow.agent == entry.agent, RunRow.id == run.id)
                .where(unlinked)
                .values(
                    outcome=Outcome.FAILED.value,
                    finished_at=run.finished_at,
                    cause=run.cause[:MAX_CAUSE] if run.cause else RunRow.cause,
                    category=run.category if run.category else RunRow.category,
                    failure_id=entry.failure_id if entry.failure_id else RunRow.failure_id,
                )
            )
        return "updated" if done.rowcount else "duplicate"

    def set_origin(self, agent: str, run_id: str, decision: Decision, *, then: bool) -> bool:
        """Store a failed run's origin; ``then``: decided at its verdict (kept once, as it was).

        A revision (``then=False``) changes ``origin``, its culprit, fix and
        reason, never ``origin_then``. False when the run is not in the ledger.
        """
        values: dict[str, object] = {
            "origin": decision.origin.value,
            "culprit": decision.culprit,
            "fixed_by": decision.fixed_by,
            "origin_reason": decision.reason[:MAX_REASON],
        }
        where = (RunRow.agent == agent, RunRow.id == run_id)
        with self.engine.begin() as conn:
            if then:
                conn.execute(
                    update(RunRow)
                    .where(*where, RunRow.origin_then.is_(None))
                    .values(origin_then=decision.origin.value)
                )
            done = conn.execute(update(RunRow).where(*where).values(**values))
        return bool(done.rowcount)

    def settle_origins(self, decided: Sequence[tuple[str, str, Decision, Decision]]) -> None:
        """Store replayed failures' origins, ``(agent, run id, then, now)`` each, in one
        transaction: as each stood when its run finished (``then``) and as it stands."""
        if not decided:
            return
        statement = (
            update(RunRow)
            .where(RunRow.agent == bindparam("a"), RunRow.id == bindparam("i"))
            .values(
                origin_then=bindparam("then"),
                origin=bindparam("now"),
                culprit=bindparam("culprit"),
                fixed_by=bindparam("fixed"),
                origin_reason=bindparam("reason"),
            )
        )
        rows = [
            {"a": agent, "i": run_id, "then": then.origin.value, "now": now.origin.value,
             "culprit": now.culprit, "fixed": now.fixed_by, "reason": now.reason[:MAX_REASON]}
            for agent, run_id, then, now in decided
        ]  # fmt: skip
        with self.engine.begin() as conn:
            conn.execute(statement.execution_options(synchronize_session=False), rows)

    def purge(self, older_than_days: float, now: float | None = None) -> int:
        """Delete the runs that finished more than ``older_than_days`` ago, and their tests'
        outcomes; how many runs."""
        if older_than_days <= 0:
            raise ValueError(
                f"run retention must be a positive number of days, not {older_than_days}"
            )
        cutoff = (time.time() if now is None else now) - older_than_days * 86400
        with self.engine.begin() as conn:
            done = conn.execute(delete(RunRow).where(RunRow.finished_at < cutoff))
            # Their tests' outcomes and report counts (``store.testcases``) go with them.
            conn.execute(delete(TestOutcomeRow).where(TestOutcomeRow.at < cutoff))
            conn.execute(delete(TestReportRow).where(TestReportRow.at < cutoff))
        return int(done.rowcount)

    # The History port (core.history.ports.History)

    # Read as plain rows, not ORM objects: a verdict reads a job's and a cause's recent runs,
    # hundreds at times, and building an ORM object costs several times a tuple's.

    def job_runs(self, repo: str, job: str, *, since: float, until: float) -> Sequence[Run]:
        window = {"repo": repo, "job": job, "since": since, "until": until}
        with self.engine.connect() as conn:
            return [run_of_columns(row) for row in conn.execute(_JOB_RUNS, window)]

    def cause_failures(self, cause: str, *, since: float, until: float) -> Sequence[Run]:
        window = {"cause": cause, "since": since, "until": until}
        with self.engine.connect() as conn:
            return [run_of_columns(row) for row in conn.execute(_CAUSE_FAILURES, window)]

    def set_pull_request(
        self, agent: str, repo: str, sha: str, branch: str, pr: str, base_sha: str | None
    ) -> int:
        """Name the pull request of ``agent``'s runs of one commit on one branch that have
        none (a webhook's jobs, before its workflow run said which); how many."""
        with self.engine.begin() as conn:
            done = conn.execute(
                update(RunRow)
                .where(RunRow.agent == agent, RunRow.repo == repo, RunRow.sha == sha)
                .where(RunRow.branch == branch, RunRow.pr.is_(None))
                .values(pr=pr, base_sha=base_sha)
            )
        return int(done.rowcount)

    # Reading

    def failure_run(self, failure_id: str) -> tuple[object, object, str]:
        """A stored failure's ``run`` and ``job`` facts and its fingerprint (Nones and "" when
        there is no such failure); the facts' JSON is read in SQL, not loaded whole."""
        query = select(
            FailureRow.facts["run"], FailureRow.facts["job"], FailureRow.fingerprint
        ).where(FailureRow.id == failure_id)
        with self.engine.connect() as conn:
            found = conn.execute(query).first()
        if found is None:
            return None, None, ""
        return found[0], found[1], str(found[2] or "")

    def failure_facts(self, failure_id: str) -> JsonObject:
        """A stored failure's facts (bounded and masked as stored; {} when there is none)."""
        with self.engine.connect() as conn:
            found = conn.execute(
                select(FailureRow.facts).where(FailureRow.id == failure_id)
            ).scalar()
        return found if isinstance(found, dict) else {}

    def of_failure(self, failure_id: str) -> LedgerRun | None:
        """The run a failure was a failure of, if it was reported with one."""
        query = select(RunRow).where(RunRow.failure_id == failure_id).limit(1)
        with self.session() as s:
            found = s.scalars(query).first()
            return entry_of(found) if found is not None else None

    def of_failures(self, failure_ids: Sequence[str]) -> list[LedgerRun]:
        """The runs these failures were failures of (those reported with one)."""
        found: list[LedgerRun] = []
        with self.session() as s:
            for at in range(0, len(failure_ids), 500):  # bounded IN lists
                query = select(RunRow).where(RunRow.failure_id.in_(failure_ids[at : at + 500]))
                found.extend(entry_of(row) for row in s.scalars(query))
        return found

    def entries(self, runs: Sequence[Run]) -> list[LedgerRun]:
        """The ledger's rows of ``runs`` (by repository and id, whoever sent them), in their order."""
        if not runs:
            return []
        wanted = {(run.repo, run.id) for run in runs}
        query = select(RunRow).where(RunRow.id.in_({run.id for run in runs}))
        with self.session() as s:
            found = {
                (row.repo, row.id, row.agent): entry_of(row)
                for row in s.scalars(query)
                if (row.repo, row.id) in wanted
            }
        order = {(run.repo, run.id): at for at, run in enumerate(runs)}
        return sorted(found.values(), key=lambda e: order[(e.run.repo, e.run.id)])

    def listed(
        self,
        *,
        repo: str | None = None,
        job: str | None = None,
        agent: str | None = None,
        outcome: Outcome | None = None,
        origin: str | None = None,
        limit: int = 50,
    ) -> list[LedgerRun]:
        """The newest runs first, narrowed by what is given; at most ``MAX_LIST``."""
        query = select(RunRow).order_by(RunRow.finished_at.desc(), RunRow.id)
        for column, value in (
            (RunRow.repo, repo),
            (RunRow.job, job),
            (RunRow.agent, agent),
            (RunRow.outcome, outcome.value if outcome else None),
            (RunRow.origin, origin),
        ):
            if value is not None:
                query = query.where(column == value)
        with self.session() as s:
            return [entry_of(row) for row in s.scalars(query.limit(max(1, min(limit, MAX_LIST))))]

    # Default branches

    def default_branch(self, repo: str, configured: Mapping[str, str] | None = None) -> str:
        """The repository's default branch: configured, else learned, else ``main``."""
        return self.known_default_branch(repo, configured) or DEFAULT_BRANCH

    def known_default_branch(
        self, repo: str, configured: Mapping[str, str] | None = None
    ) -> str | None:
        """The repository's default branch when configured or learned; None when neither says."""
        key = repo.casefold()
        plain = key.rpartition("@")[2]  # an agent's own scope: ``<agent>@<repo>``
        if configured and plain in configured:
            return configured[plain]
        if configured and key in configured:
            return configured[key]
        with self.engine.connect() as conn:
            learned = conn.execute(
                select(RepositoryRow.default_branch).where(RepositoryRow.repo == key)
            ).scalar()
        return str(learned) if learned else None

    def repo_runs(self, repo: str) -> Iterator[Run]:
        """Every run of the repository in the ledger, whoever sent it, in the order they finished."""
        query = select(*RUN_COLUMNS).where(RunRow.repo == repo).order_by(RunRow.finished_at)
        with self.engine.connect() as conn:
            for row in conn.execute(query):
                yield run_of_columns(row)

    def learn_default_branch(self, repo: str, branch: str, learned_from: str) -> bool:
        """Keep what a forge said the repository's default branch is; whether it changed."""
        key, now = repo.casefold(), datetime.now(UTC)
        dialect: Any = postgresql if self.engine.dialect.name == "postgresql" else sqlite
        with self.engine.begin() as conn:
            known = conn.execute(
                select(RepositoryRow.default_branch).where(RepositoryRow.repo == key)
            ).scalar()
            if known == branch:
                return False
            values = {"default_branch": branch, "learned_from": learned_from, "updated_at": now}
            conn.execute(
                dialect.insert(RepositoryRow)
                .values(repo=key, **values)
                .on_conflict_do_update(index_elements=["repo"], set_=values)
            )
        return True


def configured_branches(items: Iterable[str]) -> dict[str, str]:
    """``THEOW_DEFAULT_BRANCHES``' ``owner/name=branch`` items by casefolded repository.

    >>> configured_branches(["Acme/API=master", " o/r = trunk "])
    {'acme/api': 'master', 'o/r': 'trunk'}
    >>> configured_branches(["acme/api"])
    Traceback (most recent call last):
    ...
    ValueError: THEOW_DEFAULT_BRANCHES: 'acme/api' is not owner/name=branch
    """
    found: dict[str, str] = {}
    for item in items:
        repo, equals, branch = item.partition("=")
        repo, branch = repo.strip(), branch.strip()
        if not equals or not repo or not branch or len(repo) > 300 or len(branch) > 200:
            raise ValueError(
                f"THEOW_DEFAULT_BRANCHES: {item.strip()[:100]!r} is not owner/name=branch"
            )
        found[repo.casefold()] = branch
    return found


def with_failure(
    entry: LedgerRun, failure_id: str, cause: str | None, category: str | None
) -> LedgerRun:
    """The run as a failed one of ``failure_id``, with its cause and category."""
    run = replace(entry.run, outcome=Outcome.FAILED, cause=cause, category=category)
    return replace(entry, run=run, failure_id=failure_id)
