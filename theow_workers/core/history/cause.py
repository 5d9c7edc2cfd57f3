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
from functools import lru_cache

from theow_client.jsontypes import JsonObject
from theow_workers.core.logs.summary import log_fact, summarize
from theow_workers.core.logs.text import mask_volatile

MAX_TEXT_CHARS = 500
INFRA = "infra"
TEST = "test"
FLAKY = "flaky"  # a named test failing the way flaky tests fail (see FLAKY_LINE)

# A tool's error code: letters then digits (TS2322, E0308, CS0246, SC2086, ORA-00942, PLS-00201).
TOOL_CODE = r"\b[A-Z]{1,4}-?\d{3,5}\b"
# An HTTP status where the line says it is one: "HTTP 503", "status code 404", "429 Too Many".
HTTP_STATUS = (
    r"(?i:\bHTTP(?:/\d(?:\.\d)?)?|\bstatus(?: code)?|\bresponse(?: code)?|\breturned(?: error)?)[\s:=]*[1-5]\d\d\b|"
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
    r"hosted runner encountered an error|failed to initialize container|"
    r"containers? failed to start|"
    r"error pulling image|failed to pull image|the remote end hung up unexpectedly|"
    r"could not transfer artifact|failed to fetch .* (?:5\d\d|timed out)|"
    r"fatal: early eof|returned error: (?:429|5\d\d)\b|was not acquired by runner|"
    r"(?:exit code|exit status|exited with) 137\b",  # SIGKILL: the runner ran out of memory
    re.IGNORECASE,
)


# What a test prints when it fails the way flaky tests fail, whatever the change: waiting
# too long (a timeout, an await condition), racing (a deadlock, a lock, a concurrent
# modification, a detached element) or finding a service not there yet (a refused or reset
# connection). A test's own assertion on values, a type or a key error are not among them.
FLAKY_LINE = re.compile(
    r"timed out|timeout ?(?:error|exception)|exceeded timeout|deadline exceeded|"
    r"not fulfilled within|condition not met within|"
    r"connection refused|econnrefused|connection reset|econnreset|"
    r"server closed the connection|deadlock|database is locked|too many clients|"
    r"stale ?element|cancelled ?error|concurrentmodificationexception",
    re.IGNORECASE,
)
# A line naming a test that failed, as the runners print it (a time stamp may come first):
# pytest's short summary, unittest's, jest's title, go test's, Gradle's, Maven Surefire's
# (JUnit 4 and 5), Rust's, .NET's, RSpec's, PHPUnit's and mocha's (its suite, then the
# test's title on the next line, ending with a colon).
_STAMP = r"^(?:\S*\d\d:\d\d:\d\d\S*\s+)?\s*"
FAILED_TEST = re.compile(
    _STAMP + r"(?:"
    r"(?:FAILED|ERROR) (?P<pytest>[^\s:]+::\S+)"
    r"|(?:FAIL|ERROR): (?P<unittest>\w+ \([\w.]+\))\s*$"
    r"|\u25cf (?P<jest>(?!Test suite failed to run)[^\n\u203a]+ \u203a [^\n]+?)\s*$"
    r"|--- FAIL: (?P<go>\S+) \("
    r"|(?P<gradle>[\w.$]+ > [^\n]+?) FAILED\s*$"
    r"|\[ERROR\] (?P<surefire>[\w$]+\([\w.$]+\)|[\w.$]+\.[\w$]+) (?:--|\s)\s*Time elapsed"
    r"|---- (?P<rust>\S+) stdout ----|thread '(?P<panicked>(?!main')[^'\n]+)' panicked at"
    r"|Failed (?P<dotnet>[\w.]+(?:\([^\n]*\))?) \[\d"
    r"|rspec \S+ # (?P<rspec>[^\n]+?)\s*$"
    r"|\d+\) (?P<phpunit>[\w\\]+::\w+)"
    r"|\d+\) (?P<mocha>[^\n:]+\n(?:\S*\d\d:\d\d:\d\d\S*)?[ \t]+[^\n]+?):[ \t]*$"
    r")",
    re.MULTILINE,
)
_LEADING_STAMP = re.compile(r"^\s*(?:\S*\d\d:\d\d:\d\d\S*\s+)?")
# The words of a line that only counts problems, whatever the tool.
TALLY_WORD = re.compile(r"[a-z]+")
TALLY_WORDS = frozenset(
    [
        "found",
        "problem",
        "problems",
        "error",
        "errors",
        "warning",
        "warnings",
        "failure",
        "failures",
        "failed",
        "passed",
        "skipped",
        "in",
        "file",
        "files",
        "checked",
        "source",
        "total",
        "and",
        "of",
    ]
)
MAX_SAID = 3  # lines taken for the cause when the picked ones only count
# Between the keys of the tests a run failed, in a cause's key (each test's key is the one a
# run failing that test alone has): a test's history reads through the runs failing others too.
TEST_JOIN = "+"
MAX_TESTS = 12
TESTS_READ = 256 * 1024  # characters from the end of a log searched for failed tests
AROUND_TEST = 1500  # characters either side of a failed test's line read for what it printed


