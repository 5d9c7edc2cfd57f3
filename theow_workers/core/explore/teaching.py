"""Teaching by pointing: the lines a person marks as why a build failed, made into a rule.

A reviewer sees in seconds which lines explain a failure; writing a general,
safe regex with examples is what takes them half an hour. :func:`synthesize`
does that part: from a failure's facts and a span of its log's lines it picks
the telling line (not a wrapper's, not one the job's passing runs print, not a
banner, a hint or a stack frame), generalizes what differs between runs of one
cause (numbers, hashes, times, durations, paths, URLs, quoted names: the
volatile parts :func:`~theow_workers.core.logs.text.mask_volatile` masks) into
character classes, names the subject (the first file or path ``file``, the
first quoted name ``name``, a URL ``url``), keeps the message's words literal
(so Hyperscan's one pass stays cheap), scopes the rule to the failure's
``repo`` or ``job`` when the facts have one, and takes ``examples`` from the
selected lines and ``counter_examples`` from the lines around them and the
job's normal. The draft must match its own failure with its evidence inside
the span and pass the checks ``theow rules check`` runs (examples, scanner,
flag reading, no other specific rule winning its examples or it winning
theirs); a line whose rule does not is passed over for the next.

A taught rule is a rule file like any other: tagged ``taught``, mode
``track`` unless told, its ``notes`` saying where it was taught and by whom.

>>> log = "make all\\nsrc/x.c:12:3: frobnicate failed: bad widget 'w7'\\nmake: *** [all] Error 1\\n"
>>> from theow_workers.core.rules.matching import evaluate
>>> taught = synthesize({"log": log, "repo": "acme/app"}, 2, 3,
...                     is_wrapper=lambda line: line.startswith("make: ***"))
>>> taught.line, taught.rule.when[0].equals
(2, 'acme/app')
>>> later = "cc -c src/y/z.c\\nsrc/y/z.c:7:1: frobnicate failed: bad widget 'q9'\\n"
>>> sorted(evaluate(taught.rule, {"log": later, "repo": "acme/app"}).captures.named.items())
[('file', 'src/y/z.c'), ('name', 'q9')]
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import regex
import yaml

from theow_client.jsontypes import JsonObject
from theow_workers.core.logs.summary import (
    BANNER,
    EXIT_NOTE,
    FRAME,
    HINT,
    STRONG_WINDOW,
    summarize,
    tier_of,
)
from theow_workers.core.logs.text import ANNOTATION, LINE_STAMP, numbered_lines, strip_ansi
from theow_workers.core.resolve.confusion import rule_confusions
from theow_workers.core.resolve.plan import RuleBook, matching_facts
from theow_workers.core.rules.examples import example_problems
from theow_workers.core.rules.generalize import WORD, Draft, draft_pattern
from theow_workers.core.rules.matching import evaluate
from theow_workers.core.rules.schema import NAME_PATTERN, Mode, Rule, RuleError, parse_rule

LinePredicate = Callable[[str], bool]
SCOPES = ("auto", "repo", "job", "global")
TAUGHT_TAG = "taught"
MAX_SPAN = 400  # lines a person may select: a teaching is a message, not a log
MAX_EXAMPLE_CHARS = 400
MAX_EXAMPLES = 4
MAX_COUNTER_EXAMPLES = 4
MAX_NAME = 60
ON_NORMAL = "it matches a line the job's passing runs print"
PLAIN_SPAN = 30  # a longer selection (a whole step) is taught from its marked lines near its end

_STOP = frozenset(
    {
        "a",
        "an",
        "the",
        "and",
        "or",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "by",
        "with",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "it",
        "this",
        "that",
        "from",
        "as",
        "please",
        "use",
        "you",
        "your",
    }
)
_VAGUE = frozenset({"error", "err", "fatal", "failed", "failure", "fail", "warning"})
# A command line echoed before it runs (npm's "> eslint --fix .", a shell's "+ make -j4").
_COMMAND_ECHO = re.compile(r"^[>+$#]\s+[\w./@:-]+(?:\s+\S+)*?\s--?[A-Za-z][\w-]*")
# A line that says where an error passed through, not what it is.
_TRACE = re.compile(
    r"^(?:at |File \"|from |\(\w+\) |#\d+ |in |called from |\.\.\.)|^\s*\^+\s*$"
    r"|^\S+:\d+:in [`'][^`'\n]*'$"  # Ruby's "lib/x.rb:12:in `run'", with no message after it
)


class TeachError(ValueError):
    """No rule can be made from the selected lines; the message says why."""


@dataclass(frozen=True)
class Taught:
    """A synthesized rule, with the line it was made from and what was tried before it."""

    rule: Rule
    rule_yaml: str
    line: int  # the telling line, 1-based in the log
    text: str  # as a person reads it
    passed_over: tuple[str, ...] = ()  # "line N: why" for lines tried first
    scope: str = "global"
    replaces: tuple[str, ...] = ()  # narrower rules (of ``replaceable``) this one covers


# A line that informs or warns: printed by passing runs as much as by failed ones.
_LEVEL = re.compile(
    r"^\W*(?:[\w.-]+\s*\|\s*)?(?:[\d/:.,T-]{8,}\s+)*(?:\[[^\]\n]*\]\s*)?"
    r"(?:info|debug|trace|notice|verbose|note|warn|warning)\b",
    re.IGNORECASE,
)  # the tool's own judgement ("updater | 2025/03/10 22:20:01 INFO ..."), whatever words follow
_INFORMATIONAL = re.compile(r"warn(?:ing)?s?\b", re.IGNORECASE)  # "DeprecationWarning" too
_FAILING = re.compile(r"\b(?:error|errors|fail|failed|failure|fatal|panic)\b", re.IGNORECASE)
# GitHub Actions echoes a step's definition (its script, `with:` and `env:`) in a group
# before the step runs: configuration, the same in passing runs, never why it failed.
_STEP_ECHO = ("##[group]Run ", "##[endgroup]")


@dataclass
class _Span:
    log: str
    lines: list[tuple[int, str, str]] = field(
        default_factory=list
    )  # (number, cleaned, raw segment)
    echo: set[int] = field(default_factory=set)  # line numbers of a step's definition echoed


def synthesize(
    facts: JsonObject,
    first: int,
    last: int,
    *,
    is_wrapper: LinePredicate | None = None,
    is_normal: LinePredicate | None = None,
    normal_lines: Sequence[str] = (),
    scope: str = "auto",
    mode: str = "track",
    name: str | None = None,
    taken: frozenset[str] | set[str] = frozenset(),
    book: RuleBook | None = None,
    origin: str = "",
    replaceable: frozenset[str] | set[str] = frozenset(),
) -> Taught:
    """The rule a reviewer would write for lines ``first``..``last`` of the failure's log.

    ``is_wrapper`` and ``is_normal`` judge lines as the resolver does (the
    book's wrappers, the job's normal); ``normal_lines`` (the job's passing
    output, when known) become counter-examples the rule must not match.
    ``book`` is the library the rule joins: no rule of it may win the new
    rule's examples, nor the new rule theirs. ``taken`` names it must not
    take. ``origin`` goes into the rule's notes ("failure X lines A-B, by Y").
    ``replaceable``: rules the caller would retire for a wider one (earlier
    taught rules of the same cause): the new rule may win their examples, and
    ``Taught.replaces`` names them.
    Raises TeachError when no selected line makes a rule that passes.
    """
    if scope not in SCOPES:
        raise TeachError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
    if first < 1 or last < first:
        raise TeachError(f"lines {first}-{last}: give the first and the last line, 1-based")
    if last - first >= MAX_SPAN:
        raise TeachError(
            f"lines {first}-{last}: select at most {MAX_SPAN} lines, the ones that say why"
        )
    facts = matching_facts(facts)
    log = facts.get("log")
    if not isinstance(log, str) or not log.strip():
        raise TeachError("the failure has no log to teach from")
    span = _span(log, first, last)
    if not span.lines:
        raise TeachError(
            f"lines {first}-{last} hold no text (the log has {log.count(chr(10)) + 1} lines)"
        )
    conditions, scope_used = _scope(facts, scope)
    tried: list[str] = []
    for number, text, raw in _telling(span, is_wrapper, is_normal, tried):
        for level in (2, 1, 0):
            draft = draft_pattern(raw, level)
            if draft is None:
                tried.append(f"line {number}: too little literal text to recognise it by")
                break
            problem, taught = _try(
                draft,
                facts,
                span,
                number,
                text,
                conditions,
                scope_used,
                normal_lines=normal_lines,
                mode=mode,
                name=name,
                taken=taken,
                book=book,
                is_wrapper=is_wrapper,
                origin=origin or f"lines {first}-{last}",
                passed_over=tuple(tried),
                replaceable=replaceable,
            )
            if taught is not None:
                return taught
            tried.append(f"line {number} (generalized {level}): {problem}")
            if problem == ON_NORMAL:
                break  # a more literal copy of a line the passing runs print is no better
    why = "; ".join(tried[-4:]) or "every selected line is a wrapper, a banner or the job's normal"
    raise TeachError(f"no rule made from lines {first}-{last}: {why}")


def _span(log: str, first: int, last: int) -> _Span:
    """The selected lines as a person reads them, each with the raw text a regex sees."""
    physical = log.split("\n")
    span = _Span(log, echo=_echoed(physical, last))
    for number, text in numbered_lines(log):
        if number < first:
            continue
        if number > last:
            break
        span.lines.append((number, text, _raw_segment(physical[number - 1], text)))
    return span


def _echoed(physical: list[str], last: int) -> set[int]:
    """Line numbers (1-based, up to ``last``) inside GitHub Actions' echo of a step's definition."""
    echoed: set[int] = set()
    inside = False
    for number, line in enumerate(physical[:last], start=1):
        text = LINE_STAMP.sub("", line.lstrip("\ufeff")).lstrip()
        if text.startswith(_STEP_ECHO[0]):
            inside = True
        elif text.startswith(_STEP_ECHO[1]):
            inside = False
        elif inside:
            echoed.add(number)
    return echoed


def _raw_segment(line: str, text: str) -> str:
    """The part of a raw log line (colour codes kept) that reads as ``text``."""
    for segment in line.replace("\r\n", "\n").split("\r"):
        cleaned = LINE_STAMP.sub("", strip_ansi(segment)).strip()
        if cleaned == text:
            return segment.rstrip("\n")
    return line.rstrip("\r")


def _telling(
    span: _Span, is_wrapper: LinePredicate | None, is_normal: LinePredicate | None, tried: list[str]
) -> list[tuple[int, str, str]]:
    """The span's lines that could say why, most telling first.

    An error marker's tier first (a runner's or compiler's own line before a
    bare "error" word); among equals, the line stating more of the message
    (up to a point), then the first.
    """
    ranked = []
    for number, text, raw in span.lines:
        message = ANNOTATION.sub("", text)
        if is_wrapper is not None and is_wrapper(text):
            tried.append(f"line {number}: a wrapper (says a step failed, not why)")
            continue
        if is_normal is not None and is_normal(text):
            tried.append(f"line {number}: the job's passing runs print it too")
            continue
        if BANNER.match(message) or EXIT_NOTE.search(message) or HINT.search(message):
            tried.append(f"line {number}: a banner, an exit note or a hint")
            continue
        if FRAME.match(message) or _TRACE.match(message):
            tried.append(f"line {number}: a stack frame")
            continue
        if _COMMAND_ECHO.match(message):
            tried.append(f"line {number}: a command echoed before it ran")
            continue
        if number in span.echo:
            tried.append(f"line {number}: the step's definition, echoed before it ran")
            continue
        tier = tier_of(message)
        if _LEVEL.match(message) or (
            _INFORMATIONAL.search(message) and not _FAILING.search(_INFORMATIONAL.sub("", message))
        ):
            tier = None  # a warning or a note is no error marker
        draft = draft_pattern(raw)
        if draft is None:
            tried.append(f"line {number}: too little literal text to recognise it by")
            continue
        # The message's own words, not its paths and names, say how telling a line is.
        ranked.append(
            ((9 if tier is None else tier), -min(draft.letters, 24) // 8, number, text, raw)
        )
    if len(span.lines) > PLAIN_SPAN:
        # A long selection (a whole step) is read as a failed log is read: its error lines
        # near its end (the summary's pick) first, nearest the end first.
        picked = _picked(span, is_wrapper, is_normal)
        ranked.sort(key=lambda r: (r[2] not in picked, r[0], r[1], -r[2]))
    else:
        ranked.sort(key=lambda r: r[:3])  # a short one states its error first
    if len(span.lines) > PLAIN_SPAN:
        # In a long selection (a whole step) the line that says why carries an error marker;
        # its other lines are what the step prints every time, and no rule is made from them.
        # Far above its end, a step prints what it prints every time ("must be built because
        # ... the last one failed"): its last lines are where a failure is stated.
        near = {n for n, _, _ in span.lines[-STRONG_WINDOW:]}
        ranked = [r for r in ranked if r[0] < 9 and r[2] in near]
        if not ranked:
            tried.append(
                f"no line near the end of a selection of {len(span.lines)} lines carries an error marker: select the lines that say why"
            )
    return [(number, text, raw) for *_, number, text, raw in ranked]


def _picked(
    span: _Span, is_wrapper: LinePredicate | None, is_normal: LinePredicate | None
) -> set[int]:
    """Line numbers of the span's error lines, as :func:`~theow_workers.core.logs.summary.summarize` picks them."""
    first, last = span.lines[0][0], span.lines[-1][0]
    text = "\n".join(span.log.split("\n")[first - 1 : last])
    summary = summarize({"log": text}, is_wrapper=is_wrapper, is_normal=is_normal)
    return {first + line.number - 1 for line in summary.errors}


