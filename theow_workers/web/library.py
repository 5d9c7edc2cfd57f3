"""The rules as the console shows them: the catalogue with hits, and a page per rule.

Rules are loaded from the rule layers the workers read, reloaded when
its files change (``directory_signature``); counts come from SQL: hits are
verdicts naming the rule, the success ratio is the resolver's own
``rule_stats`` (successful attempts over all attempts).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from theow_client.jsontypes import JsonObject
from theow_workers.core.resolve.library import Library
from theow_workers.runtime import directory_signature
from theow_workers.store import console as queries
from theow_workers.store.explore import ExploreStore
from theow_workers.web.render import code
from theow_workers.web.snapshot import Taken


class LibraryView:
    def __init__(self, rule_layers: Sequence[Path], action_layers: Sequence[Path]) -> None:
        self.rule_layers, self.action_layers = tuple(rule_layers), tuple(action_layers)
        self._lock = threading.Lock()
        self._loaded: Library | None = None
        self._signature: tuple[tuple[str, int, int], ...] | None = None

    def knowledge(self) -> Library:
        with self._lock:
            signature = directory_signature(*self.rule_layers, *self.action_layers)
            if self._loaded is None or signature != self._signature:
                self._loaded = Library.load(self.rule_layers, self.action_layers)
                self._signature = signature
            return self._loaded

    def overview(self, store: ExploreStore, taken: Taken[JsonObject]) -> JsonObject:
        """The catalogue; ``taken`` is a snapshot of ``queries.rule_activity``."""
        knowledge = self.knowledge()
        activity = taken.value
        stats = store.sql.rule_stats()
        now = datetime.now(UTC)
        rows = []
        for rule in sorted(knowledge.rules.rules, key=lambda r: r.name):
            seen = activity.get(rule.name, {})
            st = stats.get(rule.name)
            tried = (st.successes + st.failures) if st else 0
            rows.append(
                {
                    "name": rule.name,
                    "mode": rule.mode.value,
                    "tags": rule.tags,
                    "generic": rule.generic,
                    "hits": seen.get("hits", 0),
                    "last_match": seen.get("last_match"),
                    "success_ratio": st.successes / tried if st and tried else None,
                    "attempts": tried,
                }
            )
        stopped = [
            r for r in rows if r["last_match"] is not None and now - r["last_match"] > queries.QUIET
        ]
        names = {r["name"] for r in rows}
        gone = sorted(name for name in activity if name not in names)
        return {
            "rules": sorted(rows, key=lambda r: (-r["hits"], r["name"])),
            "stopped": sorted(stopped, key=lambda r: r["last_match"]),
            "quiet_days": queries.QUIET.days,
            "never": sum(1 for r in rows if not r["hits"]),
            "gone": gone,
            "errors": [str(e) for e in knowledge.rules.errors],
            "as_of": taken.at,
        }

    def detail(self, store: ExploreStore, name: str) -> JsonObject | None:
        rules = self.knowledge().rules
        rule = rules.by_name().get(name)
        if rule is None:
            return None
        path = rules.origins[name].file if name in rules.origins else None
        text = path.read_text(encoding="utf-8") if path is not None else rule.canonical()
        examples = [
            {"fact": c.fact, "examples": c.examples, "counter_examples": c.counter_examples}
            for c in rule.when
            if c.examples or c.counter_examples
        ]
        activity = queries.rule_activity_of(store, name)
        return {
            "rule": rule,
            "path": str(path) if path else "",
            "yaml_html": code(text, "yaml"),
            "examples": examples,
            "matches": queries.rule_matches(store, name),
            "activity": activity,
        }
