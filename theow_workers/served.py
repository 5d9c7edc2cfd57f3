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
import threading
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

    def serve(self, latest: V) -> V:
        """The version to resolve with now, ``latest`` being the newest one loaded."""
        started = None
        with self._lock:
            serving = self._serving
            new = latest is not serving and latest is not self._unbuildable
            if serving is not None and new and self._building is None:
                started = self._building = threading.Thread(
                    target=self._serve_when_built, args=(latest,), name="theow-scanner", daemon=True
                )
                started.start()
        if serving is not None:
            if started is not None:
                started.join(self.wait)  # a small change is built by then: served at once
                with self._lock:
                    serving = self._serving or serving
            return serving
        latest.book.scanner  # noqa: B018 - the first version: nothing to serve meanwhile
        with self._lock:
            if self._serving is None:
                self._serving = latest
            return self._serving

    def _serve_when_built(self, version: V) -> None:
        try:
            version.book.scanner  # noqa: B018 - built here, off the failures' path
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
