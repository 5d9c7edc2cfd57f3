"""The tables, the engine and the migrations: the schema every store query reads.

SQLite by default, PostgreSQL in production; the schema is owned by Alembic
(``theow_workers/migrations``), never by ``create_all``. Idempotency lives in
the schema: a failure id is a primary key, a verdict's primary key is its
failure id, so a redelivered or duplicated task creates nothing twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    create_engine,
    event,
    select,
    text,
)
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.engine.interfaces import DBAPIConnection, DBAPICursor
from sqlalchemy.exc import DisconnectionError, OperationalError, SQLAlchemyError
from sqlalchemy.orm import (
    DeclarativeBase,
    InstrumentedAttribute,
    Mapped,
    Session,
    mapped_column,
    sessionmaker,
)
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection

from theow_client.jsontypes import JsonObject

MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations"

# The database could not be reached or answered (worth retrying): what callers catch.
StoreUnavailable = OperationalError
# Any error of the database or its driver (a replay chunk fails whole on one and is sent again).
StoreError = SQLAlchemyError


def _now() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    pass


class FailureRow(Base):
    __tablename__ = "failures"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), index=True)
    facts: Mapped[JsonObject] = mapped_column(JSON)
    problem_type: Mapped[str | None] = mapped_column(String(200), index=True)
    source: Mapped[str] = mapped_column(String(200))
    received_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    explore: Mapped[bool] = mapped_column(Boolean, default=False)
    notes: Mapped[JsonObject] = mapped_column(JSON, default=dict)
    # Who sent it, as verified by its signature; None for replayed history.
    agent: Mapped[str | None] = mapped_column(String(64), index=True, nullable=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(200), index=True, nullable=True)


class TokenRow(Base):
    """One token of the token store (``theow_workers.tokens``): never its secret."""

    __tablename__ = "tokens"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    scope: Mapped[str] = mapped_column(String(16))
    # sha256 of the secret: recognises a presented token without keeping it.
    lookup_hash: Mapped[str] = mapped_column(String(64), unique=True)
    # The HMAC key derived from the secret (``theow_client.signing.signing_key``), hex:
    # needed to verify signatures. A leak lets one forge submissions as this agent,
    # not log into the broker (whose ACL password is the token itself).
    signing_key: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # The ``owner/name`` repositories the token may speak for (``theow tokens add --repo``).
    repos: Mapped[list[str]] = mapped_column(JSON, default=list, server_default="[]")
    # An agent token's broker password as the broker keeps it: sha256 of the token's full
    # text (``ACL SETUSER ... #<hash>``). Recreates a lost broker user; opens no login.
    broker_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)


class AttemptRow(Base):
    __tablename__ = "attempts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    failure_id: Mapped[str] = mapped_column(ForeignKey("failures.id"), index=True)
    rule: Mapped[str] = mapped_column(String(256), index=True)
    params: Mapped[list[JsonObject]] = mapped_column(JSON)
    outcome: Mapped[str] = mapped_column(String(16))
    error: Mapped[str] = mapped_column(Text, default="")
    duration_ms: Mapped[float] = mapped_column(Float, default=0.0)
    delivery: Mapped[int] = mapped_column(Integer, default=1)
    evidence: Mapped[JsonObject | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class VerdictRow(Base):
    __tablename__ = "verdicts"

    failure_id: Mapped[str] = mapped_column(ForeignKey("failures.id"), primary_key=True)
    status: Mapped[str] = mapped_column(String(16), index=True)
    rule: Mapped[str | None] = mapped_column(String(256), index=True)
    mode: Mapped[str | None] = mapped_column(String(16))
    actions: Mapped[list[JsonObject]] = mapped_column(JSON)
    outputs: Mapped[list[JsonObject]] = mapped_column(JSON)
    reason: Mapped[str] = mapped_column(Text, default="")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    evidence: Mapped[JsonObject | None] = mapped_column(JSON, nullable=True)
    also: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    seen_in_passing: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    # The lines to look at ({fact, line, text}, in the log the build printed), most telling first.
    where_lines: Mapped[list[JsonObject] | None] = mapped_column(JSON, nullable=True)
    wrapper: Mapped[str | None] = mapped_column(String(256), nullable=True)
    decided_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, index=True)
    # explain's answer for an unexplained failure ({state, text, cause, next_step, model,
    # reason}), attached after the verdict; None: not explained (explain off, or not yet).
    explanation: Mapped[JsonObject | None] = mapped_column(JSON, nullable=True)


class ExplanationRow(Base):
    """What the model answered for one cause (``core.llm.explanation.cause_key``): paid once."""

    __tablename__ = "explanations"

    cause: Mapped[str] = mapped_column(String(64), primary_key=True)
    project: Mapped[str] = mapped_column(String(200), default="", index=True)
    state: Mapped[str] = mapped_column(String(16))
    text: Mapped[str] = mapped_column(Text, default="")
    cause_class: Mapped[str] = mapped_column(String(32), default="")
    next_step: Mapped[str] = mapped_column(Text, default="")
    model: Mapped[str] = mapped_column(String(200), default="")
    reason: Mapped[str] = mapped_column(Text, default="")
    tokens_in: Mapped[int] = mapped_column(Integer, default=0)
    tokens_out: Mapped[int] = mapped_column(Integer, default=0)
    cost: Mapped[float] = mapped_column(Float, default=0.0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class RuleStatsRow(Base):
    __tablename__ = "rule_stats"

    rule: Mapped[str] = mapped_column(String(256), primary_key=True)
    successes: Mapped[int] = mapped_column(Integer, default=0)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    last_success_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_failure_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ExplorationRow(Base):
    __tablename__ = "explorations"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    failure_id: Mapped[str] = mapped_column(ForeignKey("failures.id"), index=True)
    fingerprint: Mapped[str] = mapped_column(String(64), index=True)
    session_id: Mapped[str] = mapped_column(String(200), default="")
    rule: Mapped[str | None] = mapped_column(String(256))  # the probabilistic rule, if one drove it
    models: Mapped[list[str]] = mapped_column(JSON, default=list)
    turns: Mapped[int] = mapped_column(Integer, default=0)
    tool_calls: Mapped[int] = mapped_column(Integer, default=0)
    tokens_in: Mapped[int] = mapped_column(Integer, default=0)
    tokens_out: Mapped[int] = mapped_column(Integer, default=0)
    cost: Mapped[float] = mapped_column(Float, default=0.0)
    outcome: Mapped[str] = mapped_column(String(32), index=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    proposal_id: Mapped[str | None] = mapped_column(String(64), index=True)
    transcript: Mapped[list[JsonObject]] = mapped_column(JSON, default=list)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
    finished_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, index=True)


class ProposalRow(Base):
    __tablename__ = "proposals"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    exploration_id: Mapped[str] = mapped_column(ForeignKey("explorations.id"), index=True)
    failure_id: Mapped[str] = mapped_column(ForeignKey("failures.id"), index=True)
    rule_name: Mapped[str] = mapped_column(String(256), index=True)
    rule_yaml: Mapped[str] = mapped_column(Text)
    diffs: Mapped[list[dict[str, str]]] = mapped_column(JSON, default=list)
    status: Mapped[str] = mapped_column(String(16), index=True, default="pending")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, index=True)
    reviewed_by: Mapped[str | None] = mapped_column(String(200))
    reviewed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    review_reason: Mapped[str | None] = mapped_column(Text)


class ReplayJobRow(Base):
    __tablename__ = "replay_jobs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(8))  # "file" | "db"
    source: Mapped[str] = mapped_column(Text)  # file path, or the selection in words
    source_key: Mapped[str] = mapped_column(String(64), index=True)  # same source, same key
    options: Mapped[JsonObject] = mapped_column(JSON)
    dry_run: Mapped[bool] = mapped_column(Boolean, default=True)
    explore: Mapped[bool] = mapped_column(Boolean, default=False)
    explore_budget: Mapped[int | None] = mapped_column(Integer)
    explore_status: Mapped[str] = mapped_column(Text, default="")
    status: Mapped[str] = mapped_column(String(16), index=True)
    message: Mapped[str] = mapped_column(Text, default="")
    rules: Mapped[list[str]] = mapped_column(JSON)  # rule names when the job (re)started
    rules_version: Mapped[str] = mapped_column(String(64), default="")
    total: Mapped[int | None] = mapped_column(Integer)
    processed: Mapped[int] = mapped_column(Integer, default=0)
    matched: Mapped[int] = mapped_column(Integer, default=0)
    unmatched: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0)
    errors: Mapped[int] = mapped_column(Integer, default=0)
    invalid: Mapped[int] = mapped_column(Integer, default=0)
    duplicates: Mapped[int] = mapped_column(Integer, default=0)
    passing: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class ReplayItemRow(Base):
    __tablename__ = "replay_items"
    __table_args__ = (Index("ix_replay_items_job_status", "job_id", "status"),)

    job_id: Mapped[str] = mapped_column(ForeignKey("replay_jobs.id"), primary_key=True)
    item_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    line: Mapped[int | None] = mapped_column(Integer)
    failure_id: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    rule: Mapped[str | None] = mapped_column(String(256))
    fingerprint: Mapped[str | None] = mapped_column(String(64))
    sample: Mapped[str] = mapped_column(Text, default="")  # error line, or the input problem
    basis: Mapped[str] = mapped_column(Text, default="")  # normalized error text, for grouping
    rules_version: Mapped[str] = mapped_column(String(64), default="")
    decided_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class ReplayExplorationRow(Base):
    __tablename__ = "replay_explorations"

    job_id: Mapped[str] = mapped_column(ForeignKey("replay_jobs.id"), primary_key=True)
    failure_id: Mapped[str] = mapped_column(String(64), primary_key=True)  # the one investigated
    rank: Mapped[int] = mapped_column(Integer)  # 1 = the largest group
    size: Mapped[int] = mapped_column(Integer)
    sample: Mapped[str] = mapped_column(Text)
    fingerprints: Mapped[list[str]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16))  # sending | sent | reused
    reused_from: Mapped[str | None] = mapped_column(String(64))  # the exploration reused
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class RunRow(Base):
    """One job run of the ledger (``store.runs``): passed or failed, with where it ran."""

    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_repo_job_finished", "repo", "job", "finished_at"),
        Index("ix_runs_cause_finished", "cause", "finished_at"),
        Index("ix_runs_repo_job_sha", "repo", "job", "sha"),
        Index("ix_runs_failure_id", "failure_id"),
        Index("ix_runs_finished_at", "finished_at"),
    )

    # The verified sender (an agent, a forge's hook agent, ``@replay``) and the run's id:
    # one row however often it is reported, and no agent writes another's.
    agent: Mapped[str] = mapped_column(String(64), primary_key=True)
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    repo: Mapped[str] = mapped_column(String(300))
    job: Mapped[str] = mapped_column(String(200))
    branch: Mapped[str] = mapped_column(String(200))
    sha: Mapped[str] = mapped_column(String(64))
    pr: Mapped[str | None] = mapped_column(String(32), nullable=True)
    base_sha: Mapped[str | None] = mapped_column(String(64), nullable=True)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    outcome: Mapped[str] = mapped_column(String(8))  # passed | failed
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # epoch seconds
    finished_at: Mapped[float] = mapped_column(Float)  # epoch seconds
    cause: Mapped[str | None] = mapped_column(String(500), nullable=True)
    category: Mapped[str | None] = mapped_column(String(32), nullable=True)
    failure_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # The origin decided at the verdict, and as later runs revised it (both kept).
    origin_then: Mapped[str | None] = mapped_column(String(16), nullable=True)
    origin: Mapped[str | None] = mapped_column(String(16), nullable=True)
    culprit: Mapped[str | None] = mapped_column(String(64), nullable=True)
    fixed_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    origin_reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    source: Mapped[str] = mapped_column(String(16))  # client | intake | webhook | replay
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class RepositoryRow(Base):
    """A repository's default branch: configured, or as its forge's webhooks said."""

    __tablename__ = "repositories"

    repo: Mapped[str] = mapped_column(String(300), primary_key=True)
    default_branch: Mapped[str] = mapped_column(String(200))
    learned_from: Mapped[str] = mapped_column(String(16))  # webhook | client
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)


class TestReportRow(Base):
    """The counts of a run's JUnit report (``store.testcases``): its tests passed but the listed."""

    __test__ = False  # pytest: not a test class
    __tablename__ = "test_reports"
    __table_args__ = (
        Index("ix_test_reports_repo_job_at", "repo", "job", "at"),
        Index("ix_test_reports_at", "at"),
    )

    agent: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    repo: Mapped[str] = mapped_column(String(300))
    job: Mapped[str] = mapped_column(String(200))
    at: Mapped[float] = mapped_column(Float)  # the run's finished_at
    tests: Mapped[int] = mapped_column(Integer)
    failed: Mapped[int] = mapped_column(Integer)
    errors: Mapped[int] = mapped_column(Integer)
    skipped: Mapped[int] = mapped_column(Integer)
    flaky: Mapped[int] = mapped_column(Integer)
    unlisted: Mapped[int] = mapped_column(Integer, default=0)  # failed or flaky, not named


