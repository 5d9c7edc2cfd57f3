"""What a failed log says, read once: the lines to look at and the text that names the cause.

:func:`summarize` reads a failure's log the one way every part of Theow reads
it: cleaned as a person reads it (``core.logs.text``: colour codes, time stamps
and CI boilerplate removed; each line keeps its number in the fact), each line
near the end judged for the error markers bounding uses (the client's
``ERROR_TIERS``, strongest first), for being a wrapper (a line a ``generic``
rule matches: ``make: *** [all] Error 1`` says where the error is, not what it
is) and for being the job's normal (printed by its passing runs too). The
:class:`ErrorSummary` holds the lines picked as the error, their normalized
text (``basis``: volatile parts masked) and a sample line; the fingerprint,
replay's groups, the explorer's prompt and a verdict's ``where`` lines come
from it.

>>> log = "compiling\\nsrc/a.c:3:1: error: expected ';'\\nmake: *** [all] Error 1\\n"
>>> summary = summarize({"log": log}, is_wrapper=lambda line: line.startswith("make: ***"))
>>> [(line.number, line.text) for line in summary.errors]
[(2, "src/a.c:3:1: error: expected ';'")]
>>> where_lines({"log": log}, is_wrapper=lambda line: line.startswith("make: ***"))[0]
Where(fact='log', line=2, text="src/a.c:3:1: error: expected ';'")
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import regex

from theow_client.facts import ERROR_TIERS, LOWER_CASED
from theow_client.jsontypes import JsonObject
from theow_client.verdict import Where
from theow_workers.core.logs.steps import NO_STEPS, Steps
from theow_workers.core.logs.text import ANNOTATION, mask_volatile, numbered_lines
from theow_workers.core.rules.evidence import Evidence
from theow_workers.core.rules.matching import compiled

if TYPE_CHECKING:
    from theow_workers.core.rules.schema import Rule

# Facts that hold a log, in the order one is taken as the failure's log. The
# resolver matches ``log`` (``core.resolve.plan.matching_facts``), so it comes first.
LOG_FACTS = ("log", "stderr", "output", "stdout", "error", "traceback", "exception")
MAX_BASIS_CHARS = 2000
MAX_ERROR_LINES = 8
TAIL_LINES = 6
WRAPPER_CONTEXT = 2  # lines around a wrapper kept when nothing else marks the error
STRONG_WINDOW = 80  # lines from the end where an error marker counts
WEAK_WINDOW = 30  # ... and where a weak marker (a bare word) counts
NORMAL_SCAN_LINES = 4 * STRONG_WINDOW  # lines judged against the job's normal
MAX_LINE_CHARS = 300
WHERE_LINES = 3
# A banner names a section ("==== FAILURES ====", "____ test_add ____"), never the error.
BANNER = re.compile(r"^([=_\-*#~+])\1{2,}(?:.*[=_\-*#~+]{3,})?\s*$")
# A line a CI system or runner prints to say a step failed, without saying why.
EXIT_NOTE = re.compile(
    r"exit (?:code|status)|\bexited with (?:code )?\d|\bfailed at the \S+ script\b|"
    r"^(?:error: )?(?:command|process|script) (?:failed|exited|returned)",
    re.IGNORECASE,
)
# Where a compiler or linter says what is wrong: "src/a.c:3:1: ...", "./x.py:8:9: E128 ...".
DIAGNOSTIC = re.compile(r"^[\w./\\-]+\.\w+:\d+(?::\d+)?:? ")
DIAGNOSTIC_TIER = 2
WHERE_READ = 160  # lines from the end the lines to look at are chosen from
MAX_WHERE_READ = 5000  # ... reaching back to a failed step that later steps' output follows
# A stack frame in the same shape (Elixir's and Erlang's ``check.exs:9: Mod.fun/1``): a place
# the error passed through, not a tool's message about the code.
FRAME = re.compile(r"^[\w./\\-]+\.\w+:\d+:? (?:anonymous fn/\d+ in )?[\w.:!?']+/\d+$")

# A line that tells how to see more, not what went wrong.
HINT = re.compile(
    r"\bfor (?:more )?details\b|--(?:verbose|trace|stacktrace|info|debug)\b|"
    r"complete log of this run|additional logging output above|not a problem with npm",
    re.IGNORECASE,
)

# A line that says where a run was, not what went wrong: a traceback's header (its frames
# and its error follow) and a progress banner (``step 1/3: fetch widgets``, ``[2/4] Linking``).
TRACEBACK_HEADER = re.compile(r"^Traceback \(most recent call last\):?$")
PROGRESS = re.compile(
    r"^(?:\[?(?:step|stage|phase|task)\s+\d+\s*(?:/|of)\s*\d+\b|\[\d+/\d+\]\s)", re.I
)

LinePredicate = Callable[[str], bool]

# Each tier's markers as a stripped line holds them, worked out once: a marker that
# begins with a line break ("\n1) ") holds only at the start of a line.
_LINE_MARKERS = tuple(
    (
        tuple(m for m in markers if m[:1] not in "\r\n"),
        tuple(dict.fromkeys(m.lstrip("\r\n ") for m in markers if m[:1] in "\r\n")),
    )
    for markers, _, _ in ERROR_TIERS
)
# Every marker lower-cased, those another one holds left out: a line without any is
# told in one pass over these (most lines of a log), before the tiers are searched.
_LOWERED = {m.lower() for inside, _ in _LINE_MARKERS for m in inside}
_ANY_MARKER = tuple(m for m in _LOWERED if not any(o != m and o in m for o in _LOWERED))
_ANY_START = tuple({m.lower() for _, starting in _LINE_MARKERS for m in starting})


@dataclass(frozen=True)
class Line:
    """One cleaned line of the log: its number in the fact and what the reading found."""

    number: int  # 1-based, in the fact as given
    text: str  # as a person reads it: cleaned, stripped, bounded
    tier: int | None = None  # strongest ERROR_TIERS tier whose marker it holds (0 strongest)
    wrapper: bool = False  # a generic rule matches it: it says a step failed, not why
    normal: bool = False  # the job's passing runs print it too


@dataclass(frozen=True)
class ErrorSummary:
    """One failure's log, read once (see the module docstring)."""

    fact: str  # the fact read as the log ("" when the failure has none)
    lines: tuple[Line, ...]  # the last cleaned lines (see ``read``), judged
    marked: tuple[Line, ...]  # the lines whose error marker counts (near the end, not poor)
    errors: tuple[Line, ...]  # the lines picked as stating the error, in log order
    basis: str  # the picked lines, volatile parts masked: what "same cause" compares
    sample: str  # one picked line to show for the failure (nearest the end)

    @property
    def wrappers(self) -> tuple[Line, ...]:
        return tuple(line for line in self.lines if line.wrapper)

    @property
    def normal(self) -> tuple[Line, ...]:
        return tuple(line for line in self.lines if line.normal)

    def by_tier(self) -> dict[int, tuple[Line, ...]]:
        """The lines whose marker counts, by tier (strongest first), each tier in log order."""
        tiers: dict[int, list[Line]] = {}
        for line in self.marked:
            if line.tier is not None:
                tiers.setdefault(line.tier, []).append(line)
        return {tier: tuple(tiers[tier]) for tier in sorted(tiers)}


