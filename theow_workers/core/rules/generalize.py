"""A log line as a pattern: the message's words literal, what differs between runs as classes.

:func:`draft_pattern` reads one raw line (colour codes kept, as a rule's regex
sees it) as literal text, spaces, colour codes and volatile parts (the ones
:func:`~theow_workers.core.logs.text.mask_volatile` masks: times, dates, ids,
hashes, durations, paths, URLs, numbers, versions, quoted names) and writes the
regex: words escaped (error codes, exit codes and HTTP statuses among them:
they name the cause), spaces ``[ \\t]+``, colour codes optional, each volatile
part a class that keeps what made it one (a path has a separator, a version a
digit), the first file, quoted name and URL as named groups (``file``,
``name``, ``url``). A long line is cut after enough literal text, where runs
of one cause differ most; a line that states too little literally is no
pattern. The synthesizer (:mod:`theow_workers.core.explore.teaching`) picks the line.

>>> draft = draft_pattern("src/y.c:7:1: bad widget 'q9' (took 12ms)")
>>> regex.search(draft.pattern, "lib/z/w.c:30:2: bad widget 'k1' (took 3.5ms)").groupdict()
{'file': 'lib/z/w.c', 'name': 'k1'}
>>> draft.shown
"<file>:<number>: bad widget '<name>' (took <duration>)"
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import regex

from theow_workers.core.rules.codes import KEPT, is_code

MAX_LITERAL = 64  # literal characters a pattern keeps: enough to be specific, short enough to recur
MIN_LETTERS = 4  # a pattern states at least this many letters of the message
MAX_QUOTED = 400

# What a terminal shows as nothing: colour and cursor codes, and the bare "[31m" a log keeps.
_ANSI = re.compile(
    r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]|\x1b[()][0-9A-Za-z]|\[\d{1,3}(?:;\d{1,3})*m|[\x00-\x08\x0b-\x1f\x7f]"
)
ANSI_CLASS = r"(?:\x1b\[[0-9;?]*[A-Za-z]|\x1b[=>]|\[[0-9;]*m)*"
SPACE_CLASS = r"[ \t]+"
# The volatile parts of a message, tried in this order at each position: (kind, text, regex).
# Each class keeps what made the part what it is: a path has a separator, a version a digit.
# What names a cause (an error code, an exit code, an HTTP status: ``KEPT``) stays literal.
_PATH_CHARS = r"[^\s:'\"()\[\]<>,;]"
_PATH = f"{_PATH_CHARS}*[/\\\\]{_PATH_CHARS}*"
_VOLATILE: tuple[tuple[str, re.Pattern[str], str], ...] = (
    # A URL's scheme stays literal ("https://"): the rest is the subject.
    (
        "url",
        re.compile(r"\b[a-zA-Z][\w+.-]*://[^\s'\"<>()\[\]{}]+"),
        r"[^\s'\"<>()\[\]{}]+",
    ),
    (
        "quoted",
        re.compile(
            r"\\\"[^\"\\\n]+\\\"|'(?:[^'\n]|'(?=\w))+'|\"(?:[^\"\\\n]|\\.)+\"|`[^`\n]+`|\u2018[^\u2019\n]+\u2019|\u201c[^\u201d\n]+\u201d"
        ),
        "",
    ),
    (
        "uuid",
        re.compile(
            r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
        ),
        r"[0-9a-fA-F-]{36}",
    ),
    (
        "date",
        re.compile(
            r"\b\d{4}[-/]\d\d[-/]\d\d(?:[T ]\d\d:\d\d(?::\d\d)?(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)?"
        ),
        r"\d{4}[-/]\d\d[-/]\d\d(?:[T ]\d\d:\d\d(?::\d\d)?(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)?",
    ),
    ("time", re.compile(r"\b\d\d?:\d\d:\d\d(?:[.,]\d+)?\b"), r"\d\d?:\d\d:\d\d(?:[.,]\d+)?"),
    ("path", re.compile(r"(?:[A-Za-z]:)?[\w.@+~$-]*(?:[/\\][\w.@+~$-]+)+[/\\]?"), _PATH),
    ("hex", re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,}\b"), r"[0-9a-f]+"),
    (
        "duration",
        re.compile(r"\b\d+(?:\.\d+)?(?:ms|s|secs?|seconds?|mins?|minutes?|h)\b"),
        r"\d+(?:\.\d+)?[a-z]*",
    ),
    # Versions and names that mix letters and digits: "v1.2.3", "x86_64", "1.0.0.rc.2".
    (
        "mixed",
        re.compile(r"\b(?=[\w.-]*\d)(?=[\w.-]*[A-Za-z])\w+(?:[.-]\w+)*\b"),
        r"[\w.-]*\d[\w.-]*",
    ),
    # A file or a dotted name: "Commands.md", "module.js", "Awesome.Order.check".
    ("dotted", re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b"), r"\w+(?:\.\w+)+"),
    ("number", re.compile(r"\d+(?:[.,:]\d+)*"), r"\d+(?:[.,:]\d+)*"),
)
_GROUP_OF = {"path": "file", "dotted": "file", "quoted": "name", "url": "url"}
WORD = re.compile(r"[A-Za-z]{2,}")
NAME_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]+")


@dataclass(frozen=True)
class Token:
    kind: str  # "literal", "space", "ansi", or a volatile kind
    text: str

    @property
    def literal(self) -> bool:
        return self.kind == "literal"


@dataclass(frozen=True)
class Draft:
    """One line's pattern: the regex and how much of the message it states literally."""

    pattern: str
    letters: int  # literal letters
    words: tuple[str, ...]  # the literal words, for a name
    shown: str = ""  # the line as the pattern reads it: "Ref <name>: page not found"


