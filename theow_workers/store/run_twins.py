"""One job run reported by a forge's webhook and by the client: one ledger row, not two.

With both a webhook (GitHub ``workflow_job``, GitLab job events) and
``theow-client`` in the job, each reports the same run under its own sender
(``github-hooks``, ``ci-acme``), and each would be a row: counts, flip rates and
incidents would double. Both name the run the same way
(``theow_client.ci_run.run_id``: the forge, its run of the job, the job, the
attempt and the repository), so a report whose repository, id, job and commit
are those of a run the *other* kind of sender recorded is that run: the second
report is merged into the first (:func:`merged`) and leaves no row of its own.

What the merge keeps: a failure wins over a pass; the first failure linked
(its cause, category and origin with it); the earliest start; the client's
finish, pull request and base (the agent's own word, where the webhook says
none or less). Two agents never merge (an agent writes its own runs only), nor
does replayed history: only a webhook's report and an agent's whose token may
speak for the repository (its runs are kept under the repository itself).

Two reports arriving at once are serialized: on PostgreSQL by an advisory lock
on the run's repository and id, held by the writing transaction; on SQLite by
the write lock the insert takes before the twin is looked for.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import Connection

from theow_client import names
from theow_workers.core.history.model import Outcome
from theow_workers.store.schema import RunRow

HOOK_AGENTS = frozenset(names.HOOK_AGENTS.values())
CLIENT_SOURCES = frozenset({"client", "intake"})
# Kept from whichever report brings the failure the run keeps.
FAILURE_COLUMNS = (
    "failure_id",
    "cause",
    "category",
    "origin_then",
    "origin",
    "culprit",
    "fixed_by",
    "origin_reason",
)


def may_merge(agent: str, repo: str) -> bool:
    """Whether a report of ``agent`` may be one of two of a run: a webhook's, or an agent's
    kept under the repository itself (``<agent>@<repo>`` is the agent's own history)."""
    return agent in HOOK_AGENTS or ("@" not in repo and not agent.startswith("@"))


def lock(conn: Connection, repo: str, run_id: str) -> None:
    """On PostgreSQL, hold the run's advisory lock until the transaction ends."""
    if conn.dialect.name != "postgresql":
        return  # SQLite: one writer at a time already
    digest = hashlib.sha256(f"{repo}\0{run_id}".encode()).digest()
    conn.execute(select(func.pg_advisory_xact_lock(int.from_bytes(digest[:8], "big", signed=True))))


def twin(conn: Connection, values: dict[str, Any]) -> Any | None:
    """The row another kind of sender recorded for the same run (a webhook's for an agent's
    report, an agent's for a webhook's), if any: the oldest."""
    hooked = values["agent"] in HOOK_AGENTS
    other = RunRow.agent.not_in(HOOK_AGENTS) if hooked else RunRow.agent.in_(HOOK_AGENTS)
    query = (
        select(RunRow)
        .where(RunRow.repo == values["repo"], RunRow.job == values["job"])
        .where(RunRow.sha == values["sha"], RunRow.id == values["id"])
        .where(RunRow.agent != values["agent"], other, RunRow.source != "replay")
        .order_by(RunRow.created_at, RunRow.agent)
        .limit(1)
    )
    return conn.execute(query).first()


def merged(first: Any, second: dict[str, Any]) -> dict[str, object]:
    """The first report's row with what the second adds (see the module's note)."""
    failed = Outcome.FAILED.value
    values: dict[str, object] = {}
    if second["outcome"] == failed:
        values["outcome"] = failed
    if first.failure_id is None and second["failure_id"] is not None:
        values.update({name: second[name] for name in FAILURE_COLUMNS})
    elif first.cause is None and second["cause"] is not None:
        values.update(cause=second["cause"], category=second["category"])
    starts = [t for t in (first.started_at, second["started_at"]) if t is not None]
    if starts:
        values["started_at"] = min(starts)
    client = second["source"] in CLIENT_SOURCES
    for name in ("pr", "base_sha"):
        if second[name] is not None and (client or getattr(first, name) is None):
            values[name] = second[name]
    if client:
        values["finished_at"] = second["finished_at"]
    return {k: v for k, v in values.items() if getattr(first, k) != v}


def fold(conn: Connection, first: Any, second: dict[str, Any]) -> bool:
    """Merge the just-inserted ``second`` into ``first`` and delete it; whether ``first``
    changed."""
    conn.execute(delete(RunRow).where(RunRow.agent == second["agent"], RunRow.id == second["id"]))
    changes = merged(first, second)
    if changes:
        conn.execute(
            update(RunRow)
            .where(RunRow.agent == first.agent, RunRow.id == first.id)
            .values(**changes)
        )
    return bool(changes)