def log_fact(facts: JsonObject) -> tuple[str, str]:
    """(name, text) of the failure's log: a well-known log fact, else the longest multi-line text."""
    for name in LOG_FACTS:
        value = facts.get(name)
        if isinstance(value, str) and value.strip():
            return name, value
    texts = [(k, v) for k, v in facts.items() if isinstance(v, str) and "\n" in v.strip()]
    return max(texts, key=lambda kv: len(kv[1]), default=("", ""))


@functools.lru_cache(maxsize=8192)
def tier_of(line: str) -> int | None:
    """The strongest bounding tier whose marker ``line`` holds (0 strongest), or None.

    Remembered by line: a failure's log is judged twice (its fingerprint, its
    ``where`` lines), and a fleet's logs repeat most of their lines.

    >>> tier_of("FAIL: test_add"), tier_of("could not connect"), tier_of("all good")
    (1, 3, None)
    >>> tier_of("1) test_add"), tier_of("Setting up libc (2.7-1) ..."), tier_of("ERLC gen.beam")
    (0, None, None)
    >>> tier_of("beam_ssa.erl:127: import lists:umerge/1 is unused")
    2
    """
    lowered = line.lower()
    if not lowered.startswith(_ANY_START) and not any(m in lowered for m in _ANY_MARKER):
        return DIAGNOSTIC_TIER if _diagnostic(line) else None
    for tier, (inside, starting) in enumerate(_LINE_MARKERS):
        searched = lowered if tier == LOWER_CASED else line
        # Plain substrings: a regex alternation of the markers is several times slower.
        if searched.startswith(starting) or any(marker in searched for marker in inside):
            return tier
        if tier + 1 == DIAGNOSTIC_TIER and _diagnostic(line):
            return DIAGNOSTIC_TIER  # a compiler's or linter's own line, marker or not
    return None


