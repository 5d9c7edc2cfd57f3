"""How many stored failures a proposed rule would have matched, counted in the background.

The review queue orders proposals by it and the proposal page shows it. A
count evaluates the rule (the resolver's own ``evaluate``) against every
stored failure, which takes seconds with 100,000 of them: one thread counts
for every uncounted pending proposal in a single pass over the failures,
batch by batch, and pages read whatever is known so far ("counting…"). A
count is of the failures stored when it ran, and is taken again after
``RECOUNT`` seconds, so failures received since are counted too.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from theow_client.jsontypes import JsonObject
from theow_workers.core.resolve.plan import matching_facts
from theow_workers.core.rules.matching import evaluate
from theow_workers.core.rules.schema import Rule, RuleError, parse_rule
from theow_workers.store.explore import ExploreStore

log = logging.getLogger("theow.web")
BATCH = 500
RECOUNT = 15 * 60.0


@dataclass(frozen=True)
class Count:
    matched: int
    scanned: int
    done: bool
    examples: tuple[str, ...] = ()  # a few failure ids it matches
    error: str = ""
    at: float = field(default_factory=time.monotonic)


class AffectedCounter:
    """Counts per pending proposal; ``get`` never blocks on a count."""

    def __init__(self, store: ExploreStore) -> None:
        self.store = store
        self._counts: dict[str, Count] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def get(self, proposal_id: str) -> Count | None:
        with self._lock:
            return self._counts.get(proposal_id)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="theow-web-affected", daemon=True
            )
            self._thread.start()
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def forget(self, proposal_id: str) -> None:
        """The proposal's rule was edited: its count is of another rule; count it again."""
        with self._lock:
            self._counts.pop(proposal_id, None)
        self._wake.set()

    def poke(self) -> None:
        """New proposals may be pending: count them."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=60)
            self._wake.clear()
            try:
                self.count_pending()
            except Exception:  # a database hiccup must not end the thread
                log.exception("counting the failures proposals match failed")

    def count_pending(self) -> None:
        """One pass over the stored failures for every pending proposal not yet counted."""
        pending = self.store.pending_rules()
        rules: dict[str, Rule] = {}
        now = time.monotonic()
        for pid, text in pending:
            known = self.get(pid)
            if known is not None and (not known.done or now - known.at < RECOUNT):
                continue
            try:
                rules[pid] = parse_rule(text)
            except RuleError as exc:
                with self._lock:
                    self._counts[pid] = Count(0, 0, True, error=f"line {exc.line}: {exc.reason}")
        if not rules:
            return
        matched = dict.fromkeys(rules, 0)
        examples: dict[str, list[str]] = {pid: [] for pid in rules}
        scanned, after = 0, ""
        while not self._stop.is_set():
            batch = self._batch(after)
            if not batch:
                break
            for fid, stored in batch:
                facts = matching_facts(stored or {})  # a `log` as rules read it (taught rules)
                for pid, rule in rules.items():
                    if evaluate(rule, facts).ok:
                        matched[pid] += 1
                        if len(examples[pid]) < 5:
                            examples[pid].append(fid)
            scanned += len(batch)
            after = batch[-1][0]
            self._publish(rules, matched, examples, scanned, done=False)
        self._publish(rules, matched, examples, scanned, done=not self._stop.is_set())

    def _batch(self, after: str) -> list[tuple[str, JsonObject]]:
        return self.store.failure_facts(after, BATCH)

    def _publish(
        self,
        rules: dict[str, Rule],
        matched: dict[str, int],
        examples: dict[str, list[str]],
        scanned: int,
        done: bool,
    ) -> None:
        with self._lock:
            for pid in rules:
                old = self._counts.get(pid)
                if not done and old is not None and old.done:
                    continue  # recounting: the last full count stays until this one is whole
                self._counts[pid] = Count(matched[pid], scanned, done, tuple(examples[pid]))