def tokens(raw: str) -> list[Token]:
    """A raw log line as literal text, spaces, colour codes and volatile parts."""
    found: list[Token] = []
    at = 0
    text_start = 0

    def flush(end: int) -> None:
        for piece in re.split(r"([ \t]+)", raw[text_start:end]):
            if piece:
                found.append(Token("space" if piece.isspace() else "literal", piece))

    while at < len(raw):
        ansi = _ANSI.match(raw, at)
        if ansi is not None and ansi.end() > at:
            flush(at)
            found.append(Token("ansi", ansi.group()))
            at = text_start = ansi.end()
            continue
        code = KEPT.match(raw, at)
        if code is not None and is_code(code.group()):
            at = code.end()  # a code names the cause: "TS2322" is no "TS2345"
            continue
        for kind, pattern, _ in _VOLATILE:
            hit = pattern.match(raw, at)
            if hit is None or (kind == "quoted" and len(hit.group()) > MAX_QUOTED + 2):
                continue
            if kind == "number" and at > 0 and (raw[at - 1].isalpha() or raw[at - 1] == "_"):
                continue  # a digit inside a word ("utf8") is part of the word
            flush(at)
            if kind == "url":
                scheme, rest = hit.group().split("://", 1)
                found.append(Token("literal", scheme + "://"))
                found.append(Token(kind, rest))
            elif kind == "quoted" and hit.group()[0] == '"' and '\\"' in hit.group():
                # A quoted message quoting names ("Words not in order \"a\" and \"b\""):
                # its words are the message, the names inside vary.
                found.append(Token("literal", hit.group()[0]))
                found.extend(tokens(hit.group()[1:-1]))
                found.append(Token("literal", hit.group()[-1]))
            else:
                found.append(Token(kind, hit.group()))
            at = text_start = hit.end()
            break
        else:
            at += 1
    flush(len(raw))
    return _merge_literals(found)


def _merge_literals(found: list[Token]) -> list[Token]:
    merged: list[Token] = []
    for token in found:
        if merged and token.literal and merged[-1].literal:
            merged[-1] = Token("literal", merged[-1].text + token.text)
        elif merged and token.kind == "ansi" and merged[-1].kind == "ansi":
            merged[-1] = Token("ansi", merged[-1].text + token.text)
        else:
            merged.append(token)
    return merged