def _diagnostic(line: str) -> bool:
    """A compiler's or linter's ``path:line[:col]: message`` line, not a stack frame.

    >>> _diagnostic("src/a.c:3:1: expected ';'"), _diagnostic("check.exs:9: Awesome.Order.check/1")
    (True, False)
    """
    return DIAGNOSTIC.match(line) is not None and FRAME.match(line) is None


def summarize(
    facts: JsonObject,
    *,
    is_normal: LinePredicate | None = None,
    is_wrapper: LinePredicate | None = None,
    read: int | None = None,
) -> ErrorSummary:
    """The failure's log read once: its lines judged, its error lines picked.

    ``read``: how many lines from the end to read and judge; by default what
    the picker needs (``STRONG_WINDOW``, or ``NORMAL_SCAN_LINES`` with the
    job's normal, whose lines do not count towards the window). Reading more
    (:func:`where_lines` does) changes nothing picked.

    A marker counts near the end of the log (a package named "html_sanitizer"
    far above is incidental): in the last ``STRONG_WINDOW`` lines, a bare word
    in the last ``WEAK_WINDOW``; lines the job's normal prints are not counted
    in those windows. Wrappers, banners, exit notes and hints never count.
    Picked: the lines of the strongest tier that counts (a runner's or
    compiler's own failure line beats an incidental "error" word), the last
    ``MAX_ERROR_LINES`` of them; lines the job's normal prints only when
    every line is one. With no marker at all, the lines around the last
    wrapper, else the log's tail.
    """
    fact, text = log_fact(facts)
    if read is None:
        read = STRONG_WINDOW if is_normal is None else NORMAL_SCAN_LINES
    numbered = numbered_lines(text, max(read, STRONG_WINDOW)) if text else []
    if not numbered:
        brief = ", ".join(
            f"{k}={v}" for k, v in sorted(facts.items()) if isinstance(v, str | int) and k != "job"
        )
        return ErrorSummary(
            fact,
            (),
            (),
            (),
            mask_volatile(brief)[:MAX_BASIS_CHARS],
            f"(no log text) {brief}"[:MAX_LINE_CHARS],
        )
    lines = tuple(_judged(number, line, is_normal, is_wrapper) for number, line in numbered)
    new = [line for line in lines if not line.normal] or list(lines)
    window = new[-STRONG_WINDOW:]
    marked = _marked(lines, window)
    inside = {id(line) for line in window}
    errors = _pick(window, [line for line in marked if id(line) in inside])
    telling = [line for line in errors if not _poor(line)] or errors
    basis = "\n".join(mask_volatile(line.text) for line in telling)[:MAX_BASIS_CHARS]
    return ErrorSummary(fact, lines, tuple(marked), tuple(errors), basis, telling[-1].text)


