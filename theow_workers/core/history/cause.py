"""What identifies a failed run's cause: its error lines, volatile parts masked, codes kept.

Two failed runs have the same cause when the one reading of their logs
(:func:`~theow_workers.core.logs.summary.summarize`) picks the same error lines
once what differs between runs is masked (times, durations, ids, paths,
numbers: :func:`~theow_workers.core.logs.text.mask_volatile`), and the same
matched rule when one is known. Masking every number would make ``TS2322`` and
``TS2345`` one cause, and ``exit code 1`` and ``exit code 137`` (killed): here
the codes that name *what* went wrong are kept as they are: a tool's error
code (``TS2322``, ``E0308``, ``ORA-00942``, ``SC2086``), an HTTP status and an
exit code or signal.

>>> a = cause_of("src/a.ts(3,7): error TS2322: Type 'string' is not assignable to type 'number'.")
>>> b = cause_of("src/a.ts(9,1): error TS2322: Type 'string' is not assignable to type 'number'.")
>>> c = cause_of("src/a.ts(3,7): error TS2345: Type 'string' is not assignable to type 'number'.")
>>> a.key == b.key, a.key == c.key, a.text
(True, False, "src/a.ts(<n>): error TS2322: type 'string' is not assignable to type 'number'.")

A cause whose lines say the infrastructure failed (a host name that did not
resolve, a registry's 5xx or rate limit, a network timeout, a full disk, a
runner that went away) carries the category ``infra``, as a matched rule's
category would say it:

>>> cause_of("fatal: unable to access 'https://github.com/o/r.git/': "
...          "Could not resolve host: github.com").category
'infra'
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from theow_client.jsontypes import JsonObject
from theow_workers.core.logs.summary import summarize
from theow_workers.core.logs.text import mask_volatile

MAX_TEXT_CHARS = 500
INFRA = "infra"

# A tool's error code: letters then digits (TS2322, E0308, CS0246, SC2086, ORA-00942, PLS-00201).
TOOL_CODE = r"\b[A-Z]{1,4}-?\d{3,5}\b"
# An HTTP status where the line says it is one: "HTTP 503", "status code 404", "429 Too Many".
HTTP_STATUS = (
    r"(?i:\bHTTP(?:/\d(?:\.\d)?)?|\bstatus(?: code)?|\bresponse(?: code)?|\breturned)[\s:=]*[1-5]\d\d\b|"
    r"\b[1-5]\d\d (?i:not found|forbidden|unauthorized|too many requests|internal server error|"
    r"bad gateway|service unavailable|gateway time-?out|conflict|bad request)"
)
# An exit code or a signal: "exit code 137", "exited with 2", "make: *** [all] Error 2", "signal 9".
EXIT_CODE = (
    r"(?i:\bexit(?:ed)?(?: with)?(?: (?:code|status))?[\s:=]*\d{1,3}\b|"
    r"\*\*\* \[[^\]]*\] error \d{1,3}\b|\bsignal[\s:]*(?:\d{1,2}\b|sig[a-z]+))"
)
_EXIT = re.compile(EXIT_CODE)
EXIT_LINES = 3
CODES = re.compile(f"{TOOL_CODE}|{HTTP_STATUS}|{EXIT_CODE}")
# What mask_volatile leaves alone: lower-case letters, no digit, no path or time shape.
_HOLD = "qxcode{}qx"
_HELD = re.compile(r"qxcode([a-z]+)qx")

# Lines that say the infrastructure failed, not the code under test: name resolution, a
# registry's or mirror's 5xx or rate limit, network timeouts and resets, a full disk, a
# runner lost. A test's own assertion or timeout is not among them.
INFRA_LINE = re.compile(
    r"could not resolve host|temporary failure in name resolution|name or service not known|"
    r"no such host|getaddrinfo|eai_again|tls handshake timeout|i/o timeout|"
    r"connection reset by peer|econnreset|etimedout|read timed out|connect timed out|"
    r"connection timed out|failed to connect to|network is unreachable|"
    r"toomanyrequests|too many requests|rate limit exceeded|"
    r"bad gateway|service unavailable|gateway time-?out|"
    r"no space left on device|runner has received a shutdown signal|"
    r"lost communication with the server|runner system failure|"
    r"error pulling image|failed to pull image|the remote end hung up unexpectedly|"
    r"could not transfer artifact|failed to fetch .* (?:5\d\d|timed out)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Cause:
    """What identifies a failed run's cause (``key``), as a person reads it (``text``)."""

    key: str  # stable across runs of one cause: a digest of the rule and the masked lines
    text: str  # the error lines, masked with codes kept, bounded
    category: str | None = None  # "infra" when the lines say the infrastructure failed


def keep_codes(line: str) -> str:
    """``mask_volatile(line)`` with the line's error codes, HTTP statuses and exit codes kept.

    >>> keep_codes("error[E0308]: mismatched types at src/main.rs:4:9")
    'error[E0308]: mismatched types at src/main.rs:<n>'
    >>> keep_codes("Process completed with exit code 137 after 12s")
    'process completed with exit code 137 after <dur>'
    """
    codes = [match.group(0) for match in CODES.finditer(line)]
    if not codes:
        return mask_volatile(line)
    held = line
    for index, code in enumerate(codes):
        held = held.replace(code, _HOLD.format(_letters(index)), 1)
    return _HELD.sub(lambda match: codes[_index(match.group(1))], mask_volatile(held))


def cause_of(log: str, *, rule: str | None = None, category: str | None = None) -> Cause:
    """The cause of a failed run from its log, and the rule that matched it when one did."""
    return cause_of_facts({"log": log}, rule=rule, category=category)


def cause_of_facts(
    facts: JsonObject, *, rule: str | None = None, category: str | None = None
) -> Cause:
    """:func:`cause_of` a failure's facts: their log (``log``, ``stderr``... as the resolver
    reads it), so a worker keys a failure as ``theow history eval`` keys its row."""
    summary = summarize(facts)
    basis = set(summary.basis.split("\n"))
    # The lines the summary named the cause from (its basis), read again with codes kept.
    lines = [line.text for line in summary.errors if mask_volatile(line.text) in basis]
    text = "\n".join(keep_codes(line) for line in lines) if lines else summary.basis
    # The exit code a runner printed last says how the step ended (137: killed), even
    # where the summary names the cause from other lines.
    exits = [m.group(0) for line in summary.lines[-EXIT_LINES:] for m in _EXIT.finditer(line.text)]
    if exits and exits[-1].lower() not in text.lower():
        text = f"{text}\n{exits[-1].lower()}"
    digest = hashlib.blake2b(f"{rule or ''}\n{text}".encode(), digest_size=12).hexdigest()
    if category is None and any(INFRA_LINE.search(line.text) for line in summary.errors):
        category = INFRA
    return Cause(f"{rule}:{digest}" if rule else digest, text[:MAX_TEXT_CHARS], category)


def _letters(index: int) -> str:
    """0 → "a", 25 → "z", 26 → "ba": an index in letters, which masking leaves as they are."""
    out = ""
    while True:
        out = chr(ord("a") + index % 26) + out
        index //= 26
        if not index:
            return out


def _index(letters: str) -> int:
    value = 0
    for char in letters:
        value = value * 26 + ord(char) - ord("a")
    return value