def _scope(facts: JsonObject, scope: str) -> tuple[list[JsonObject], str]:
    """The conditions that keep a rule to the failure's project or job, and the scope used."""
    from theow_client.job import job_fact

    values = {"repo": facts.get("repo"), "job": job_fact(facts)}
    order = ("repo", "job") if scope == "auto" else ((scope,) if scope != "global" else ())
    for key in order:
        value = values.get(key)
        if isinstance(value, str) and value.strip():
            return [{"fact": key, "equals": value}], key
        if scope != "auto":
            raise TeachError(f"scope {scope}: the failure has no {key!r} fact")
    return [], "global"


def _try(
    draft: Draft,
    facts: JsonObject,
    span: _Span,
    number: int,
    text: str,
    conditions: list[JsonObject],
    scope: str,
    *,
    normal_lines: Sequence[str],
    mode: str,
    name: str | None,
    taken: frozenset[str] | set[str],
    book: RuleBook | None,
    is_wrapper: LinePredicate | None,
    origin: str,
    passed_over: tuple[str, ...],
    replaceable: frozenset[str] | set[str] = frozenset(),
) -> tuple[str, Taught | None]:
    """(why not, None) or ("", the rule) for one draft pattern."""
    try:
        compiled = regex.compile(draft.pattern, regex.MULTILINE | regex.DOTALL)
    except regex.error as exc:  # pragma: no cover - every token is escaped or a fixed class
        return f"pattern does not compile: {exc}", None
    selected = [raw for n, _, raw in span.lines if n >= number]
    examples = _bounded([raw for raw in selected if compiled.search(raw)])[:MAX_EXAMPLES]
    if not examples:
        return "the pattern does not match its own line", None
    if any(compiled.search(line) for line in normal_lines):
        return ON_NORMAL, None
    counter = _counter_examples(span, compiled, normal_lines, text)
    rule_name = _unique_name(name or _name_of(draft.words), taken, book)
    data: JsonObject = {
        "name": rule_name,
        "description": _description(draft.shown or text),
        "tags": [TAUGHT_TAG],
        "mode": mode,
        "when": [
            *conditions,
            {
                "fact": "log",
                "regex": draft.pattern,
                "examples": examples,
                "counter_examples": counter,
            },
        ],
        "notes": f"taught from {origin}; scope {scope} (widen by removing the {scope} condition)"
        if conditions
        else f"taught from {origin}; scope global",
    }
    # One line per regex and example: a reviewer reads them as the log printed them.
    rule_yaml = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=4096)
    try:
        rule = parse_rule(rule_yaml)
    except RuleError as exc:
        return exc.reason, None
    if rule.mode is not Mode.TRACK and rule.mode is not Mode.RETRY:
        return "a taught rule has no action to run: its mode is track or retry", None
    match = evaluate(rule, facts, is_wrapper=is_wrapper)
    if not match.ok or match.evidence is None:
        return f"it does not match the failure: {match.reason}", None
    if not span.lines[0][0] <= match.evidence.line <= span.lines[-1][0]:
        return (
            f"on the failure its evidence is line {match.evidence.line}, outside the selection",
            None,
        )
    problems = [why for _, why in example_problems(rule)]
    replaces: set[str] = set()
    if book is not None:
        for other, why in rule_confusions(rule, book):
            if other in replaceable:
                replaces.add(other)
            else:
                problems.append(why)
    if problems:
        return problems[0], None
    return "", Taught(rule, rule_yaml, number, text, passed_over, scope, tuple(sorted(replaces)))


