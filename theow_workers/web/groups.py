"""The insight page's groups of failures no rule explains: a replay's groups, by the same basis.

A replay groups its unknown failures by their error text: ``error_summary``
gives each failure its basis, ``group_unmatched`` groups the bases
(``replay.grouping``). The insight page groups the newest stored unknown
failures (``store.console.unknown_failures``) with the same two functions, so
the same failures fall into the same groups in both, where fingerprints would
put two causes behind one wrapper line into one group.

A basis is read from a failure's stored facts once and kept in memory (stored
facts never change): reading a log costs a few ms, so only the first refresh
after a start reads up to ``UNKNOWN_SCAN`` logs, and later ones read the new
failures only.

>>> cache = BasisCache()  # one per console; the insight snapshot refreshes through it
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime

from theow_client.jsontypes import JsonObject
from theow_workers.core.logs.summary import LinePredicate
from theow_workers.replay.grouping import error_summary, group_unmatched
from theow_workers.store import console as queries
from theow_workers.store.explore import ExploreStore

_EARLIEST = datetime.min.replace(tzinfo=UTC)


class BasisCache:
    """(sample line, basis) per failure id, the newest ``size`` kept.

    ``wrappers`` gives the rule library's wrapper test (``RuleBook.is_wrapper``)
    and its version, as the resolvers that replay uses have it: a wrapper line
    (``rake aborted!``) is no cause's text. Bases read under another version are
    read again.
    """

    def __init__(
        self,
        size: int = 2 * queries.UNKNOWN_SCAN,
        wrappers: Callable[[], tuple[str, LinePredicate | None]] = lambda: ("", None),
    ) -> None:
        self.size = size
        self.wrappers = wrappers
        self._version = ""
        self._bases: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._lock = threading.Lock()

    def bases(self, store: ExploreStore, ids: list[str]) -> dict[str, tuple[str, str]]:
        """The basis of each failure of ``ids`` still stored, read from its facts when new."""
        version, is_wrapper = self.wrappers()
        with self._lock:
            if version != self._version:
                self._bases.clear()
                self._version = version
            missing = [i for i in ids if i not in self._bases]
        read = {
            fid: error_summary(facts, None, is_wrapper)
            for fid, facts in queries.facts_of(store, missing).items()
        }
        with self._lock:
            self._bases.update(read)
            for fid in ids:
                if fid in self._bases:
                    self._bases.move_to_end(fid)
            while len(self._bases) > self.size:
                self._bases.popitem(last=False)
            return {fid: self._bases[fid] for fid in ids if fid in self._bases}


def unknown_groups(
    store: ExploreStore, cache: BasisCache, limit: int = queries.GROUPS
) -> list[JsonObject]:
    """The largest groups of the newest unknown failures, each with its newest failure."""
    failures = {f.id: f for f in queries.unknown_failures(store)}
    bases = cache.bases(store, list(failures))
    # Oldest first, as a replay reads its input: a group's sample is its first failure's.
    groups = group_unmatched(
        (fid, fid, failures[fid].fingerprint, *bases[fid])
        for fid in reversed(failures)
        if fid in bases
    )
    shown = []
    for group in groups[:limit]:
        newest = max(group.failure_ids, key=lambda i: (failures[i].received_at or _EARLIEST, i))
        shown.append(
            {
                "size": group.size,
                "sample": group.sample,
                "example": newest,
                "last": failures[newest].received_at,
                "scope": group.scope,
                "fingerprints": sorted(group.fingerprints),
                "failure_ids": group.failure_ids,
            }
        )
    return shown