class TestOutcomeRow(Base):
    """A test that did not simply pass a run: failed | flaky | passed-after-rerun."""

    __test__ = False
    __tablename__ = "test_outcomes"
    __table_args__ = (
        Index("ix_test_outcomes_repo_job_at", "repo", "job", "at"),
        Index("ix_test_outcomes_test_at", "test", "at"),
        Index("ix_test_outcomes_repo_job_sha", "repo", "job", "sha"),
        Index("ix_test_outcomes_at", "at"),
    )

    agent: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    test: Mapped[str] = mapped_column(String(700), primary_key=True)  # classname::name
    repo: Mapped[str] = mapped_column(String(300))
    job: Mapped[str] = mapped_column(String(200))
    sha: Mapped[str] = mapped_column(String(64))
    branch: Mapped[str] = mapped_column(String(200))
    outcome: Mapped[str] = mapped_column(String(24))
    at: Mapped[float] = mapped_column(Float)  # the run's finished_at
    message: Mapped[str | None] = mapped_column(String(300), nullable=True)


def _use_wal(cursor: DBAPICursor, timeout: float = 30.0) -> None:
    """Switch the database to WAL unless it is already (as it is once migrated).

    Setting the mode takes a lock that SQLite's busy handler does not wait for:
    workers connecting at the same instant got "database is locked" from the
    pragma itself, so it is set only when needed and retried while busy.
    """
    import sqlite3

    deadline = time.monotonic() + timeout
    while True:
        try:
            cursor.execute("PRAGMA journal_mode")
            row = cursor.fetchone()
            assert row is not None  # the pragma always answers one row
            (mode,) = row
            if str(mode).lower() != "wal":
                cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn: DBAPIConnection, _: ConnectionPoolEntry) -> None:
            # WAL lets readers and one writer work at once across worker processes.
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA busy_timeout=30000")
            _use_wal(cursor)
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        return engine
    engine = create_engine(url)
    _ping_when_idle(engine)
    return engine


