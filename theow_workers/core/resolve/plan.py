"""Choosing which rules to try for a failure, and in which order.

Order (DESIGN §3): the rules the caller named, in order; then rules sharing a
caller tag; then every other rule (when ``fallback``). Every candidate is
validated structurally, so a rule whose facts all hold is found whatever its
embedding rank: recall never depends on a top-K. Among validated rules of one
group the order is similarity weighted by track record.

Similarity is asked for only when it decides something (two or more rules of
a group validate, or the caller wants an explanation): embedding the failure
is the costliest step, and most failures validate one rule or none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from theow_client.jsontypes import JsonObject
from theow_workers.core.logs.normal import IsNormal
from theow_workers.core.logs.summary import LinePredicate, wrapper_predicate
from theow_workers.core.logs.text import (
    ANNOTATION_MARKS,
    LINE_STAMP,
    unwrap_annotations,
    without_stamps,
)
from theow_workers.core.ports import RuleStats
from theow_workers.core.rules.evidence import MAX_LINE_CHARS
from theow_workers.core.rules.matching import DEFAULT_REGEX_TIMEOUT, Match, evaluate
from theow_workers.core.rules.scanner import Scanner
from theow_workers.core.rules.schema import Rule
from theow_workers.core.testcases import with_tests_text

# names -> similarity in [0, 1]; computed lazily by the caller's index.
Similarity = Callable[[Sequence[str]], dict[str, float]]

NAMED, TAGGED, SEMANTIC = "named", "tag", "semantic"


@dataclass(frozen=True)
class Hints:
    """What the submitter said about where to look."""

    rules: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    fallback: bool = True
    max_retries: int = 3

    @classmethod
    def from_dict(cls, data: JsonObject | None) -> Hints:
        data = data or {}
        return cls(
            rules=tuple(str(r) for r in data.get("rules") or ()),
            tags=tuple(str(t) for t in data.get("tags") or ()),
            fallback=bool(data.get("fallback", True)),
            max_retries=max(1, int(data.get("max_retries") or 3)),
        )


@dataclass(frozen=True)
class RuleBook:
    """The rules a worker resolves with, and which of their actions are client-side."""

    rules: tuple[Rule, ...]
    version: str
    client_side: frozenset[str] = frozenset()
    _by_name: dict[str, Rule] = field(default_factory=dict, compare=False, repr=False)
    _scanner: list[Scanner] = field(default_factory=list, compare=False, repr=False)
    _wrapper: list[LinePredicate] = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name.update({r.name: r for r in self.rules})

    def get(self, name: str) -> Rule | None:
        return self._by_name.get(name)

    @property
    def scanner(self) -> Scanner:
        """All rules' patterns compiled for one pass, built on first use."""
        return self.build_scanner()

    def build_scanner(self, previous: Scanner | None = None) -> Scanner:
        """The scanner, built now if it is not, from ``previous``'s parts (the version this
        one replaces: only patterns none of its parts holds are compiled)."""
        if not self._scanner:
            self._scanner.append(Scanner(self.rules, previous=previous))
        return self._scanner[0]

    @property
    def is_wrapper(self) -> LinePredicate:
        """Whether a log line is a wrapper: one of the ``generic`` rules matches it."""
        if not self._wrapper:
            self._wrapper.append(wrapper_predicate(self.rules))
        return self._wrapper[0]


@dataclass(frozen=True)
class Candidate:
    rule: str
    source: str
    match: Match | None
    similarity: float | None = None
    score: float = 0.0
    missing_reason: str = ""

    @property
    def validated(self) -> bool:
        return self.match is not None and self.match.ok

    @property
    def reason(self) -> str:
        return self.match.reason if self.match is not None else self.missing_reason

    @property
    def generic(self) -> bool:
        return self.match is not None and self.match.rule.generic

    @property
    def normal(self) -> bool:
        """Its evidence is all in lines the job's passing runs print too."""
        evidence = self.match.evidence if self.match is not None else None
        return bool(evidence is not None and evidence.normal)

    @property
    def scoped(self) -> bool:
        """Its rule is kept to a project or job (``repo``/``job`` equals), and so applies here."""
        return self.match is not None and scoped(self.match.rule)

    @property
    def position(self) -> float:
        """Where the evidence sits in its fact: later is nearer the failure."""
        evidence = self.match.evidence if self.match is not None else None
        return evidence.position if evidence is not None else 0.0