def draft_pattern(raw: str, level: int = 2) -> Draft | None:
    r"""The regex for one raw line: literal words, volatile parts as classes.

    ``level`` 2 generalizes every volatile part; 1 keeps paths, names and
    quoted text literal (numbers, times and hashes still vary); 0 is the line
    as it is. None when the line states too little literally to be told apart.

    >>> print(draft_pattern("Error: Cannot find module './db.json'").pattern)
    (?m)Error:[ \t]+Cannot[ \t]+find[ \t]+module[ \t]+'(?P<name>[^\n]*?)'[ \t\r]*$
    """
    found = tokens(raw)
    kept = {"number", "time", "date", "uuid", "hex", "duration"} if level == 1 else set()
    if level < 2:
        found = _merge_literals(
            [
                Token("literal", t.text) if t.kind not in {"space", "ansi", *kept} else t
                for t in found
            ]
        )
    if level == 0:
        found = _merge_literals(
            [
                Token("literal", t.text) if t.kind != "ansi" and t.kind != "space" else t
                for t in found
            ]
        )
    # Leading colour codes, spaces and volatile parts say nothing; a subject with little
    # else to go by (a test name before "FAIL") is kept.
    # A subject just before the message ("src/a.c:3: error ...") is kept as a named group.
    start = 0
    while start < len(found) and not (found[start].literal and WORD.search(found[start].text)):
        start += 1
    lead = found[:start]
    body = found[start:]
    subjects = [i for i, t in enumerate(lead) if t.kind in _GROUP_OF]
    if subjects:
        body = lead[subjects[-1] :] + body
    # Cut after enough literal text: a long line's tail is where runs differ most.
    kept_tokens: list[Token] = []
    count = 0
    cut = False
    for token in body:
        kept_tokens.append(token)
        if token.literal:
            count += len(token.text)
            if count >= MAX_LITERAL:
                cut = True
                break
    while kept_tokens and kept_tokens[-1].kind in {"space", "ansi"}:
        kept_tokens.pop()
    cut = cut and len(kept_tokens) < len(body)
    while kept_tokens and not kept_tokens[-1].literal and kept_tokens[-1].kind not in _GROUP_OF:
        kept_tokens.pop()
        cut = True
    letters = sum(len(w) for t in kept_tokens if t.literal for w in WORD.findall(t.text))
    words = tuple(w for t in kept_tokens if t.literal for w in NAME_WORD.findall(t.text))
    subject = any(t.kind in _GROUP_OF for t in kept_tokens)
    if not kept_tokens or letters < (MIN_LETTERS if subject else 2 * MIN_LETTERS):
        return None  # "... FAIL" alone is in too many lines to say which failure
    parts: list[str] = []
    named: set[str] = set()
    for token in kept_tokens:
        parts.append(_regex_of(token, named))
    pattern = "".join(parts)
    if not cut:
        # A line may end in colour codes, spaces and carriage returns ("\r\r\n" on Windows runners).
        pattern += (r"[ \t]*" + ANSI_CLASS if _ends_with_ansi(found) else "") + r"[ \t\r]*$"
    shown = "".join(_shown(token) for token in kept_tokens)
    return Draft("(?m)" + pattern if pattern.endswith("$") else pattern, letters, words, shown)


def _shown(token: Token) -> str:
    if token.literal:
        return token.text
    if token.kind == "space":
        return " "
    if token.kind == "ansi":
        return ""
    placeholder = f"<{_GROUP_OF.get(token.kind, token.kind)}>"
    if token.kind != "quoted":
        return placeholder
    cut = _quote_width(token.text)
    return f"{token.text[:cut]}{placeholder}{token.text[-cut:]}"


def _quote_width(text: str) -> int:
    """1 for a quote, 2 for an escaped one (``\"name\"``)."""
    return 2 if text.startswith('\\"') else 1


def _ends_with_ansi(found: list[Token]) -> bool:
    return any(t.kind == "ansi" for t in found[-3:])


def _escape(text: str) -> str:
    return str(regex.escape(text, special_only=True, literal_spaces=True))


def _regex_of(token: Token, named: set[str]) -> str:
    if token.literal:
        return _escape(token.text)
    if token.kind == "space":
        return SPACE_CLASS
    if token.kind == "ansi":
        return ANSI_CLASS
    if token.kind == "quoted":
        body = r"[^\n]*?"
        inner = _named(body, "name", named)
        cut = _quote_width(token.text)
        opening, closing = token.text[:cut], token.text[-cut:]
        return _escape(opening) + inner + _escape(closing)
    shape = next(shape for kind, _, shape in _VOLATILE if kind == token.kind)
    group = _GROUP_OF.get(token.kind)
    return _named(shape, group, named) if group else shape


def _named(shape: str, group: str | None, named: set[str]) -> str:
    """``shape`` as a named group the first time ``group`` occurs, else as it is."""
    if group is None or group in named:
        return shape if group is None else f"(?:{shape})"
    named.add(group)
    return f"(?P<{group}>{shape})"
