"""Evidence: the line of a fact that made a rule validate, so a person sees *why*.

>>> text = "compiling\\nsrc/a.c:3:1: error: expected ';'\\nmake: *** [all] Error 1\\n"
>>> found = evidence_at("log", text, text.index("src/"), text.index("\\nmake"))
>>> found.line, found.text
(2, "src/a.c:3:1: error: expected ';'")
>>> found.describe("c_compile_error")
"matched c_compile_error at log line 2: src/a.c:3:1: error: expected ';'"
>>> go = "go: github.com/imdario/mergo@v1.0.0: parsing go.mod:\\n"
>>> evidence_at("log", go, go.index("@v1"), go.index("\\n")).text
'go: github.com/imdario/mergo@v1.0.0: parsing go.mod:'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from theow_client.facts import lines_around
from theow_client.jsontypes import JsonObject
from theow_client.terminal import printable

CONTEXT_LINES = 3  # shown before and after the evidence line
MAX_CONTEXT_LINES = 15
MAX_LINE_CHARS = 500
MAX_MATCHED_CHARS = 2000
MAX_EVIDENCE_LINES = 200  # lines of one match weighed for the telling one
MIN_RUN = 3  # characters of a literal run that count

# Whether a line is a wrapper's (``RuleBook.is_wrapper``, from the ``generic`` rules).
IsWrapper = Callable[[str], bool]
# Where a condition matched: (fact, its text, start, end), by the condition's index in ``when``.
Spans = Mapping[int, tuple[str, str, int, int]]


@dataclass(frozen=True)
class Evidence:
    fact: str
    line: int  # 1-based line of the fact where the matched text starts
    text: str  # the whole first non-empty line of the matched text, bounded
    position: float  # where in the fact, 0 (start) to 1 (end): later is nearer the failure
    matched: str = ""  # the whole matched text, bounded
    context: tuple[str, ...] = ()  # the lines around, the evidence line among them
    context_start: int = 0  # line number of context[0]
    # Whether the job's passing runs print this line too (None: the job's normal is unknown).
    normal: bool | None = None
    # The line from where the match begins, bounded: the corpus README's "evidence line",
    # which ``theow rules eval`` grades (labels may begin mid-line, as patterns do).
    from_match: str = ""

    def describe(self, rule: str) -> str:
        seen = " (also seen in passing runs)" if self.normal else ""
        return f"matched {rule} at {self.fact} line {self.line:,}: {self.text}{seen}"

    def to_dict(self) -> JsonObject:
        data: JsonObject = {
            "fact": self.fact,
            "line": self.line,
            "text": self.text,
            "context": list(self.context),
            "context_start": self.context_start,
        }
        if self.normal is not None:
            data["normal"] = self.normal
        return data


def evidence_at(fact: str, text: str, start: int, end: int, at: int | None = None) -> Evidence:
    """Evidence for the match ``text[start:end]``, shown at its line that begins at ``at``.

    Without ``at``, the first non-empty line of the match is the one shown.
    """
    matched = text[start:end]
    if at is not None and start <= at < end:
        start = at
    # The first non-empty line of the match (a match may begin with a newline), the whole
    # line: a pattern that starts mid-line (``@v1.0.0: parsing``) still shows ``go: …mergo``.
    shown = text[start:end]
    start += len(shown) - len(shown.lstrip("\r\n"))
    stop = text.find("\n", start)
    first = _whole_line(text, start, stop if stop >= 0 else len(text))
    from_match = text[start : stop if 0 <= stop < end else end].strip()[:MAX_LINE_CHARS]
    line = text.count("\n", 0, start) + 1
    context_from = lines_around(text, start, CONTEXT_LINES, 0)[0]
    after = lines_around(text, end, 0, CONTEXT_LINES)[1]
    lines = text[context_from:after].split("\n")[:MAX_CONTEXT_LINES]
    context = tuple(ln[:MAX_LINE_CHARS] for ln in lines)
    return Evidence(
        fact=fact,
        line=line,
        text=first,
        position=start / max(len(text), 1),
        matched=matched[:MAX_MATCHED_CHARS],
        context=context,
        context_start=text.count("\n", 0, context_from) + 1,
        from_match=from_match,
    )


def _whole_line(text: str, start: int, stop: int) -> str:
    """The line holding ``text[start]``, stripped, cut at the line bound.

    Before the match, a terminal's escapes that the pattern skipped (a colour, keypad
    mode) are left out. A line longer than the bound whose match begins past it is
    shown from the match (after ``…``): the part that says why is never cut away.
    """
    begin = text.rfind("\n", 0, start) + 1
    # Bounded before it is read: a prefix past four bounds is never shown.
    prefix = printable(text[max(begin, start - 4 * MAX_LINE_CHARS) : start])
    raw = prefix + text[start:stop]
    whole = raw.strip()
    if len(whole) <= MAX_LINE_CHARS and start - begin <= 4 * MAX_LINE_CHARS:
        return whole
    at = len(prefix) - (len(raw) - len(raw.lstrip()))
    if at < MAX_LINE_CHARS - 1 and start - begin <= 4 * MAX_LINE_CHARS:
        return whole[:MAX_LINE_CHARS]
    return "…" + text[start:stop].strip()[: MAX_LINE_CHARS - 1]


def telling_evidence(
    spans: Spans,
    named_at: Mapping[int, tuple[int, ...]],
    literals: Callable[[int], tuple[str, ...]],
    is_wrapper: IsWrapper | None = None,
) -> Evidence | None:
    """The evidence: the line, among those a rule's conditions matched, that says why.

    A match may span several lines (``rake aborted!`` then ``No Rakefile found``,
    a test's header then its assertion). The telling line is the first line
    the conditions matched (in ``when`` order) unless it is a wrapper's line
    (``is_wrapper``) or spells out none of its condition's ``literals(index)``
    (:func:`literal_runs`: a header the pattern reaches through wildcards and
    named groups only); then, among the lines of the same condition where a
    named group began (``named_at``; all its lines when none did), the one
    holding the most literal text, counted without spaces, that is not a
    wrapper's (on a tie the earlier). The whole match stays ``matched``.
    """
    if not spans:
        return None
    lines: list[tuple[int, int, int]] = []  # (score, condition index, line offset)
    captured: set[tuple[int, int]] = set()  # (condition index, line offset) holding a named group
    for i in sorted(spans):
        _, text, start, end = spans[i]
        runs = literals(i)
        groups = named_at.get(i, ())
        for at, line in _lines(text, start, end):
            lowered = line.lower()
            lines.append((sum(len(r.replace(" ", "")) for r in runs if r in lowered), i, at))
            begin = text.rfind("\n", 0, at) + 1
            if any(begin <= g <= begin + len(line) for g in groups):
                captured.add((i, at))
    if not lines:
        fact, text, start, end = spans[min(spans)]
        return evidence_at(fact, text, start, end)

    def told(line: tuple[int, int, int]) -> bool:
        """Not a wrapper's line (a lone line is what the rule has: it is shown)."""
        if is_wrapper is None or len(lines) == 1:
            return True
        text, at = spans[line[1]][1], line[2]
        stop = text.find("\n", at)
        return not is_wrapper(text[at : stop if stop >= 0 else len(text)].rstrip("\r"))

    first = next((line for line in lines if told(line)), None)
    if first is None:
        chosen = lines[0]  # every line is a wrapper's
    elif first[0] > 0:
        chosen = first
    else:  # within its condition, a line it captured on if it has any; stable on a tie
        same = [line for line in lines if line[1] == first[1]]
        same = [line for line in same if (line[1], line[2]) in captured] or same
        best = sorted(same, key=lambda x: -x[0])
        chosen = next((line for line in best if line[0] > 0 and told(line)), first)
    fact, text, start, end = spans[chosen[1]]
    return evidence_at(fact, text, start, end, at=chosen[2])


def _lines(text: str, start: int, end: int) -> list[tuple[int, str]]:
    """(offset, text) of each non-empty line ``text[start:end]`` touches, the first few."""
    found: list[tuple[int, str]] = []
    at = text.rfind("\n", 0, start) + 1
    while at < end and len(found) < MAX_EVIDENCE_LINES:
        stop = text.find("\n", at)
        stop = len(text) if stop < 0 else stop
        if text[max(at, start) : min(stop, end)].strip():
            found.append((max(at, start), text[at:stop]))
        at = stop + 1
    return found


_C = re._constants  # type: ignore[attr-defined]
_GROUP_NAME = re.compile(r"(?<!\\)\(\?P<(\w+)>")
_GLOBAL_FLAGS = re.compile(r"(?<!\\)\(\?[aiLmsux]+\)")


@lru_cache(maxsize=4096)
def literal_runs(pattern: str) -> tuple[str, ...]:
    """Every run of literal text in ``pattern`` (lower-cased, one line each), wherever it sits.

    What a pattern spells out rather than leaves open: the line of a match
    that holds most of it is the one the pattern was written for. A named
    group's text is left out: it captures what varies (a test, a file). A
    run counts from three characters, spaces included (pytest's ``E   ``).

    >>> literal_runs("rake aborted!(?:ok)? *(?P<why>Error: .+)? *No Rakefile found")
    ('rake aborted!', 'no rakefile found')
    """
    # ``regex`` allows one group name in two alternatives, global flags anywhere and ``\\K``;
    # Python's parser does not (and the runs are compared lower-cased: flags do not matter).
    seen: dict[str, int] = {}

    def renamed(found: re.Match[str]) -> str:
        seen[found.group(1)] = seen.get(found.group(1), 0) + 1
        return f"(?P<{found.group(1)}_{seen[found.group(1)]}>"

    try:
        readable = _GLOBAL_FLAGS.sub("", _GROUP_NAME.sub(renamed, pattern)).replace("\\K", "")
        parsed = re._parser.parse(readable)  # type: ignore[attr-defined]
    except (re.error, RecursionError, AttributeError):
        return ()
    runs: list[str] = []
    _runs(list(parsed), runs, frozenset(parsed.state.groupdict.values()))
    found = (r.lower() for part in runs for r in re.split(r"[\r\n]", part))
    return tuple(dict.fromkeys(r for r in found if len(r) >= MIN_RUN and r.strip()))


def _runs(sequence: list[Any], into: list[str], named: frozenset[int]) -> None:
    run: list[str] = []
    for op, arg in sequence:
        if op is _C.LITERAL:
            run.append(chr(arg))
            continue
        into.append("".join(run))
        run = []
        if op is _C.SUBPATTERN and arg[0] not in named:
            _runs(list(arg[3]), into, named)
        elif op is _C.BRANCH:
            for alternative in arg[1]:
                _runs(list(alternative), into, named)
        elif op in (_C.MAX_REPEAT, _C.MIN_REPEAT):
            _runs(list(arg[2]), into, named)
    into.append("".join(run))
