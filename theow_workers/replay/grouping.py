"""Unmatched failures grouped by root cause: what is still unknown, largest first.

First cut, no model: failures with the same fingerprint (hash of their
normalized error lines, ``theow_workers.core.query``) form a group; then
groups whose normalized error text is near-identical (token Jaccard >=
``SIMILAR``) are merged, so "cannot find module 'left-pad'" and "cannot find
module 'right-pad'" stay apart only if the rest of their errors differ.
Candidate pairs come from prefix filtering (two token sets with Jaccard >= t
share a token among their rarest ``n - ceil(t·n) + 1``), so grouping 10,000
distinct failures does not compare every pair.

>>> groups = group_unmatched([("f1", "l1", "fp1", "error: x failed", "e: x <n>"),
...                           ("f2", "l2", "fp2", "error: x failed", "e: x <n>")])
>>> [(g.size, g.sample) for g in groups]
[(2, 'error: x failed')]
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from theow_workers.core.query import error_lines, log_text, looks_like_error, normalize

SIMILAR = 0.8
MAX_BASIS_CHARS = 2000
# Lines that say a step failed without saying why: poor representatives.
GENERIC = re.compile(
    r"exit (?:code|status)|^make(?:\[\d+\])?: \*\*\*|\berror \d+\s*$|job failed|"
    r"process completed with|complete log of this run|for (?:more )?details|--verbose|"
    r"^error: command failed|^build failed|^failed\.?$|^=+ .* =+$",
    re.IGNORECASE,
)
_TOKEN = re.compile(r"<\w+>|[a-z_][a-z0-9_.\-']*")


def error_summary(
    facts: dict[str, Any], is_normal: Callable[[str], bool] | None = None
) -> tuple[str, str]:
    """(sample line, normalized error text) of a failure, from its (redacted) facts.

    ``is_normal``: the job's normal (``core.normal``); lines its passing runs
    print too are not picked unless nothing else is left.
    """
    lines = error_lines(log_text(facts), is_normal)
    errorish = [ln for ln in lines if looks_like_error(ln)]
    if not lines:
        brief = ", ".join(
            f"{k}={v}" for k, v in sorted(facts.items()) if isinstance(v, str | int) and k != "job"
        )
        return f"(no log text) {brief}"[:300], normalize(brief)[:MAX_BASIS_CHARS]
    specific = [ln for ln in errorish if not GENERIC.search(ln)]
    sample = (specific or errorish or lines)[-1]
    basis = "\n".join(normalize(ln) for ln in (errorish or lines))
    return sample, basis[:MAX_BASIS_CHARS]


def tokens(basis: str) -> frozenset[str]:
    return frozenset(_TOKEN.findall(basis))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


@dataclass
class Group:
    """Unmatched failures with one root cause, as far as their error text tells."""

    sample: str
    basis: str
    tokens: frozenset[str]
    failure_ids: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    fingerprints: set[str] = field(default_factory=set)

    @property
    def size(self) -> int:
        return len(self.keys)

    def absorb(self, other: Group) -> None:
        self.failure_ids += other.failure_ids
        self.keys += other.keys
        self.fingerprints |= other.fingerprints

    def to_dict(self, with_ids: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {
            "size": self.size,
            "sample": self.sample,
            "fingerprints": sorted(self.fingerprints),
        }
        if with_ids:
            data.update(failure_ids=self.failure_ids, keys=self.keys)
        return data


# (failure id, item key, fingerprint, sample, basis)
Unmatched = tuple[str, str, str, str, str]


def group_unmatched(items: Iterable[Unmatched], threshold: float = SIMILAR) -> list[Group]:
    """Groups of unmatched failures, largest first."""
    by_fingerprint: dict[str, Group] = {}
    for failure_id, key, fp, sample, basis in items:
        group = by_fingerprint.get(fp)
        if group is None:
            group = by_fingerprint[fp] = Group(sample, basis, tokens(basis), fingerprints={fp})
        elif basis and not group.basis:  # items of one root cause carry its basis once
            group.sample, group.basis, group.tokens = sample, basis, tokens(basis)
        group.failure_ids.append(failure_id)
        group.keys.append(key)
    return merge_similar(list(by_fingerprint.values()), threshold)


def merge_similar(groups: list[Group], threshold: float = SIMILAR) -> list[Group]:
    """Merge groups whose error text is near-identical into the largest of them."""
    frequency = Counter(t for g in groups for t in g.tokens)
    merged: list[Group] = []
    index: defaultdict[str, list[int]] = defaultdict(list)  # prefix token -> merged groups
    for group in sorted(groups, key=lambda g: (-g.size, g.sample)):
        ordered = sorted(group.tokens, key=lambda t: (frequency[t], t))
        prefix = ordered[: len(ordered) - math.ceil(threshold * len(ordered)) + 1]
        if not ordered:
            prefix = [""]  # groups without tokens are similar only to each other
        candidates = sorted({i for t in prefix for i in index.get(t, ())})
        best, best_score = None, threshold
        for i in candidates:
            score = jaccard(group.tokens, merged[i].tokens)
            if score >= best_score:
                best, best_score = i, score
        if best is None:
            index_of = len(merged)
            merged.append(group)
            for t in prefix:
                index[t].append(index_of)
        else:
            merged[best].absorb(group)
    merged.sort(key=lambda g: (-g.size, g.sample))
    return merged
