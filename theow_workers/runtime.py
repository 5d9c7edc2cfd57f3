"""A process's services: ``build(settings, role)``, called once per process.

Workers reach theirs as ``self.services`` in a task (``worker.ServicesTask``),
the console and the CLI call ``build`` themselves. Celery forks pool
processes; sockets, database pools and the MiniLM model must not be shared
across a fork. ``Runtime`` builds each client lazily in the process that
uses it, and a forked pool process forgets its parent's services.

``Library`` (the rules and actions loaded together) is the core's
(``core.resolve.library``); ``Runtime.knowledge()`` is how a worker notices a new
rules version without a restart: at most every ``rules_poll_seconds`` it stats every rules and actions
directory (``Settings.rule_layers``); when anything changed it reloads them and
syncs the index under a Redis lock (one sync at a time, fleet-wide).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from redis.exceptions import LockError

from theow_client import names
from theow_client.jsontypes import JsonObject
from theow_workers import last_good
from theow_workers.adapters.memory import cosine
from theow_workers.config import Settings
from theow_workers.core.actions import ActionRegistry
from theow_workers.core.ports import Deliveries, Embedder, RuleIndex, SyncReport
from theow_workers.core.resolve.fingerprint import similarity_text
from theow_workers.core.resolve.library import Library
from theow_workers.core.resolve.plan import Similarity
from theow_workers.core.resolve.service import ResolveService, ResolveSettings, Submission
from theow_workers.core.rules.schema import RuleError
from theow_workers.heartbeat import ServedReport
from theow_workers.served import RulesWatch, ServedRules

if TYPE_CHECKING:
    from redis import Redis

    from theow_workers.adapters.milvus_index import MilvusIndex
    from theow_workers.adapters.normals import RedisNormals
    from theow_workers.adapters.query_vectors import QueryVectors
    from theow_workers.core.explore.service import ExploreService
    from theow_workers.core.llm.explanation import ExplainService
    from theow_workers.identity import Verifier
    from theow_workers.store.results import SqlStore
    from theow_workers.store.runs import SqlRuns

log = logging.getLogger("theow.runtime")

SYNC_LOCK_TIMEOUT = 300
SYNC_LOCK_WAIT = 5.0  # how long a worker with no rules yet waits for another's sync
SYNC_BEHIND = 60.0  # how long a sync behind a served version waits for another's


class RulesInvalid(Exception):
    """The rules directory has errors; a worker keeps its last good rule set."""

    def __init__(self, errors: Sequence[RuleError]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(str(e) for e in errors[:5]))


def directory_signature(*directories: Path) -> tuple[tuple[str, int, int], ...]:
    """Cheap change detection: names, sizes and mtimes of rule and action files."""
    found = []
    for directory in directories:
        pending = [str(directory)]
        while pending:  # os.scandir: a quarter of Path.rglob's time at 1,000 rules
            try:
                entries = os.scandir(pending.pop())
            except OSError:  # absent, or gone meanwhile
                continue
            with entries:
                for entry in entries:
                    if entry.is_dir():
                        pending.append(entry.path)
                    elif os.path.splitext(entry.name)[1] in (".yaml", ".py") and entry.is_file():
                        stat = entry.stat()
                        found.append((entry.path, stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(found))


class IndexBusy(Exception):
    """Another process holds the index sync lock (or held it and was killed)."""


def sync_index(
    knowledge: Library,
    index: RuleIndex,
    embedder: Embedder,
    redis: Redis | None,
    wait: float = SYNC_LOCK_TIMEOUT,
) -> SyncReport:
    """Sync the index with the rules, one process at a time (Redis lock).

    Raises IndexBusy when the lock is not free within ``wait`` seconds.
    """
    entries = knowledge.index_entries(embedder.model_name)
    if redis is None:
        return index.sync(entries, embedder)
    lock = redis.lock(
        names.KEY_INDEX_SYNC_LOCK, timeout=SYNC_LOCK_TIMEOUT, blocking_timeout=max(wait, 0.01)
    )
    if not lock.acquire():
        raise IndexBusy(f"the index sync lock stayed taken for {wait:g}s")
    try:
        report = index.sync(entries, embedder)
        redis.set(names.KEY_RULES_VERSION, knowledge.book.version)
    finally:
        with contextlib.suppress(LockError):  # expired while we synced: nothing to release
            lock.release()
    return report


# Who builds the services: what a process does decides which of them it ever touches.
Role = Literal["worker", "web", "cli", "replay"]


def build(settings: Settings, role: Role) -> Runtime:
    """A process's services, built once by the one function every process calls.

    Workers (``worker.ServicesTask``), the console (``web.console``) and the CLI
    call it; each client is made on first use, in the process that uses it.
    """
    return Runtime(settings, role)


class Runtime:
    def __init__(self, settings: Settings | None = None, role: Role = "cli") -> None:
        self.settings = settings or Settings.load()
        self.role = role
        self._lock = threading.RLock()
        # Last good rules versions this process wrote to disk (``last_good.restore``).
        self._restored: dict[str, tuple[Path, ...]] = {}
        self.reset()

    def reset(self) -> None:
        """Forget every client (after fork, or when settings change)."""
        self._store: SqlStore | None = None
        self._runs: SqlRuns | None = None
        self._index: MilvusIndex | None = None
        self._embedder: Embedder | None = None
        self._query_vectors: QueryVectors | None = None
        self._redis: Redis | None = None
        self._service: ResolveService | None = None
        self._explorer: ExploreService | None = None
        self._explainer: ExplainService | None = None
        self._verifier: Verifier | None = None
        self._normals: RedisNormals | None = None
        self._knowledge: Library | None = None  # the latest loaded
        self._served: ServedRules[Library] = ServedRules()
        self._served_report = ServedReport()  # which version this process serves, for `approve`
        self._watch: RulesWatch | None = None
        self._reload_lock = threading.Lock()
        self._reloading = False  # a changed rules directory is being loaded
        self._signature: tuple[tuple[str, int, int], ...] = ()
        self._checked_at = 0.0
        self._vectors: dict[str, array[float]] = {}  # rule name -> its indexed vector
        self._vectors_version = ""

    @property
    def store(self) -> SqlStore:
        with self._lock:
            if self._store is None:
                from theow_workers.store.results import SqlStore

                self._store = SqlStore(self.settings.store_url)
            return self._store

    @property
    def runs(self) -> SqlRuns:
        """The ledger of job runs, on the store's engine."""
        with self._lock:
            if self._runs is None:
                from theow_workers.store.runs import SqlRuns

                self._runs = SqlRuns(self.store.engine)
            return self._runs

    @property
    def index(self) -> MilvusIndex:
        with self._lock:
            if self._index is None:
                from theow_workers.adapters.milvus_index import MilvusIndex

                self._index = MilvusIndex(self.settings.milvus_uri, self.settings.milvus_collection)
            return self._index

    @property
    def embedder(self) -> Embedder:
        with self._lock:
            if self._embedder is None:
                from theow_workers.adapters.embedder import MiniLMEmbedder

                # No vectors on disk: a worker embeds failures without end, and the
                # rules' vectors it needs again are in the index.
                self._embedder = MiniLMEmbedder(disk=None)
            return self._embedder

    @property
    def query_vectors(self) -> QueryVectors:
        """Failures' query vectors, shared by the fleet in Redis (``adapters.query_vectors``)."""
        with self._lock:
            if self._query_vectors is None:
                from theow_workers.adapters.query_vectors import QueryVectors

                self._query_vectors = QueryVectors(self.redis, self.embedder)
            return self._query_vectors

    @property
    def redis(self) -> Redis:
        with self._lock:
            if self._redis is None:
                import redis

                self._redis = redis.Redis.from_url(self.settings.redis_url)
            return self._redis

    @property
    def deliveries(self) -> Deliveries:
        """Claims and delivery counts shared by every worker (``adapters.deliveries``)."""
        from theow_workers.adapters.deliveries import RedisDeliveries

        return RedisDeliveries(self.redis, claim_ttl=self.settings.claim_ttl)

    @property
    def normals(self) -> RedisNormals:
        """Each job's normal, learned from its passing runs (``adapters.normals``)."""
        with self._lock:
            if self._normals is None:
                from theow_workers.adapters.normals import RedisNormals

                s = self.settings
                self._normals = RedisNormals(self.redis, s.normal_ttl, s.normal_cache_seconds)
            return self._normals

    def knowledge(self) -> Library:
        """The rules and actions to resolve with: the latest version once its scanner is built
        (off the failures' path: ``served``).

        A worker process polls its rules directories in a thread of its own
        (``served.RulesWatch``, every ``rules_poll_seconds``): a failure then
        never walks a directory nor waits for a new version, the previous one
        answers until the new one's scanner is built. With a poll of 0 (tests),
        every call checks, as every other process's does.
        """
        watch = self._watch
        if watch is not None and watch.alive and self._knowledge is not None:
            return self._served.serve(self._knowledge, wait=False)
        latest = self._served.serve(self._latest())
        poll = self.settings.rules_poll_seconds
        if self.role == "worker":
            self._served_report.now(self.redis, latest.book.version)
            if poll > 0 and (watch is None or not watch.alive):
                with self._lock:
                    if self._watch is None or not self._watch.alive:
                        self._watch = RulesWatch(self._watched, poll)
        return latest

    def _watched(self) -> None:
        """The rules watch's tick: a new version loaded and built, and which one serves said."""
        served = self._served.serve(self._latest())
        self._served_report.now(self.redis, served.book.version)

    def rules_loading(self) -> bool:
        """Whether a changed rules version is being loaded or built (the previous one answers)."""
        return self._reloading or self._served.building

    def _latest(self) -> Library:
        """The current rules and actions, reloaded (and the index synced) when changed.

        Reloaded under a lock of its own: failures that need the process's other
        services (the store, Redis) never wait for a reload.
        """
        now = time.monotonic()
        if (
            self._knowledge is not None
            and now - self._checked_at < self.settings.rules_poll_seconds
        ):
            return self._knowledge
        with self._reload_lock:
            if (
                self._knowledge is not None
                and now - self._checked_at < self.settings.rules_poll_seconds
            ):
                return self._knowledge
            self._checked_at = now
            s = self.settings
            signature = directory_signature(*s.rule_layers, *s.action_layers)
            if self._knowledge is not None and signature == self._signature:
                return self._knowledge
            self._reloading = self._knowledge is not None
            try:
                return self._reload(signature)
            finally:
                self._reloading = False

    def _reload(self, signature: tuple[tuple[str, int, int], ...]) -> Library:
        s = self.settings
        loaded = Library.configured(s)
        if loaded.rules.errors:
            return self._keep_last_good(loaded, signature)
        if self._knowledge is not None and self._watch is not None and self._watch.alive:
            # The watch's thread: the new version is served as soon as its scanner is
            # built (regexes match without the index), the index synced apart, so that a
            # sync that loads the model or waits for another process's never holds up
            # the next change.
            self._knowledge, self._signature = loaded, signature
            self._served.serve(loaded)
            self._served.settle()
            sync = threading.Thread(target=self._sync, args=(loaded, SYNC_BEHIND), daemon=True)
            sync.start()
            return loaded
        first = self._knowledge is None
        if not first:
            self._knowledge = loaded
            self._served.serve(loaded)
        if not self._sync(loaded, SYNC_LOCK_WAIT if first else 0.0):
            # Served unsynced; the old signature is kept so the next check tries again.
            self._knowledge = loaded
            return loaded
        self._knowledge, self._signature = loaded, signature
        return loaded

    def _sync(self, loaded: Library, wait: float = 0.0) -> bool:
        """Sync the index with ``loaded`` (False: another process holds the sync lock).

        Bounded: a process killed mid-sync leaves the lock taken for minutes, and
        no failure may wait that long for it. Whichever process syncs a version
        syncs it for the fleet; one that finds the lock taken leaves it at that.
        """
        try:
            sync_index(loaded, self.index, self.embedder, self.redis, wait=wait)
        except IndexBusy as exc:
            log.warning("rules version %s served unsynced: %s", loaded.book.version[:12], exc)
            return False
        last_good.remember(self.redis, self.settings.rule_layers, loaded.book.version)
        log.info(
            "rules version %s: %d rules, %d actions",
            loaded.book.version,
            len(loaded.rules.rules),
            len(loaded.actions),
        )
        return True

    def _keep_last_good(
        self, invalid: Library, signature: tuple[tuple[str, int, int], ...]
    ) -> Library:
        """Serve the last valid rules (this process's, else the fleet's) and report the error."""
        error = RulesInvalid(invalid.rules.errors)
        kept = self._knowledge or self._restore_last_good(invalid.actions)
        if kept is None:
            last_good.report(self.redis, str(error), serving=None)
            raise error
        log.error(
            "rules directories %s are invalid, serving the last valid version %s: %s",
            ", ".join(map(str, self.settings.rule_layers)),
            kept.book.version[:12],
            error,
        )
        last_good.report(self.redis, str(error), serving=kept.book.version)
        self._knowledge, self._signature = kept, signature
        return kept

    def _restore_last_good(self, actions: ActionRegistry) -> Library | None:
        layers = last_good.restore(self.redis, self._restored)
        if layers is None:
            return None
        kept = Library.with_actions(layers, actions)
        return None if kept.rules.errors else kept

    def similarity_for(self, facts: JsonObject) -> Similarity:
        """A lazy similarity function for one failure: embeds only if called.

        It is asked about rules that validated, whose equals-facts therefore
        hold: their cosine to the failure is computed here from the index's
        vectors, fetched once per rules version, instead of a filtered search
        of the whole index per failure (half a second at 10,000 rules). The
        failure's own vector is shared by the fleet: a repeat is not embedded.
        """

        def similarity(rule_names: Sequence[str]) -> dict[str, float]:
            vector = self.query_vectors.vector(similarity_text(facts))
            return {name: cosine(vector, v) for name, v in self.rule_vectors(rule_names).items()}

        return similarity

    def rule_vectors(self, rule_names: Sequence[str]) -> dict[str, Sequence[float]]:
        """The index's vectors of these rules (a rule not indexed is absent).

        The first call of a rules version fetches every rule's vector in one
        query (Milvus Lite takes about as long for one name as for all), kept
        as float32: 1.5 KB a rule, 15 MB a worker process at 10,000 rules.
        """
        book = self.knowledge().book
        with self._lock:
            if book.version != self._vectors_version:
                self._vectors, self._vectors_version = {}, book.version
                missing = [r.name for r in book.rules]
            else:
                missing = [n for n in dict.fromkeys(rule_names) if n not in self._vectors]
        if missing:
            fetched = self.index.vectors(missing, kind="rule")
            with self._lock:
                if book.version == self._vectors_version:  # one not indexed yet is asked again
                    self._vectors.update({n: array("f", v) for n, v in fetched.items()})
        with self._lock:
            return {n: self._vectors[n] for n in rule_names if n in self._vectors}

    @property
    def service(self) -> ResolveService:
        with self._lock:
            if self._service is None:
                s = self.settings
                self._service = ResolveService(
                    self.store,
                    rulebook=lambda: self.knowledge().book,
                    actions=lambda: self.knowledge().actions,
                    similarity=self.similarity_for,
                    settings=ResolveSettings(
                        regex_timeout=s.regex_timeout,
                        action_timeout=s.action_timeout,
                        fact_limit=s.fact_limit,
                    ),
                    explore=self._enqueue_exploration,
                    normals=lambda job: self.normals.normal(job),
                    loading=self.rules_loading,
                )
            return self._service

    def _enqueue_exploration(self, sub: Submission, rule: str | None) -> str:
        from theow_workers.explorer.run import enqueue

        return enqueue(self, sub.failure_id, rule, sub.session_id)

    def _revoked(self, name: str) -> bool:
        """Whether token ``name`` was revoked (``names.KEY_REVOKED``), whatever the cache says."""
        return bool(self.redis.sismember(names.KEY_REVOKED, name))

    @property
    def verifier(self) -> Verifier:
        """Checks who sent each task message (``theow_workers.identity``)."""
        with self._lock:
            if self._verifier is None:
                from theow_workers.identity import Verifier
                from theow_workers.store.tokens import TokenStore
                from theow_workers.tokens import worker_key

                s = self.settings
                tokens = TokenStore(self.store.engine)
                self._verifier = Verifier(
                    tokens, worker_key(s), s.signature_max_age, revoked=self._revoked
                )
            return self._verifier

    @property
    def explorer(self) -> ExploreService:
        with self._lock:
            if self._explorer is None:
                from theow_workers.explorer.run import service

                self._explorer = service(self)
            return self._explorer

    @property
    def explainer(self) -> ExplainService:
        """explain's service (``theow_workers.explainer``): cache, store and model."""
        with self._lock:
            if self._explainer is None:
                from theow_workers.explainer import service

                self._explainer = service(self)
            return self._explainer
