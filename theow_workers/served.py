"""Which rules version a worker resolves with: a new one once its scanner is built.

Compiling the scanner of a few hundred rules (Hyperscan, ``core.rules.scanner``)
takes seconds when it is not in the disk cache; a failure that arrived just
after a rule change used to wait all of it. A new version's scanner is built
in a thread instead: the failure that noticed the change waits at most
``SWAP_WAIT`` (a small change is built by then and resolves with the new
rules), and until the build is done the previous version answers. The first
version a worker loads is built on the spot: there is nothing to serve before it.

>>> served = ServedRules()
>>> served.serve(Library.load(rules, actions))    # doctest: +SKIP
>>> # built now: the first version. Later, with ``reloaded`` just loaded:
>>> served.serve(reloaded)                          # doctest: +SKIP
>>> # the previous version, unless reloaded's scanner was built within SWAP_WAIT
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from theow_workers.core.resolve.plan import RuleBook

log = logging.getLogger("theow.runtime")

SWAP_WAIT = 1.0  # seconds a failure waits for a new version's scanner before the old one serves


class Version(Protocol):
    @property
    def book(self) -> RuleBook: ...


V = TypeVar("V", bound=Version)


class ServedRules(Generic[V]):
    def __init__(self, wait: float = SWAP_WAIT) -> None:
        self.wait = wait
        self._lock = threading.Lock()
        self._serving: V | None = None  # the latest version whose scanner is built
        self._building: threading.Thread | None = None
        self._unbuildable: V | None = None  # its scanner build failed: not tried again

    def settle(self) -> None:
        """Wait until the version being built (if any) is served, or its build failed."""
        building = self._building
        if building is not None:
            building.join()

    @property
    def building(self) -> bool:
        """Whether a newer version's scanner is being built (the previous one serves meanwhile)."""
        return self._building is not None

    def serve(self, latest: V, wait: bool = True) -> V:
        """The version to resolve with now, ``latest`` being the newest one loaded.

        ``wait=False``: never wait for a new version's scanner (the rules watcher's
        thread does); the previous version answers until it is built.
        """
        started = None
        with self._lock:
            serving = self._serving
            new = latest is not serving and latest is not self._unbuildable
            if serving is not None and new and self._building is None:
                started = self._building = threading.Thread(
                    target=self._serve_when_built,
                    args=(latest, serving),
                    name="theow-scanner",
                    daemon=True,
                )
                started.start()
        if serving is not None:
            if started is not None and wait:
                started.join(self.wait)  # a small change is built by then: served at once
                with self._lock:
                    serving = self._serving or serving
            return serving
        latest.book.scanner  # noqa: B018 - the first version: nothing to serve meanwhile
        with self._lock:
            if self._serving is None:
                self._serving = latest
            return self._serving

    def _serve_when_built(self, version: V, previous: V) -> None:
        try:
            # Built here, off the failures' path, from the parts of the version it replaces.
            version.book.build_scanner(previous=previous.book.scanner)
        except Exception:  # the previous version serves on; the next change is tried
            log.exception(
                "rules version %s: building its scanner failed", version.book.version[:12]
            )
            with self._lock:
                self._unbuildable, self._building = version, None
            return
        with self._lock:
            self._serving, self._building = version, None
        log.info("rules version %s served: its scanner is built", version.book.version[:12])


class RulesWatch:
    """A worker process's thread that notices a new rules version and builds it, off the failures' path.

    Every ``interval`` seconds it calls ``refresh`` (``Runtime``: stat the rule
    directories, reload what changed, build the new scanner); failures meanwhile
    read the version served, never a directory. Started in the process that
    resolves (a forked pool process starts its own: threads do not cross a fork).
    """

    def __init__(self, refresh: Callable[[], object], interval: float) -> None:
        self.refresh, self.interval = refresh, interval
        self.pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name="theow-rules-watch", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self.pid == os.getpid() and self._thread.is_alive()

    def _run(self) -> None:
        while True:
            time.sleep(self.interval)
            try:
                self.refresh()
            except Exception as exc:  # Milvus or Redis away a moment: the next tick tries again
                log.warning("rules watch: %s", str(exc)[:300])