@dataclass(frozen=True)
class Plan:
    attempts: tuple[Candidate, ...]  # validated, in the order to try them
    rejected: tuple[Candidate, ...]  # checked in full and did not validate, with the reason
    checked: int = 0  # rules considered, including those the scanner ruled out
    # The order fell to similarity and track records (rules tied on specificity,
    # evidence position and scope); otherwise it follows from the facts alone.
    scored: bool = False

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        return self.attempts + self.rejected

    @property
    def specific(self) -> tuple[Candidate, ...]:
        """The validated rules that name a cause, in order: a wrapper explains nothing."""
        return tuple(c for c in self.attempts if not c.generic)

    @property
    def wrapper(self) -> Candidate | None:
        """The first validated wrapper (``generic``) rule, when no specific rule validated.

        The failure is then *unexplained*: a step failed (``make: *** [all]
        Error 1``, ``rake aborted!``) and no rule knows why.
        """
        if self.specific:
            return None
        return next((c for c in self.attempts if c.generic), None)


def plan(
    book: RuleBook,
    facts: JsonObject,
    hints: Hints = Hints(),
    *,
    similarity: Similarity | None = None,
    stats: dict[str, RuleStats] | None = None,
    explain: bool = False,
    regex_timeout: float = DEFAULT_REGEX_TIMEOUT,
    is_normal: IsNormal | None = None,
) -> Plan:
    """Validate the candidate rules and order the ones that apply.

    One scan of the facts rules out every rule whose patterns do not occur;
    with ``explain`` every rule is checked in full, for its reason.
    Order within a group: specific before generic, then evidence nearer the
    end of its fact, then a rule scoped to the failure's project or job
    (``repo``/``job`` equals, as a taught rule is) before one that is not,
    then similarity weighted by track record.

    ``is_normal`` is the failed job's normal (:mod:`~theow_workers.core.logs.normal`):
    each validated rule's evidence is marked ``normal`` or new, and a rule
    whose evidence lines are all normal ranks below every rule with new
    evidence, whatever its group. Without it, nothing changes.
    """
    stats = stats or {}
    given = facts.get("log")
    facts = matching_facts(facts)
    missing: list[Candidate] = []
    named: list[Rule] = []
    for name in dict.fromkeys(hints.rules):
        rule = book.get(name)
        if rule is None:
            missing.append(Candidate(name, NAMED, None, missing_reason=f"no rule named {name!r}"))
        else:
            named.append(rule)
    hits = book.scanner.scan(facts)
    pool = book.rules if explain else book.scanner.candidates(hits)
    taken = {r.name for r in named}
    tags = set(hints.tags)
    tagged = [r for r in pool if r.name not in taken and tags & set(r.tags)]
    taken |= {r.name for r in tagged}
    rest = [r for r in pool if r.name not in taken] if hints.fallback else []
    groups = [(NAMED, named), (TAGGED, tagged), (SEMANTIC, rest)]

    matches = {
        rule.name: evaluate(
            rule,
            facts,
            regex_timeout=regex_timeout,
            client_side=book.client_side,
            hits=hits,
            is_wrapper=book.is_wrapper,
        )
        for _, rules in groups
        for rule in rules
    }
    if is_normal is not None:
        matches = {name: _mark(m, is_normal) if m.ok else m for name, m in matches.items()}
    if isinstance(given, str) and facts.get("log") is not given:
        printed = _as_printed(given, facts["log"])
        matches = {name: printed(m) if m.ok else m for name, m in matches.items()}
    validated = [m for m in matches.values() if m.ok]
    sims: dict[str, float] = {}
    scored = similarity is not None and not explain and _ties(validated)
    if similarity is not None:
        if explain:
            sims = similarity(list(matches))
        elif scored:
            sims = similarity([m.rule.name for m in validated])

    def candidate(rule: Rule, source: str) -> Candidate:
        sim = sims.get(rule.name)
        ratio = stats.get(rule.name, RuleStats()).smoothed_ratio
        score = (sim if sim is not None else 1.0) * ratio
        return Candidate(rule.name, source, matches[rule.name], sim, score)

    attempts: list[Candidate] = []
    rejected: list[Candidate] = list(missing)
    for source, rules in groups:
        members = [candidate(r, source) for r in rules]
        ok = [c for c in members if c.validated]
        if source != NAMED:
            ok.sort(key=lambda c: (c.generic, -c.position, not c.scoped, -c.score))
        attempts.extend(ok)
        rejected.extend(c for c in members if not c.validated)
    if is_normal is not None:
        # Stable: the order above holds within the new and within the normal ones.
        attempts.sort(key=lambda c: c.normal)
    rejected.sort(key=lambda c: c.similarity if c.similarity is not None else -1.0, reverse=True)
    if hints.fallback:
        checked = len(missing) + len(book.rules)
    else:
        checked = len(missing) + len(
            {r.name for r in book.rules if tags & set(r.tags)} | {r.name for r in named}
        )
    return Plan(tuple(attempts), tuple(rejected), checked, scored)


