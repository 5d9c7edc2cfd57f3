"""The rules and actions a worker resolves with, loaded together.

Rules are checked against the actions they call (names and signatures), so
the two are only ever loaded as one ``Library``. ``runtime`` keeps the
current one and notices a new version; everything else only reads it.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from theow_workers.core.actions import ActionRegistry, load_action_layers
from theow_workers.core.ports import IndexEntry, Layers
from theow_workers.core.resolve.plan import RuleBook
from theow_workers.core.rules.schema import RuleSet, load_rules


@dataclass(frozen=True)
class Library:
    """Rules and actions loaded together: rules are checked against the actions."""

    rules: RuleSet
    actions: ActionRegistry
    book: RuleBook

    @classmethod
    def configured(cls, settings: Layers) -> Library:
        """The rules and actions of every configured layer: how everything reads them."""
        return cls.load(settings.rule_layers, settings.action_layers)

    @classmethod
    def load(cls, rules: Path | Sequence[Path], actions: Path | Sequence[Path]) -> Library:
        """These rule and action directories (each one, or layers earliest first)."""
        layers = [actions] if isinstance(actions, Path) else list(actions)
        return cls.with_actions(rules, load_action_layers(layers))

    @classmethod
    def with_actions(cls, rules: Path | Sequence[Path], actions: ActionRegistry) -> Library:
        loaded = load_rules(
            rules,
            known_actions=frozenset(actions.names()),
            signatures={s.name: inspect.signature(s.func) for s in actions},
        )
        client_side = frozenset(s.name for s in actions if s.client_side)
        return cls(loaded, actions, RuleBook(loaded.rules, loaded.version, client_side))

    def index_entries(self, model_name: str) -> list[IndexEntry]:
        entries = [
            IndexEntry(
                id=f"rule:{r.name}",
                kind="rule",
                name=r.name,
                content_hash=r.content_hash(model_name),
                text=r.embedding_text(),
                equals=r.equals_facts(),
            )
            for r in self.rules.rules
        ]
        for spec in self.actions:
            text = f"{spec.name}: {spec.signature}\n{spec.doc}"
            entries.append(
                IndexEntry(
                    id=f"action:{spec.name}",
                    kind="action",
                    name=spec.name,
                    content_hash=_sha(f"{model_name}\n{text}"),
                    text=text,
                )
            )
        return entries


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