def _judged(
    number: int, text: str, is_normal: LinePredicate | None, is_wrapper: LinePredicate | None
) -> Line:
    text = text[:MAX_LINE_CHARS]
    tier = tier_of(text)
    return Line(
        number,
        text,
        tier,
        # Only a marked line could be picked: a wrapper without a marker changes nothing.
        # A CI system's annotation ("##[error]…") is markup: its message decides.
        wrapper=tier is not None
        and is_wrapper is not None
        and is_wrapper(text)
        and (ANNOTATION.match(text) is None or is_wrapper(ANNOTATION.sub("", text))),
        normal=is_normal is not None and is_normal(text),
    )


def _poor(line: Line) -> bool:
    """A line that says a step failed, names a section or tells how to see more: not why."""
    text = line.text
    return line.wrapper or bool(BANNER.match(text) or EXIT_NOTE.search(text) or HINT.search(text))


def _marked(lines: tuple[Line, ...], window: list[Line]) -> list[Line]:
    """The lines whose marker counts, in log order: in the window, or normal lines beside it."""
    if not window:
        return []
    strong_from = window[0].number
    weak_from = window[-WEAK_WINDOW:][0].number
    return [
        line
        for line in lines
        if line.tier is not None
        and line.number >= (weak_from if line.tier == LOWER_CASED else strong_from)
        and not _poor(line)
    ]


def _pick(window: list[Line], marked: list[Line]) -> list[Line]:
    if not marked:
        poor = [i for i, line in enumerate(window) if line.wrapper or EXIT_NOTE.search(line.text)]
        if poor:
            last = poor[-1]
            first = next(i for i in poor if i >= last - TAIL_LINES)
            return _unique(window[max(first - WRAPPER_CONTEXT, 0) : last + 1 + WRAPPER_CONTEXT])
        return _unique(window[-TAIL_LINES:])
    # A runner's "There were 2 failures:" heads its list: the list's own lines come with it.
    best = max(min(line.tier or 0 for line in marked), 1)
    return _unique(line for line in marked if (line.tier or 0) <= best)[-MAX_ERROR_LINES:]


def _unique(lines: Iterable[Line]) -> list[Line]:
    """Lines with the same text once, the first kept."""
    seen: dict[str, Line] = {}
    for line in lines:
        seen.setdefault(line.text, line)
    return list(seen.values())


def where_lines(
    facts: JsonObject,
    evidence: Evidence | None = None,
    *,
    is_normal: LinePredicate | None = None,
    is_wrapper: LinePredicate | None = None,
    limit: int = WHERE_LINES,
) -> list[Where]:
    """Up to ``limit`` lines to look at, most telling first.

    The chosen specific rule's ``evidence`` first (past a wrapper line it
    starts with); then the marked lines by tier, strongest first, the nearest
    line of each of the two strongest tiers before the others (a runner's
    failure line, then the message under it); then the log's last lines.
    Wrappers, banners, exit notes, hints, a traceback's header and a progress
    banner never; lines the job's normal prints, and lines of steps the CI
    system says passed (``core.logs.steps``: Travis goes on with the commands
    after a failed one), after every other one. Line numbers are 1-based in the
    fact as given.
    """
    _, text = log_fact(facts)
    steps = Steps.read(text)
    read = WHERE_READ
    if steps.failed_end is not None:  # the failed step's own lines, however much followed it
        after = text.count("\n") + 1 - steps.failed_end
        read = min(max(read, after + WHERE_READ), MAX_WHERE_READ)
    summary = summarize(facts, is_normal=is_normal, is_wrapper=is_wrapper, read=read)
    found: list[Where] = []
    if evidence is not None:
        found.append(_telling(evidence, is_wrapper))
    shown = {(w.fact, w.line) for w in found}
    for line in _candidates(summary, limit, steps):
        if len(found) >= limit:
            break
        if (summary.fact, line.number) not in shown:
            found.append(Where(summary.fact, line.number, line.text))
            shown.add((summary.fact, line.number))
    return found[:limit]