@dataclass(frozen=True)
class Cause:
    """What identifies a failed run's cause (``key``), as a person reads it (``text``)."""

    key: str  # stable across runs of one cause: a digest of the rule and the masked lines
    text: str  # the error lines, masked with codes kept, bounded
    category: str | None = None  # "infra" when the lines say the infrastructure failed
    tests: tuple[str, ...] = ()  # the tests the log says failed, when it names them


def failing_tests(log: str) -> tuple[str, ...]:
    """The tests a log says failed (pytest node ids, jest titles, go test names...), sorted.

    A go subtest stands for its parent; time stamps, durations and numbers in a
    name are masked, so every run of one test names it the same way.

    >>> failing_tests("FAILED tests/test_api.py::test_login[3] - TimeoutError: 5.1s\\n"
    ...               "--- FAIL: TestCart (0.2s)\\n    --- FAIL: TestCart/refund (0.1s)\\n")
    ('testcart/refund', 'tests/test_api.py::test_login[<n>]')
    """
    return _read_tests(log[-TESTS_READ:])[0]


def _read_tests(tail: str) -> tuple[tuple[str, ...], bool]:
    """The tests ``tail`` says failed, and whether what it prints around them is what flaky
    tests print (``FLAKY_LINE``; a service waited for before the tests ran is not)."""
    found = set()
    flaky, seen_to = False, 0
    for match in FAILED_TEST.finditer(tail):
        name = next(group for group in match.groups() if group)
        if match.group("mocha"):  # the suite's line and the title's, as one name
            name = " ".join(_LEADING_STAMP.sub("", part).strip() for part in name.split("\n"))
        found.add(mask_volatile(name))
        start = max(seen_to, match.start() - AROUND_TEST)
        seen_to = max(seen_to, match.end() + AROUND_TEST)
        flaky = flaky or bool(FLAKY_LINE.search(tail, start, seen_to))
        if len(found) >= 4 * MAX_TESTS:
            break
    leaves = {name for name in found if not any(o.startswith(name + "/") for o in found)}
    return tuple(sorted(leaves))[:MAX_TESTS], flaky


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
    """The cause of a failed run from its log, and the rule that matched it when one did.

    When the log names the tests that failed, they are the cause: a test failing
    with other values, another timeout or another exception is the same test
    failing (a flaky test rarely fails the same way twice; a break's partial fix
    changes what it prints, not which test fails). Its category is ``test`` unless a
    matched rule says otherwise: a test's own timeout or refused connection is the
    test's, not the infrastructure's.

    >>> one = cause_of("FAILED tests/test_api.py::test_login - TimeoutError: after 5.0s")
    >>> two = cause_of("FAILED tests/test_api.py::test_login - ConnectionResetError: reset by peer")
    >>> one.key == two.key, one.tests, two.category
    (True, ('tests/test_api.py::test_login',), 'test')
    """
    return cause_of_facts({"log": log}, rule=rule, category=category)


