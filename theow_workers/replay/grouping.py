"""Unmatched failures grouped by root cause: what is still unknown, largest first.

No model: each failure is summarized by its error text (:func:`error_summary`):
the one reading of its log (``core.logs.summary``: colour codes, time stamps and
CI-system boilerplate removed, its error lines picked with the markers
bounding uses, strongest first, wrappers left out) with the volatile parts
masked (times, durations, ids, paths and numbers taken out). Failures with
the same text in the same project form a group; then groups of one project
whose text is near-identical (token Jaccard >= ``SIMILAR`` on the tokens they
share with other groups, a plural as its singular: :func:`merge_similar`) are
merged (never two whose error codes differ: ``TS2322`` and ``TS2345`` are two
causes), and then a group whose error lines all appear among another's, with few
lines more (:func:`merge_contained`). Candidate pairs come from prefix
filtering (two token sets with Jaccard >= t share a token among their rarest
``n - ceil(t·n) + 1``) and from the lines groups share, so grouping 10,000
distinct failures does not compare every pair. ``benchmarks/grouping.py``
measures the result against human labels.

The web console's insight page groups stored failures with the same two
functions (``web.groups``): a replay and the console give one answer.

>>> groups = group_unmatched([("f1", "l1", "fp1", "error: x failed", "e: x <n>"),
...                           ("f2", "l2", "fp2", "error: x failed", "e: x <n>")])
>>> [(g.size, g.sample) for g in groups]
[(2, 'error: x failed')]
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from theow_client.jsontypes import JsonObject
from theow_workers.core.logs.summary import summarize
from theow_workers.core.testcases import cause_basis, cause_sample

SIMILAR = 0.7
# Facts naming the project a failure belongs to. A cause is grouped within its
# project: the same wrapper text in two projects is rarely one cause, and when it
# is, the explorer's session cache reuses the first exploration for the second.
SCOPE_FACTS = ("repo", "repository", "project")
SCOPE_MARK = "@scope "
MIN_SHARED = 4
MIN_CONTAINED_WORDS = 2  # words of the lines one group's text shares whole with another's
MAX_EXTRA_LINES = 2  # ... and at most this many lines more in the other
MAX_CONTAINED_LINES = 16  # a basis of more lines is matched whole (subsets grow as n²)
SHARED_SHARE = 0.5
_TOKEN = re.compile(r"<\w+>|[a-z_][a-z0-9_.\-']*")
_CODE = re.compile(r"[\w-]*\d[\w-]*")


def scope_of(facts: JsonObject) -> str:
    """The project a failure belongs to, when its facts say (``repo``, ``repository``, ``project``)."""
    for name in SCOPE_FACTS:
        value = facts.get(name)
        if isinstance(value, str) and value.strip():
            return " ".join(value.split())[:200]
    return ""


def with_scope(scope: str, body: str) -> str:
    """A basis as stored: the scope line (when there is one), then the normalized error text."""
    return f"{SCOPE_MARK}{scope}\n{body}" if scope else body


def split_basis(basis: str) -> tuple[str, str]:
    """(scope, normalized error text) of a stored basis."""
    if basis.startswith(SCOPE_MARK):
        scope, _, body = basis[len(SCOPE_MARK) :].partition("\n")
        return scope, body
    return "", basis


def error_summary(
    facts: JsonObject,
    is_normal: Callable[[str], bool] | None = None,
    is_wrapper: Callable[[str], bool] | None = None,
) -> tuple[str, str]:
    """(sample line, basis) of a failure, from its (redacted) facts.

    The failure's log read once (``core.logs.summary.summarize``): ``is_normal``,
    the job's normal, and ``is_wrapper``, the rules' wrappers, keep their
    lines out of the basis unless nothing else is left.

    The basis is the normalized error text, after the failure's scope (its
    project) when the facts name one: groups never span two projects. A failure whose
    ``tests`` fact names failed tests is grouped by those tests and their masked messages
    (``core.testcases``), shown by its first failed test.
    """
    tests = cause_basis(facts)
    if tests:
        return cause_sample(facts), with_scope(scope_of(facts), tests)
    summary = summarize(facts, is_normal=is_normal, is_wrapper=is_wrapper)
    return summary.sample, with_scope(scope_of(facts), summary.basis)


def tokens(basis: str) -> frozenset[str]:
    """The words and placeholders of a basis, a plural as its singular.

    A count decides the plural ("1 test failed", "2 tests failed"): one cause.

    >>> sorted(tokens("[info] *** <n> tests failed ***"))
    ['<n>', 'failed', 'info', 'test']
    """
    return frozenset(_singular(t) for t in _TOKEN.findall(basis))


def _singular(token: str) -> str:
    if len(token) > 3 and token.endswith("s") and not token.endswith("ss"):
        return token[:-1]
    return token


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
    scope: str = ""

    @property
    def size(self) -> int:
        return len(self.keys)

    def absorb(self, other: Group) -> None:
        self.failure_ids += other.failure_ids
        self.keys += other.keys
        self.fingerprints |= other.fingerprints

    def to_dict(self, with_ids: bool = True) -> JsonObject:
        data: JsonObject = {
            "size": self.size,
            "sample": self.sample,
            "fingerprints": sorted(self.fingerprints),
            **({"scope": self.scope} if self.scope else {}),
        }
        if with_ids:
            data.update(failure_ids=self.failure_ids, keys=self.keys)
        return data


# (failure id, item key, fingerprint, sample, basis)
Unmatched = tuple[str, str, str, str, str]


def group_unmatched(items: Iterable[Unmatched], threshold: float = SIMILAR) -> list[Group]:
    """Groups of unmatched failures, largest first.

    Failures with the same scope and error text start as one group; a failure
    recorded without its error text (replays before this grouping stored it
    once per fingerprint) takes that of another failure with its fingerprint.
    Two causes can share a fingerprint (it hashes the error-word lines, and
    "rake aborted!" is all of them for many causes), so the text decides.
    """
    rows = list(items)
    text_of: dict[str, tuple[str, str]] = {}
    for _, _, fp, sample, basis in rows:
        if split_basis(basis)[1]:
            text_of.setdefault(fp, (sample, basis))
    by_cause: dict[tuple[str, str], Group] = {}
    for failure_id, key, fp, sample, basis in rows:
        if not split_basis(basis)[1] and fp in text_of:
            sample, basis = text_of[fp]
        scope, body = split_basis(basis)
        group = by_cause.get((scope, body))
        if group is None:
            group = by_cause[(scope, body)] = Group(sample, body, tokens(body), scope=scope)
        group.fingerprints.add(fp)
        group.failure_ids.append(failure_id)
        group.keys.append(key)
    return merge_contained(merge_similar(list(by_cause.values()), threshold))


def merge_similar(groups: list[Group], threshold: float = SIMILAR) -> list[Group]:
    """Merge groups whose error text is near-identical into the largest of them.

    Compared on the tokens a group shares with another group of its scope: a
    token no other group has (a test's name, a file, a package) tells which
    instance failed, not which cause; what the tool says around it does. A
    group left with fewer than ``MIN_SHARED`` such tokens is compared whole.
    """
    compared = _shared_tokens(groups)
    frequency = Counter(t for g in groups for t in compared[id(g)])
    merged: list[Group] = []
    kept: list[frozenset[str]] = []
    # (scope, prefix token) -> merged groups: groups of two scopes are never compared.
    index: defaultdict[tuple[str, str], list[int]] = defaultdict(list)
    for group in sorted(groups, key=lambda g: (-g.size, g.sample)):
        mine = compared[id(group)]
        ordered = sorted(mine, key=lambda t: (frequency[t], t))
        prefix = ordered[: len(ordered) - math.ceil(threshold * len(ordered)) + 1]
        if not ordered:
            prefix = [""]  # groups without tokens are similar only to each other
        candidates = sorted({i for t in prefix for i in index.get((group.scope, t), ())})
        best, best_score = None, threshold
        for i in candidates:
            if _other_codes(group, merged[i]):
                continue
            score = jaccard(mine, kept[i])
            if score >= best_score:
                best, best_score = i, score
        if best is None:
            index_of = len(merged)
            merged.append(group)
            kept.append(mine)
            for t in prefix:
                index[(group.scope, t)].append(index_of)
        else:
            merged[best].absorb(group)
    merged.sort(key=lambda g: (-g.size, g.sample))
    return merged


def codes(basis: str) -> frozenset[str]:
    """What names the cause in a basis: its error codes, exit codes and statuses.

    The basis is masked (``core.logs.text.mask_volatile``): every digit left
    in it belongs to such a code.

    >>> sorted(codes("src/a.ts(<n>): error ts2322: type x\\nprocess completed with exit code 2."))
    ['2', 'ts2322']
    """
    return frozenset(_CODE.findall(basis))


def _other_codes(one: Group, other: Group) -> bool:
    """Both groups name codes, and not the same ones: ``TS2322`` is never ``TS2345``."""
    mine, theirs = codes(one.basis), codes(other.basis)
    return bool(mine and theirs and mine != theirs)


def _shared_tokens(groups: list[Group]) -> dict[int, frozenset[str]]:
    """Per group (by id), its tokens that another group of the same scope has too."""
    seen: Counter[tuple[str, str]] = Counter((g.scope, t) for g in groups for t in g.tokens)
    shared = {}
    for g in groups:
        common = frozenset(t for t in g.tokens if seen[(g.scope, t)] > 1)
        words = sum(1 for t in common if not t.startswith("<"))  # not a placeholder
        enough = words >= MIN_SHARED and len(common) >= SHARED_SHARE * len(g.tokens)
        shared[id(g)] = common if enough else g.tokens
    return shared


def merge_contained(groups: list[Group]) -> list[Group]:
    """Merge a group whose error lines all appear among another group's into the larger of them.

    One run states the cause alone ("test failure"), another with a line or
    two more around it ("failed: 2 tests", a test's name): token similarity
    falls below ``SIMILAR`` when the extra lines are most of the text. Merged
    when the contained group's lines carry ``MIN_CONTAINED_WORDS`` words (a
    bare "fail" is in every test log) and the other group adds at most
    ``MAX_EXTRA_LINES`` lines (a line every build prints, picked alone, would
    otherwise gather every cause of its project). Groups of two scopes are
    never compared. Found by hashing each group's lines less up to
    ``MAX_EXTRA_LINES`` of them, so no two groups are compared pairwise.
    """
    ordered = sorted(groups, key=lambda g: (-g.size, g.sample))
    merged: list[Group] = []
    whole: defaultdict[tuple[str, frozenset[str]], list[int]] = defaultdict(list)
    less: defaultdict[tuple[str, frozenset[str]], list[int]] = defaultdict(list)
    for group in ordered:
        mine = frozenset(ln for ln in group.basis.split("\n") if ln)
        parts = _parts(mine)
        found = list(less.get((group.scope, mine), ())) if _telling(group) else []
        found += [i for p in parts for i in whole.get((group.scope, p), ()) if _telling(merged[i])]
        if found:
            merged[min(found)].absorb(group)  # the largest
            continue
        whole[(group.scope, mine)].append(len(merged))
        for part in parts:
            less[(group.scope, part)].append(len(merged))
        merged.append(group)
    merged.sort(key=lambda g: (-g.size, g.sample))
    return merged


def _parts(lines: frozenset[str]) -> list[frozenset[str]]:
    """``lines`` less up to ``MAX_EXTRA_LINES`` of them, never empty (all of them when many)."""
    if len(lines) > MAX_CONTAINED_LINES:
        return [lines]
    return [
        lines - frozenset(dropped)
        for n in range(min(MAX_EXTRA_LINES, len(lines) - 1) + 1)
        for dropped in itertools.combinations(sorted(lines), n)
    ]


def _telling(group: Group) -> bool:
    return sum(1 for t in group.tokens if not t.startswith("<")) >= MIN_CONTAINED_WORDS
