"""``theow rules test``: a trial of the rules on one failure, in process (a dry run of the resolver).

Loads the rules and actions, builds an in-memory index with the real MiniLM
embedder, and plans exactly as a worker would, without running an action.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

from theow_client.facts import bound_facts
from theow_client.jsontypes import JsonObject
from theow_workers.adapters.memory import InMemoryIndex
from theow_workers.core.ports import Embedder
from theow_workers.core.resolve.fingerprint import similarity_text
from theow_workers.core.resolve.library import Library
from theow_workers.core.resolve.plan import Hints, plan

# What the caller shows while a step waits: ``waiting("embedding 239 rules")``.
Waiting = Callable[[str], AbstractContextManager[object]]


def quietly(message: str) -> AbstractContextManager[object]:
    return nullcontext()


def trial(
    facts: JsonObject,
    rules_dir: Path | Sequence[Path],
    actions_dir: Path | Sequence[Path],
    rules: Sequence[str] = (),
    tags: Sequence[str] = (),
    embedder: Embedder | None = None,
    waiting: Waiting = quietly,
) -> JsonObject:
    """The decision for ``facts`` as the JSON object ``theow rules test --json`` prints.

    ``waiting`` is told of each step that may take seconds: embedding the
    rules and the failure (MiniLM; cached on disk), compiling the scanner.
    """
    knowledge = Library.load(rules_dir, actions_dir)
    if knowledge.rules.errors:
        first = knowledge.rules.errors[0]
        raise ValueError(
            f"{len(knowledge.rules.errors)} invalid rule file(s), first: {first} "
            "(run `theow rules check`)"
        )
    if embedder is None:
        from theow_workers.adapters.embedder import MiniLMEmbedder

        embedder = MiniLMEmbedder()
    facts, _ = bound_facts(facts)
    index = InMemoryIndex()
    entries = [e for e in knowledge.index_entries(embedder.model_name) if e.kind == "rule"]
    with waiting(f"embedding {len(entries)} rules with MiniLM (first run only, cached afterwards)"):
        index.sync(entries, embedder)
    with waiting("embedding the failure with MiniLM"):
        vector = embedder.embed([similarity_text(facts)])[0]
    with waiting(
        f"compiling the patterns of {len(entries)} rules (first run only, cached afterwards)"
    ):
        knowledge.book.scanner  # noqa: B018 - built here, where the wait is told

    def similarity(names: Sequence[str]) -> dict[str, float]:
        hits = index.search(vector, names=list(names), limit=len(names))
        return {h.name: round(h.similarity, 4) for h in hits}

    result = plan(
        knowledge.book,
        facts,
        Hints(rules=tuple(rules), tags=tuple(tags)),
        similarity=similarity,
        explain=True,
    )
    # A wrapper (``generic``) explains nothing: the failure is then unexplained.
    chosen = result.specific[0] if result.specific else None
    wrapper = result.wrapper
    rule = knowledge.book.get(chosen.rule) if chosen else None
    candidates = []
    for rank, c in enumerate(result.candidates):
        reason = c.reason
        if c.validated and c is not chosen:
            generic = "generic, " if c.generic else ""
            reason = f"validates too; ranked #{rank + 1} ({generic}score {c.score:.3f})"
        if c.validated and c.match is not None and c.match.evidence is not None:
            reason += f"; {c.match.evidence.describe(c.rule)}"
        candidates.append(
            {"rule": c.rule, "similarity": c.similarity, "validated": c.validated, "reason": reason}
        )
    evidence = chosen.match.evidence if chosen and chosen.match else None
    return {
        "matched": chosen is not None,
        "rule": chosen.rule if chosen else None,
        "mode": rule.mode.value if rule else None,
        "actions": [
            {"action": a.action, "params": a.params}
            for a in (chosen.match.actions if chosen and chosen.match else ())
        ],
        "evidence": evidence.to_dict() if evidence is not None else None,
        "wrapper": wrapper.rule if wrapper is not None else None,
        "also": [c.rule for c in result.attempts if c is not chosen],
        "candidates": candidates,
    }