def _mark(match: Match, is_normal: IsNormal) -> Match:
    """``match`` with its evidence marked normal when every line it matched on is normal."""
    if match.evidence is None:
        return match
    lines = [_line_at(text, start, end) for _, text, start, end in match.captures.spans.values()]
    normal = all(is_normal(line) for line in lines if line.strip())
    return replace(match, evidence=replace(match.evidence, normal=normal))


def _as_printed(given: str, read: str) -> Callable[[Match], Match]:
    """A match whose evidence line is shown as the log printed it (its annotation mark kept),
    though the rule read it unwrapped (:func:`matching_facts`); its number is the same."""
    if given == read or not any(mark in given for mark in ANNOTATION_MARKS):
        return lambda match: match
    lines = without_stamps(given).split("\n")

    def printed(match: Match) -> Match:
        evidence = match.evidence
        if evidence is None or evidence.fact != "log" or not 0 < evidence.line <= len(lines):
            return match
        line = lines[evidence.line - 1].strip()
        if line == evidence.text or not line.endswith(evidence.text):
            return match
        return replace(match, evidence=replace(evidence, text=line[:MAX_LINE_CHARS]))

    return printed


def _line_at(text: str, start: int, end: int) -> str:
    """The whole line where the match ``text[start:end]`` begins (past leading newlines)."""
    while start < end and text[start] in "\r\n":
        start += 1
    begin = text.rfind("\n", 0, start) + 1
    stop = text.find("\n", start)
    return text[begin : stop if stop >= 0 else len(text)]


def _ties(validated: list[Match]) -> bool:
    """Whether specificity, evidence position and scope leave two validated rules level."""
    keys = [
        (m.rule.generic, m.evidence.position if m.evidence else 0.0, scoped(m.rule))
        for m in validated
    ]
    return len(keys) != len(set(keys))


def scoped(rule: Rule) -> bool:
    """Whether ``rule`` is kept to one project or job by a ``repo`` or ``job`` equals condition.

    Of two rules that explain the same line, the one a project's reviewers
    taught for that project says more about it than a library-wide one.
    """
    return any(c.fact in ("repo", "job") and "equals" in c.model_fields_set for c in rule.when)


def matching_facts(facts: JsonObject) -> JsonObject:
    """The facts rules see: a ``log``, without the time stamp a CI system puts on each line.

    ``theow-client run`` sends the interleaved ``log``; a submission that
    carries only the streams gets them joined, stdout first (their true
    interleaving is lost by then). GitHub Actions and Jenkins' timestamper
    prefix every line with an ISO time, and GitHub Actions may carry a tool's
    message inside an error annotation; rules are written for the tool's own
    text, so both are removed (line numbers stay those of the log). A ``tests``
    fact (a test report's object) is its text, one line per test (``core.testcases``).
    A log sent without a ``stderr`` (``theow-client run`` gives a command one
    pipe for both streams) is also the ``stderr`` that rules written to the
    library spec read (:data:`MERGED_INTO_LOG`).
    """
    facts = with_tests_text(facts)
    log = facts.get("log")
    if log is None:
        streams = [facts[k] for k in ("stdout", "stderr") if isinstance(facts.get(k), str)]
        streams = [s for s in streams if s]
        if not streams:
            return facts
        log = streams[0] if len(streams) == 1 else "\n".join(s.rstrip("\n") for s in streams)
    if isinstance(log, str) and LINE_STAMP.match(log.lstrip()[:64]):
        log = without_stamps(log)
    if isinstance(log, str):
        log = unwrap_annotations(log)
    if isinstance(log, str) and isinstance(facts.get("log"), str) and MERGED_INTO_LOG not in facts:
        return {**facts, "log": log, MERGED_INTO_LOG: log}
    return facts if log is facts.get("log") else {**facts, "log": log}


# The stream a log sent alone holds too: its lines are the log's (``pointing.in_sent_log``).
MERGED_INTO_LOG = "stderr"