# A connection used this recently is taken to be alive, and not pinged.
PING_AFTER_IDLE_S = 10.0


def _ping_when_idle(engine: Engine) -> None:
    """Ping a pooled connection before use only when it sat idle a while.

    ``pool_pre_ping`` pinged before every checkout: one more round trip per
    write, doubling the resolve path's on PostgreSQL. A connection used
    seconds ago is alive unless the server went away since; then its
    statement fails with StoreUnavailable (which the tasks retry) and the pool
    drops its connections. One idle longer (a server restart overnight, a
    proxy's idle timeout) is pinged and replaced if dead, as before.
    """

    @event.listens_for(engine, "checkin")
    def _idle_since(_dbapi_conn: DBAPIConnection, record: ConnectionPoolEntry) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping(
        dbapi_conn: DBAPIConnection, record: ConnectionPoolEntry, _proxy: PoolProxiedConnection
    ) -> None:
        since = record.info.pop("idle_since", None)
        record.info["pinged"] = since is not None and time.monotonic() - since > PING_AFTER_IDLE_S
        if not record.info["pinged"]:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except engine.dialect.loaded_dbapi.Error as exc:
            # The pool replaces the connection and checks out again.
            raise DisconnectionError(f"a pooled connection is dead: {exc}") from exc


def migrate(url: str, revision: str = "head") -> None:
    """Bring the database schema to ``revision`` with Alembic."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    command.upgrade(config, revision)


@dataclass(frozen=True)
class SchemaState:
    """Where a database's schema stands against this code's migrations."""

    backend: str  # "sqlite", "postgresql", ...
    current: frozenset[str]  # revisions the database is at
    heads: frozenset[str]  # revisions this code migrates to
    known: frozenset[str]  # every revision this code has


def backend_of(url: str) -> str:
    return make_url(url).get_backend_name()


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None for another database or an in-memory one)."""
    parsed = make_url(url)
    path = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or not path or path == ":memory:":
        return None
    return Path(path)