def _bounded(lines: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for line in lines:
        seen.setdefault(line[:MAX_EXAMPLE_CHARS].rstrip("\r"), None)
    return list(seen)


def _counter_examples(
    span: _Span, compiled: regex.Pattern[str], normal_lines: Sequence[str], text: str
) -> list[str]:
    """Lines that look alike and are not it: the job's normal, then the lines around the span."""
    words = set(w.lower() for w in WORD.findall(text))
    physical = span.log.split("\n")
    first, last = span.lines[0][0], span.lines[-1][0]
    around = [physical[i - 1] for i in range(max(1, first - 3), first)]
    around += [physical[i - 1] for i in range(last + 1, min(len(physical), last + 3) + 1)]
    # The selected lines the rule leaves alone are nearby lines too.
    unselected = [raw for _, _, raw in span.lines if not compiled.search(raw[:MAX_EXAMPLE_CHARS])]
    pool = list(normal_lines) + unselected + around

    def alike(line: str) -> int:
        return len(words & {w.lower() for w in WORD.findall(strip_ansi(line))})

    chosen = [
        line
        for line in sorted(pool, key=alike, reverse=True)
        if strip_ansi(line).strip() and not compiled.search(line[:MAX_EXAMPLE_CHARS])
    ]
    return _bounded(chosen)[:MAX_COUNTER_EXAMPLES]


def _name_of(words: tuple[str, ...]) -> str:
    """The message's first words, as a name: "ref_not_found_ref_page_not_found"."""
    picked = [w for w in dict.fromkeys(w.lower() for w in words) if w not in _STOP]
    telling = [w for w in picked if w not in _VAGUE]
    picked = (telling if len(telling) >= 2 else picked)[:6] or ["taught"]
    return "_".join(picked)[:MAX_NAME].strip("_") or "taught"


def _unique_name(base: str, taken: frozenset[str] | set[str], book: RuleBook | None) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", base).strip("_.-") or "taught"
    if not re.match(NAME_PATTERN, base):
        base = f"taught_{base}"
    name, n = base, 1
    while name in taken or (book is not None and book.get(name) is not None):
        n += 1
        name = f"{base}_{n}"
    return name


def _description(text: str) -> str:
    shown = text if len(text) <= 160 else text[:157] + "..."
    return f"Taught: {shown}"


def chunk_span(log: str, chunk: str) -> tuple[int, int] | None:
    """The lines of ``log`` (1-based, first and last) that hold a labelled ``chunk``, if found.

    Lines are compared as a person reads them (colour codes, time stamps and
    spaces aside), so a chunk copied from a rendered log is found in the raw one.

    >>> chunk_span("a\\nb\\n\\x1b[31mboom\\x1b[0m\\nc\\n", "boom\\nc")
    (3, 4)
    """
    # Read as the log is read: a CI system's own lines ("##[group]Run ...") are not looked for.
    wanted = [_plain(line) for _, line in numbered_lines(chunk)]
    wanted = [line for line in wanted if line]
    if not wanted:
        return None
    numbered = [(n, _plain(text)) for n, text in numbered_lines(log)]
    best: tuple[int, int, int] | None = None  # (lines matched, first, last)
    for i, (number, text) in enumerate(numbered):
        if not _same(text, wanted[0]):
            continue
        j = i
        for line in wanted[1:]:
            if j + 1 < len(numbered) and _same(numbered[j + 1][1], line):
                j += 1
            else:
                break
        # A short first line ("with:") recurs: the place where most of the chunk follows wins.
        if best is None or j - i + 1 > best[0]:
            best = (j - i + 1, number, numbered[j][0])
        if best[0] == len(wanted):
            break
    return None if best is None else (best[1], best[2])


def _same(text: str, wanted: str) -> bool:
    return text == wanted or (len(wanted) >= 8 and wanted in text)


# What is left of a terminal code whose escape byte a copy dropped ("[?1h=", "[0K").
_CODE_LEFT = re.compile(r"\[\??[\d;]*[A-Za-z]=?|^[=>]+")


def _plain(line: str) -> str:
    """A line as compared when finding a chunk: codes, even half-copied ones, and spaces aside.

    A CI annotation's mark too: a chunk copied from the raw log says ``##[error]msg``
    where the log rules read says ``msg`` (``core.logs.text.unwrap_annotations``).
    """
    text = ANNOTATION.sub("", LINE_STAMP.sub("", strip_ansi(line)).strip())
    text = _CODE_LEFT.sub("", text)
    return " ".join(_CODE_LEFT.sub("", text).split())