def cause_of_facts(
    facts: JsonObject, *, rule: str | None = None, category: str | None = None
) -> Cause:
    """:func:`cause_of` a failure's facts: their log (``log``, ``stderr``... as the resolver
    reads it), so a worker keys a failure as ``theow history eval`` keys its row."""
    tests, flaky = _read_tests(log_fact(facts)[1][-TESTS_READ:])
    if tests:
        text = "\n".join(tests)
        key = TEST_JOIN.join(sorted(_test_key(test, rule) for test in tests))
        kind = category or TEST
        if kind == TEST and flaky:
            kind = FLAKY
        return Cause(f"{rule}:{key}" if rule else key, text[:MAX_TEXT_CHARS], kind, tests)
    summary = summarize(facts)
    basis = set(summary.basis.split("\n"))
    # The lines the summary named the cause from (its basis), read again with codes kept.
    lines = [line.text for line in summary.errors if mask_volatile(line.text) in basis]
    if lines and all(_tally(line) for line in lines):
        # "✖ 1 problem (1 error, 0 warnings)" counts the errors; the lines above say them.
        said = [line.text for line in summary.marked if not _tally(line.text)]
        lines = said[-MAX_SAID:] or lines
    text = "\n".join(keep_codes(line) for line in lines) if lines else summary.basis
    # The exit code a runner printed last says how the step ended (137: killed), even
    # where the summary names the cause from other lines.
    exits = [m.group(0) for line in summary.lines[-EXIT_LINES:] for m in _EXIT.finditer(line.text)]
    if exits and exits[-1].lower() not in text.lower():
        text = f"{text}\n{exits[-1].lower()}"
    digest = hashlib.blake2b(f"{rule or ''}\n{text}".encode(), digest_size=12).hexdigest()
    if category is None and (
        any(INFRA_LINE.search(line.text) for line in summary.errors) or INFRA_LINE.search(text)
    ):
        category = INFRA
    return Cause(f"{rule}:{digest}" if rule else digest, text[:MAX_TEXT_CHARS], category)


@lru_cache(maxsize=65536)  # asked of every failure a decision reads
def causes_per_test(key: str) -> tuple[str, ...]:
    """The cause of each test a cause's key names, alone: a run failing tests A and B has
    the cause ``A+B``, and A is the cause a run failing A alone has.

    A key of no named test is its own only part.

    >>> both = cause_of("FAILED t.py::a - x\\nFAILED t.py::b - y").key
    >>> causes_per_test(both) == tuple(sorted((cause_of("FAILED t.py::a - z").key,
    ...                                  cause_of("FAILED t.py::b - z").key)))
    True
    """
    if TEST_JOIN not in key:
        return (key,)
    rule, colon, names = key.rpartition(":")
    return tuple(f"{rule}{colon}{name}" for name in names.split(TEST_JOIN) if name)


def _test_key(test: str, rule: str | None) -> str:
    return hashlib.blake2b(f"{rule or ''}\ntests\n{test}".encode(), digest_size=12).hexdigest()


def _tally(line: str) -> bool:
    """Whether a line only counts what failed ("Found 2 errors.", "✖ 1 problem (1 error)").

    >>> _tally("✖ 1 problem (1 error, 0 warnings)"), _tally("Found 3 errors in 2 files")
    (True, True)
    >>> _tally("error: 1 test failed: test_login"), _tally("Killed")
    (False, False)
    """
    words = TALLY_WORD.findall(line.lower())
    return bool(words) and any(c.isdigit() for c in line) and set(words) <= TALLY_WORDS


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