def _filler(line: Line) -> bool:
    """A traceback's header, or a progress banner that names no error: never a line to look at.

    >>> _filler(Line(1, "step 1/3: fetch widgets")), _filler(Line(2, "step 2/3: build failed", 3))
    (True, False)
    """
    if TRACEBACK_HEADER.match(line.text):
        return True
    return line.tier is None and PROGRESS.match(line.text) is not None


def _candidates(
    summary: ErrorSummary, limit: int = WHERE_LINES, steps: Steps = NO_STEPS
) -> list[Line]:
    """The summary's lines in the order :func:`where_lines` offers them (enough for ``limit``)."""

    def aside(line: Line) -> bool:  # printed by the passing runs, or by a step that passed
        return line.normal or steps.passed(line.number)

    counted = {id(line) for line in summary.marked}
    # A runner's or compiler's own line counts anywhere in the lines read, a bare word near the end.
    marked = [
        line
        for line in summary.lines
        if (
            id(line) in counted
            or (line.tier is not None and line.tier < LOWER_CASED and not _poor(line))
        )
        and not _filler(line)
    ]
    tiers: dict[int, list[Line]] = {}
    for line in reversed(marked):
        tiers.setdefault(line.tier or 0, []).append(line)
    ordered = [tiers[tier] for tier in sorted(tiers)]
    heads = [lines[0] for lines in ordered[:2]]
    rest = [line for lines in ordered for line in lines if all(line is not h for h in heads)]
    # The log's last lines, new and aside: no more of each than ``limit`` lines to show
    # can take, after the marked ones (fewer than ``limit`` when any tail line is reached)
    # and the evidence, which the tail may repeat. Judging all lines read costs ms.
    tail: list[Line] = []
    wanted = 2 * limit + 1
    taken = {False: 0, True: 0}
    for line in reversed(summary.lines):
        if min(taken.values()) >= wanted:
            break
        if taken[aside(line)] < wanted and not _poor(line) and not _filler(line):
            tail.append(line)
            taken[aside(line)] += 1
    candidates = heads + rest + tail
    return sorted(candidates, key=aside)  # stable: new lines first


def _telling(evidence: Evidence, is_wrapper: LinePredicate | None) -> Where:
    """The evidence's line, or, when that is a wrapper, the first line of the match that is not."""
    if is_wrapper is not None and is_wrapper(evidence.text):
        lines = evidence.matched.lstrip("\r\n").split("\n")
        for offset, line in enumerate(lines[1:], 1):
            text = line.strip()
            if text and not is_wrapper(text):
                return Where(evidence.fact, evidence.line + offset, text[:MAX_LINE_CHARS])
    return Where(evidence.fact, evidence.line, evidence.text)


def wrapper_predicate(rules: Iterable[Rule]) -> LinePredicate:
    """Whether a line is a wrapper: a ``generic`` rule's pattern matches it, alone or as its start.

    A wrapper pattern may go on past its line (``rake aborted!`` then the
    message): a line counts when it matches whole, or when it is the start of
    a match that goes on to the next line.

    >>> from theow_workers.core.rules.schema import Rule
    >>> rake = Rule.model_validate({"name": "rake", "mode": "track", "generic": True,
    ...     "when": [{"fact": "log", "regex": "rake aborted!\\\\n(?P<m>[^\\\\n]+)"}]})
    >>> is_wrapper = wrapper_predicate([rake])
    >>> is_wrapper("rake aborted!"), is_wrapper("No Rakefile found")
    (True, False)
    """
    patterns = []
    for rule in rules:
        if not getattr(rule, "generic", False):
            continue
        for condition in rule.when:
            pattern = getattr(condition, "regex", None)
            if pattern:
                try:
                    patterns.append(compiled(pattern))
                except regex.error:
                    continue  # a rule that does not compile never validates either

    @functools.lru_cache(maxsize=4096)
    def is_wrapper(line: str) -> bool:
        text = line + "\n"
        for pattern in patterns:
            found = pattern.search(text, partial=True)
            # A partial match runs to the end of ``text``: it must hold some of the line.
            if found is not None and found.start() < len(line):
                return True
        return False

    return is_wrapper