def schema_state(url: str, timeout: float) -> SchemaState:
    """Connect once (within ``timeout`` seconds) and read the schema's revision."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    backend = backend_of(url)
    args: JsonObject = {}
    if backend == "sqlite":
        args = {"timeout": timeout}
    elif backend == "postgresql":
        args = {"connect_timeout": int(timeout)}
    engine = create_engine(url, connect_args=args)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
            current = frozenset(MigrationContext.configure(conn).get_current_heads())
    finally:
        engine.dispose()
    script = ScriptDirectory(str(MIGRATIONS))
    known = frozenset(rev.revision for rev in script.walk_revisions())
    return SchemaState(backend, current, frozenset(script.get_heads()), known)


class AmbiguousId(LookupError):
    """An id prefix names more than one row."""


def expand_id(
    session: sessionmaker[Session], column: InstrumentedAttribute[str], given: str, what: str
) -> str | None:
    """``given`` when it is an id, else the one id it is a prefix of; None if none.

    Tables cut long ids on narrow screens and people copy short forms, so an
    unambiguous prefix names its row; an ambiguous one raises AmbiguousId
    listing a few of the ids it could mean.
    """
    with session() as s:
        if s.execute(select(column).where(column == given)).first() is not None:
            return given
        if not given:
            return None
        query = select(column).where(column.startswith(given, autoescape=True)).limit(6)
        found = list(s.execute(query).scalars())
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (", …" if len(found) > 5 else "")
        raise AmbiguousId(f"{what} id {given!r} is ambiguous: it starts {shown}; give more of it")
    return found[0] if found else None
