"""A job's normal: the lines its passing runs print too, learned as templates.

Most of a failed log is what the same job prints when it passes: set-up
banners, warnings everyone ignores, a ``bc: command not found`` from a
helper script, a ``curl: (22) ... 404`` a fallback handles. Those lines are
where broad rules fire falsely and where an error picker or an explorer
wastes its attention. A :class:`JobNormal` says, for one line of a failed
log, whether it is ``normal`` (also seen in the job's recent passing runs)
or ``new``.

Templates are mined Drain-style (He et al., ICWS 2017: lines grouped by
token count and first token, merged when most tokens agree, the differing
positions becoming ``<*>``) after masking what differs between runs
(times, durations, ids, hex, paths, numbers) exactly as the fingerprint
masks them (``core.logs.text.mask_volatile``). A line is normal when its masked form is a known template,
or fits a wildcard template that kept most of its words: a template that is
mostly ``<*>`` would call every error of that shape normal, so such
templates are not used for matching.

>>> normal = JobNormal.learn(["step 1 took 3s", "bc: command not found", "curl: (22) 404 for /a"])
>>> normal.is_normal("step 2 took 9s"), normal.is_normal("bc: command not found")
(True, True)
>>> normal.is_normal("error: cannot find symbol Foo")
False
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from theow_client.facts import PASSING_LIMITS, bound_facts, loads_facts
from theow_client.messages import PassingRun
from theow_workers.core.logs.summary import LOG_FACTS
from theow_workers.core.logs.text import LINE_STAMP, mask_volatile, strip_ansi

WILDCARD = "<*>"
MAX_TEMPLATES = 5000  # per job: a job's normal is bounded whatever it prints
MAX_TEMPLATE_CHARS = 300
SIMILAR = 0.6  # share of tokens two lines must agree on to share a template
MIN_KEPT_SHARE = 0.67  # a wildcard template matches only if most of it stayed literal
MIN_KEPT_TOKENS = 3
MAX_BUCKET = 50  # templates compared per (length, first token): bounded mining cost
_GITHUB_GROUP = re.compile(r"^##\[(?:group|endgroup|error|warning)\]")

# A predicate over raw lines: True for a line the job's passing runs print too.
IsNormal = Callable[[str], bool]


def mask(line: str) -> str:
    """The line as templates are kept: no colour codes, volatile parts masked, bounded."""
    text = LINE_STAMP.sub("", strip_ansi(line).strip())
    text = _GITHUB_GROUP.sub("", text)
    return mask_volatile(text)[:MAX_TEMPLATE_CHARS]


def run_lines(facts: dict[str, object]) -> list[str]:
    """Every line of a run's log-like facts (``log``, ``stderr``, ``stdout`` ...)."""
    lines: list[str] = []
    for name in LOG_FACTS:
        value = facts.get(name)
        if isinstance(value, str):
            lines.extend(value.splitlines())
    return lines


def passing_run(run: PassingRun) -> tuple[str, list[str]]:
    """(job, lines) of a passing run; FactsError or ValueError says what is wrong."""
    raw = loads_facts(run.facts_json) if run.facts_json is not None else run.facts
    facts, _ = bound_facts(raw, limits=PASSING_LIMITS)
    return run.job, run_lines(facts)


def mine(lines: Iterable[str], templates: Iterable[str] = ()) -> list[str]:
    """Templates for ``lines``, merged into the ``templates`` already known.

    Deterministic for the same input order; at most :data:`MAX_TEMPLATES`
    (the most recently seen kept when there are more).
    """
    return mine_run(lines, templates)[0]


def mine_run(lines: Iterable[str], templates: Iterable[str] = ()) -> tuple[list[str], set[str]]:
    """:func:`mine`, and which of the resulting templates ``lines`` matched.

    A template the new run did not print keeps its age, so a store can let it
    expire when the job stops printing it.
    """
    miner = _Miner()
    for template in templates:
        miner.add(template.split(" "))
    miner.seen = set()
    for line in lines:
        masked = mask(line)
        if masked:
            miner.add(masked.split(" "))
    kept = miner.templates()[-MAX_TEMPLATES:]
    return kept, miner.seen & set(kept)


@dataclass
class _Miner:
    # (token count, first token) -> templates as token lists, oldest first
    buckets: dict[tuple[int, str], list[list[str]]] = field(default_factory=dict)
    order: dict[str, None] = field(default_factory=dict)  # templates, least recent first
    seen: set[str] | None = None  # when set, the templates the lines added since then matched

    def add(self, tokens: list[str]) -> None:
        key = (len(tokens), tokens[0])
        bucket = self.buckets.setdefault(key, [])
        best, best_share = None, 0.0
        for template in bucket:
            same = sum(a == b for a, b in zip(template, tokens, strict=True))
            share = same / len(tokens)
            if share > best_share:
                best, best_share = template, share
        if best is not None and (best_share == 1.0 or (best_share >= SIMILAR and len(tokens) > 2)):
            old = " ".join(best)
            for i, token in enumerate(tokens):
                if best[i] != token:
                    best[i] = WILDCARD
            self.order.pop(old, None)
            self.order[" ".join(best)] = None
            if self.seen is not None:
                self.seen.discard(old)
                self.seen.add(" ".join(best))
            return
        if len(bucket) >= MAX_BUCKET:
            self.order.pop(" ".join(bucket.pop(0)), None)
        bucket.append(list(tokens))
        self.order[" ".join(tokens)] = None
        if self.seen is not None:
            self.seen.add(" ".join(tokens))

    def templates(self) -> list[str]:
        return list(self.order)


@dataclass(frozen=True)
class JobNormal:
    """What one job prints when it passes, as masked templates.

    ``exact`` answers most lines with one set lookup; the wildcard templates
    are indexed by (token count, first token), as Drain's tree is, so a line
    is compared with a handful of templates at most.
    """

    job: str
    exact: frozenset[str]
    wildcard: dict[tuple[int, str], tuple[tuple[str, ...], ...]]
    size: int
    digest: str = ""  # of the templates: a plan made with one normal is not reused with another

    @classmethod
    def from_templates(cls, templates: Sequence[str], job: str = "") -> JobNormal:
        exact: set[str] = set()
        wildcard: dict[tuple[int, str], list[tuple[str, ...]]] = {}
        for template in templates[-MAX_TEMPLATES:]:
            tokens = tuple(template.split(" "))
            holes = tokens.count(WILDCARD)
            if not holes:
                exact.add(template)
                continue
            kept = len(tokens) - holes
            if kept < MIN_KEPT_TOKENS or kept / len(tokens) < MIN_KEPT_SHARE:
                continue  # mostly holes: it would call any line of that shape normal
            wildcard.setdefault((len(tokens), tokens[0]), []).append(tokens)
        frozen = {key: tuple(value) for key, value in wildcard.items()}
        digest = hashlib.sha256("\n".join(templates).encode()).hexdigest()[:16]
        return cls(job, frozenset(exact), frozen, len(templates), digest)

    @classmethod
    def learn(cls, lines: Iterable[str], job: str = "") -> JobNormal:
        return cls.from_templates(mine(lines), job)

    def is_normal(self, line: str) -> bool:
        masked = mask(line)
        if not masked:
            return True  # a blank line says nothing new
        if masked in self.exact:
            return True
        tokens = masked.split(" ")
        for first in (tokens[0], WILDCARD):
            for template in self.wildcard.get((len(tokens), first), ()):
                if all(t in (WILDCARD, w) for t, w in zip(template, tokens, strict=True)):
                    return True
        return False

    def __bool__(self) -> bool:
        return bool(self.exact or self.wildcard)
