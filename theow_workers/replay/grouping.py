"""Unmatched failures grouped by root cause: what is still unknown, largest first.

No model: each failure is summarized by its error text (:func:`error_summary`):
the log read as a person reads it (colour codes, time stamps and CI-system
boilerplate removed, the failing step first: ``core.logtext``), its error
lines picked with the markers bounding uses (``theow_client.facts``,
strongest first: :func:`pick_error_lines`), and normalized the way matching
normalizes (times, durations, ids, paths and numbers taken out). Failures with
the same text in the same project form a group; then groups of one project
whose text is near-identical (token Jaccard >= ``SIMILAR`` on the tokens they
share with other groups, a plural as its singular: :func:`merge_similar`) are
merged, and then a group whose error lines all appear among another's, with few
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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from theow_client.facts import ERROR_TIERS, LOWER_CASED
from theow_workers.core.logtext import clean_lines
from theow_workers.core.query import log_text

SIMILAR = 0.7
MAX_BASIS_CHARS = 2000
MAX_ERROR_LINES = 8
TAIL_LINES = 6
GENERIC_CONTEXT = 2
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
STRONG_WINDOW = 80  # lines from the end where an error marker counts
WEAK_WINDOW = 30  # ... and where a weak marker (a bare word) counts
NORMAL_SCAN_LINES = 4 * STRONG_WINDOW  # lines judged against the job's normal
MAX_LINE_CHARS = 300
# Lines that say a step failed without saying why: poor representatives.
GENERIC = re.compile(
    r"exit (?:code|status)|^make(?:\[\d+\])?: \*\*\*|\berror \d+\s*$|job failed|"
    r"process completed with|complete log of this run|for (?:more )?details|--verbose|--trace\b|"
    r"^error: command failed|^build failed|^failed\.?$|^=+ .* =+$|^npm err!\s*$|"
    r"not a problem with npm|additional logging output above|^rake aborted!?$|"
    r"^command failed with status \(\d+\)|"  # rake's `sh`: the command's own error is above
    r"^tests? failed\.?$|^error$|^\[error\]\s*$|^-+$",
    re.IGNORECASE,
)
_TOKEN = re.compile(r"<\w+>|[a-z_][a-z0-9_.\-']*")
# What differs between two runs of one cause, in the order it is replaced.
_VOLATILE = [
    (
        re.compile(r"\b\d{4}-\d\d-\d\d[t _]\d\d[:_]\d\d[:_]\d\d(?:[.,_]\d+)?(?:z|[+-]\d\d:?\d\d)?"),
        "<ts>",
    ),
    (
        re.compile(
            r"\b(?:mon|tue|wed|thu|fri|sat|sun)\w* +\w{3} +\d+ +\d\d:\d\d:\d\d(?: +\w+)? +\d{4}"
        ),
        "<ts>",
    ),
    (re.compile(r"\b\d\d?:\d\d:\d\d(?:[.,]\d+)?\b"), "<ts>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{7,}\b"), "<hex>"),
    # Durations: "11 min", "26.279 seconds", "(0.52s)", "123ms", "1m 3s".
    (
        re.compile(
            r"\b\d+(?:\.\d+)?\s?(?:ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?)\b"
        ),
        "<dur>",
    ),
    (re.compile(r"[a-z]:\\(?:[^\\\s]+\\)+"), "<path>/"),
    (re.compile(r"(?:~|\.{1,2})?(?:/[\w.@+\-]+)+/"), "<path>/"),
    (re.compile(r"\d+"), "<n>"),
    (re.compile(r"(?:<n>[.,:])+<n>"), "<n>"),
    (re.compile(r"[ \t]+"), " "),
]


def normalize(line: str) -> str:
    """A line with what differs between runs of one cause taken out.

    >>> normalize("Error at /home/travis/build/a/b/src/x.c:12:3 after 11 min (run 7f3a9c2e)")
    'error at <path>/x.c:<n> after <dur> (run <hex>)'
    """
    line = line.lower()
    for pattern, replacement in _VOLATILE:
        line = pattern.sub(replacement, line)
    return line.strip()


# Each tier's markers as a line holds them (no line breaks), worked out once, not per line.
_LINE_MARKERS = tuple(
    tuple(m.strip("\r\n") for m in markers if m.strip("\r\n")) for markers, _, _ in ERROR_TIERS
)


def _tier(line: str) -> int | None:
    """The strongest bounding tier whose marker ``line`` holds (0 strongest), or None."""
    lowered = None
    for tier, markers in enumerate(_LINE_MARKERS):
        if tier == LOWER_CASED:
            lowered = line.lower()
        searched = lowered if lowered is not None else line
        for marker in markers:
            if marker in searched:
                return tier
    return None


def pick_error_lines(
    lines: Sequence[str], is_normal: Callable[[str], bool] | None = None
) -> list[str]:
    """The lines that state the error, by the markers bounding uses, strongest tier first.

    The lines of the strongest tier present (a runner's or compiler's own failure
    line beats an incidental "error" word), the last ``MAX_ERROR_LINES`` of
    them; with no marker at all, the log's tail. With ``is_normal`` (the job's
    normal, ``core.normal``), lines the job's passing runs print too are left
    out first, unless every line is one of them.

    >>> pick_error_lines(["compiling", "warning: unused x", "src/a.c:3: error: y undeclared",
    ...                   "make: *** [all] Error 1"])
    ['src/a.c:3: error: y undeclared']
    """
    if is_normal is not None:
        # Only lines that could be picked are judged: masking every line costs ms.
        scanned = lines[-NORMAL_SCAN_LINES:]
        lines = [ln for ln in scanned if not is_normal(ln)] or scanned
    # A marker far above the end is incidental (a package named "html_sanitizer", prose
    # saying "failed"): markers count near the end of the log, bare words nearer still.
    lines = [ln[:MAX_LINE_CHARS] for ln in lines[-STRONG_WINDOW:]]
    # A wrapper line ("rake aborted!", "npm ERR! Test failed") marks where the error is,
    # not what it is: it counts only when nothing specific does, with the lines after it.
    generic = [GENERIC.search(ln) is not None for ln in lines]
    tiers = [None if g else _tier(ln) for ln, g in zip(lines, generic, strict=True)]
    weak_from = len(lines) - WEAK_WINDOW
    tiers = [None if t == LOWER_CASED and i < weak_from else t for i, t in enumerate(tiers)]
    found = [t for t in tiers if t is not None]
    if not found:
        if any(generic):
            last = max(i for i, g in enumerate(generic) if g)
            first = next(i for i, g in enumerate(generic) if g and i >= last - TAIL_LINES)
            around = lines[max(first - GENERIC_CONTEXT, 0) : last + 1 + GENERIC_CONTEXT]
            return list(dict.fromkeys(around))
        return list(dict.fromkeys(lines[-TAIL_LINES:]))
    best = max(min(found), 1) if min(found) == 0 else min(found)
    picked = [ln for ln, t in zip(lines, tiers, strict=True) if t is not None and t <= best]
    return list(dict.fromkeys(picked))[-MAX_ERROR_LINES:]


def scope_of(facts: dict[str, Any]) -> str:
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
    facts: dict[str, Any], is_normal: Callable[[str], bool] | None = None
) -> tuple[str, str]:
    """(sample line, basis) of a failure, from its (redacted) facts.

    ``is_normal``: the job's normal (``core.normal``); lines its passing runs
    print too are not picked unless nothing else is left.

    The basis is the normalized error text, after the failure's scope (its
    project) when the facts name one: groups never span two projects.
    """
    scope = scope_of(facts)
    lines = clean_lines(log_text(facts))
    if not lines:
        brief = ", ".join(
            f"{k}={v}" for k, v in sorted(facts.items()) if isinstance(v, str | int) and k != "job"
        )
        return f"(no log text) {brief}"[:300], with_scope(scope, normalize(brief)[:MAX_BASIS_CHARS])
    picked = pick_error_lines(lines, is_normal)
    specific = [ln for ln in picked if not GENERIC.search(ln)]
    sample = (specific or picked)[-1]  # nearest the end
    body = "\n".join(normalize(ln) for ln in (specific or picked))
    return sample, with_scope(scope, body[:MAX_BASIS_CHARS])


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

    def to_dict(self, with_ids: bool = True) -> dict[str, Any]:
        data: dict[str, Any] = {
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
