"""Named test suites and what their runners print: the logs of the ``workflows`` fleet style.

Written apart from ``fleet_logs.py`` on purpose: here a job is a suite of
named tests (pytest node ids, jest's titles, go test's
``TestX/sub`` names, Gradle's ``Class > method()``), a failure names the tests
that failed, a flaky test fails with a different message from one run to the
next (other values, other exceptions), and a build or lint job prints a
compiler's diagnostics. Every run prints its own durations, counts and
temporary paths.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

NOUNS = [
    "order", "refund", "ledger", "cart", "coupon", "tenant", "invite", "avatar", "report",
    "shipment", "payout", "webhook", "digest", "metric", "quota", "session", "feed", "locale",
]  # fmt: skip
VERBS = ["rounds", "expires", "merges", "retries", "streams", "sorts", "paginates", "renders"]

# What a flaky test prints, each with values that change between runs ({v}: a number).
FLAKY_PY = [
    "E   AssertionError: assert {v} == {w}",
    "E   TimeoutError: operation timed out after {v}.{v}s",
    "E   asyncio.exceptions.CancelledError",
    "E   sqlalchemy.exc.OperationalError: (psycopg.OperationalError) server closed the connection unexpectedly",
    "E   ConnectionResetError: [Errno 104] Connection reset by peer",
    "E   AssertionError: expected call not found.\nE   Expected: notify({v})\nE   Actual: not called.",
]  # fmt: skip
FLAKY_JS = [
    "Error: thrown: \"Exceeded timeout of {v}000 ms for a test.\"",
    "expect(received).toEqual(expected) // deep equality\n\n- Expected  - 1\n+ Received  + 1\n\n-   \"count\": {w},\n+   \"count\": {v},",
    "TestingLibraryElementError: Unable to find role=\"button\" and name \"{noun}\"",
    "Error: connect ECONNREFUSED 127.0.0.1:{port}",
]  # fmt: skip
FLAKY_GO = [
    "{file}:{line}: timed out waiting for {noun} after {v}ms",
    "{file}:{line}: got {v} items, want {w}",
    "panic: test timed out after {v}m0s",
    "{file}:{line}: dial tcp 127.0.0.1:{port}: connect: connection refused",
]  # fmt: skip
FLAKY_JAVA = [
    "org.opentest4j.AssertionFailedError: expected: <{w}> but was: <{v}>",
    "org.awaitility.core.ConditionTimeoutException: Condition with lambda expression was not fulfilled within {v} seconds.",
    "java.util.ConcurrentModificationException",
]  # fmt: skip

# What a broken change or regression prints: fixed when the break is made (values included).
BROKEN_PY = [
    "E   AssertionError: assert '{noun}' == '{other}'",
    "E   KeyError: '{noun}_id'",
    "E   TypeError: {verb}() got an unexpected keyword argument '{other}'",
    "E   AttributeError: '{Noun}' object has no attribute '{other}'",
]  # fmt: skip
BROKEN_JS = [
    "TypeError: Cannot read properties of null (reading '{noun}')",
    "expect(received).toBe(expected) // Object.is equality\n\nExpected: \"{noun}\"\nReceived: \"{other}\"",
    "ReferenceError: {noun}Store is not defined",
]  # fmt: skip
BROKEN_GO = [
    "{file}:{line}: {verb}({noun}) = {a}, want {b}",
    "{file}:{line}: unexpected error: {noun}: not found",
    "panic: runtime error: invalid memory address or nil pointer dereference [recovered]",
]  # fmt: skip
BROKEN_JAVA = [
    "org.opentest4j.AssertionFailedError: expected: <{a}> but was: <{b}>",
    "java.lang.IllegalStateException: {Noun} already {verb}",
    "java.lang.NullPointerException: Cannot invoke \"{Noun}.get()\" because \"{noun}\" is null",
]  # fmt: skip
BUILD = {
    "mypy": "src/{pkg}/{noun}.py:{line}: error: Incompatible types in assignment (expression has type \"{A}\", variable has type \"{B}\")  [assignment]",
    "tsc": "src/{noun}/{Noun}.tsx({line},{col}): error TS2741: Property '{other}' is missing in type '{{}}' but required in type '{Noun}Props'.",
    "govet": "./{pkg}/{noun}.go:{line}:{col}: undefined: {Noun}Options",
    "javac": "/home/runner/work/app/app/src/main/java/com/acme/{Noun}.java:{line}: error: cannot find symbol",
}  # fmt: skip
LINT = {
    "mypy": "src/{pkg}/{noun}.py:{line}:{col}: F841 Local variable `{other}` is assigned to but never used",
    "tsc": "  {line}:{col}  error  '{other}' is assigned a value but never used  @typescript-eslint/no-unused-vars",
    "govet": "{pkg}/{noun}.go:{line}:{col}: ineffectual assignment to {other} (ineffassign)",
    "javac": "[ant:checkstyle] [ERROR] /home/runner/work/app/app/src/main/java/com/acme/{Noun}.java:{line}:{col}: '{other}' hides a field. [HiddenField]",
}  # fmt: skip


@dataclass
class Test:
    """One named test; ``rate`` > 0 for a flaky one, which fails with one of ``messages``."""

    name: str
    file: str
    rate: float = 0.0
    messages: list[str] = field(default_factory=list)


@dataclass
class Suite:
    """One job's runner: a test suite (``runner`` pytest, jest, go, gradle) or a checker."""

    runner: str
    checker: str  # the build/lint tool of the repository's language
    tests: list[Test] = field(default_factory=list)


def words(rand: random.Random) -> dict[str, str]:
    noun, other = rand.sample(NOUNS, 2)
    return {
        "noun": noun,
        "Noun": noun.capitalize(),
        "other": other,
        "verb": rand.choice(VERBS),
        "pkg": rand.choice(["core", "api", "billing", "internal"]),
        "A": rand.choice(["int", "str | None", "list[str]"]),
        "B": rand.choice(["str", "int", "dict[str, Any]"]),
        "a": str(rand.randint(0, 50)),
        "b": str(rand.randint(51, 99)),
        "line": str(rand.randint(10, 600)),
        "col": str(rand.randint(1, 60)),
    }


def make_test(runner: str, rand: random.Random) -> Test:
    w = words(rand)
    noun, verb, other = w["noun"], w["verb"], w["other"]
    if runner == "pytest":
        param = rand.choice(["", "", f"[{other}]", "[eur]", "[async]"])
        cls = rand.choice(["", f"Test{noun.capitalize()}::"])
        file = f"tests/{rand.choice(['unit', 'api', 'e2e'])}/test_{noun}.py"
        return Test(f"{file}::{cls}test_{noun}_{verb}_{other}{param}", file)
    if runner == "jest":
        file = f"src/{noun}/{noun.capitalize()}.test.tsx"
        return Test(
            f"{noun.capitalize()} \u203a {verb} {other} when {rand.choice(NOUNS)} changes", file
        )
    if runner == "go":
        sub = rand.choice(["", f"/{other}", f"/{verb}_{other}"])
        return Test(f"Test{noun.capitalize()}{verb.capitalize()}{sub}", f"{noun}_test.go")
    cls = f"{noun.capitalize()}ServiceTest"
    return Test(f"{cls} > {verb}{other.capitalize()}()", f"{cls}.java")


def flaky_messages(runner: str, rand: random.Random) -> list[str]:
    pool = {"pytest": FLAKY_PY, "jest": FLAKY_JS, "go": FLAKY_GO}.get(runner, FLAKY_JAVA)
    return rand.sample(pool, rand.randint(1, min(3, len(pool))))


def broken_message(runner: str, rand: random.Random) -> str:
    pool = {"pytest": BROKEN_PY, "jest": BROKEN_JS, "go": BROKEN_GO}.get(runner, BROKEN_JAVA)
    return _fill(rand.choice(pool), words(rand))


def checker_message(checker: str, lint: bool, rand: random.Random) -> str:
    return _fill((LINT if lint else BUILD)[checker], words(rand))


def _fill(template: str, values: dict[str, str]) -> str:
    out = template
    for key, value in values.items():
        out = out.replace("{" + key + "}", value)
    return out.replace("{{}}", "{}")


def vary(text: str, rand: random.Random) -> str:
    """A flaky message as one run prints it: its numbers differ every time."""
    return (
        text.replace("{v}", str(rand.randint(1, 90)))
        .replace("{w}", str(rand.randint(1, 9)))
        .replace("{port}", str(rand.randint(32768, 60999)))
        .replace("{noun}", rand.choice(NOUNS))
        .replace("{line}", str(rand.randint(10, 400)))
    )


def test_log(suite: Suite, failures: list[tuple[Test, str]], rand: random.Random) -> str:
    """A test job's log with ``failures`` (test, message) among its passing tests."""
    total = len(suite.tests) * 7 + rand.randint(20, 300)
    seconds = f"{rand.uniform(4, 400):.2f}"
    r, lines = suite.runner, []
    if r == "pytest":
        lines += [
            "============================= test session starts ==============================",
            f"platform linux -- Python 3.12.{rand.randint(1, 8)}, pytest-8.{rand.randint(0, 3)}.0",
            f"rootdir: /home/runner/work/app/app\ncollected {total} items",
            "=================================== FAILURES ===================================",
        ]
        for test, message in failures:
            title = test.name.split("::", 1)[1].replace("::", ".")
            lines += [f"_____ {title} _____", "", "    def test(client):"]
            lines += [f"{m}" for m in message.split("\n")]
            lines.append(f"{test.file}:{rand.randint(10, 500)}: {message.split(':')[0][4:]}")
        lines.append(
            "=========================== short test summary info ============================"
        )
        lines += [f"FAILED {t.name} - {m.splitlines()[0][4:]}" for t, m in failures]
        lines.append(
            f"======= {len(failures)} failed, {total - len(failures)} passed in {seconds}s ======="
        )
    elif r == "jest":
        for test, message in failures:
            lines += [f"FAIL {test.file} ({rand.uniform(1, 30):.3f} s)", f"  ● {test.name}", ""]
            lines += ["    " + m for m in message.split("\n")]
            lines.append(
                f"      at Object.<anonymous> ({test.file}:{rand.randint(5, 300)}:{rand.randint(3, 40)})"
            )
        lines.append(
            f"Tests:       {len(failures)} failed, {total - len(failures)} passed, {total} total"
        )
        lines.append(f"Time:        {seconds} s")
    elif r == "go":
        for test, message in failures:
            top = test.name.split("/")[0]
            lines += [f"=== RUN   {test.name}"]
            lines += [f"    {m}" for m in message.replace("{file}", test.file).split("\n")]
            lines.append(f"--- FAIL: {top} ({rand.uniform(0, 9):.2f}s)")
            if "/" in test.name:
                lines.append(f"    --- FAIL: {test.name} ({rand.uniform(0, 3):.2f}s)")
        lines += ["FAIL", f"FAIL\tgithub.com/acme/app/{rand.choice(NOUNS)}\t{seconds}s", "FAIL"]
    else:
        for test, message in failures:
            lines += ["", f"{test.name} FAILED", f"    {message.splitlines()[0]}"]
            lines.append(f"        at {test.file}:{rand.randint(10, 400)}")
        lines += [
            f"{total} tests completed, {len(failures)} failed",
            "> Task :test FAILED",
            "FAILURE: Build failed with an exception.",
            f"BUILD FAILED in {rand.randint(1, 9)}m {rand.randint(0, 59)}s",
        ]
    return _framed(lines, rand)


def checker_log(messages: list[str], rand: random.Random) -> str:
    return _framed(
        [*messages, f"Found {len(messages)} error(s) in {rand.uniform(1, 90):.1f}s"], rand
    )


def _framed(lines: list[str], rand: random.Random) -> str:
    """A job's log as GitHub Actions keeps it: time-stamped, the step's exit at the end."""
    at = rand.randint(0, 86399)
    stamp = f"2026-02-{rand.randint(1, 28):02d}T{at // 3600:02d}:{at // 60 % 60:02d}:{at % 60:02d}.{rand.randint(0, 9999999):07d}Z"
    body = [
        "##[group]Run make test\nmake test\n##[endgroup]",
        *lines,
        "make: *** [Makefile:12: test] Error 1",
    ]
    body.append("##[error]Process completed with exit code 2.")
    return "\n".join(f"{stamp} {line}" for text in body for line in text.split("\n")) + "\n"


# Runner and network trouble: what each kind prints, with its own volatile parts.
INFRA = {
    "hosted": [
        "##[error]The hosted runner encountered an error while running your job. (Error Type: Disconnect).",
        "##[error]The runner has received a shutdown signal. This can happen when the runner service is stopped, or a manually started runner is canceled.",
    ],
    "checkout": [
        "remote: Internal Server Error\nfatal: unable to access 'https://github.com/acme/app/': The requested URL returned error: 500",
        "fatal: unable to access 'https://github.com/acme/app/': Failed to connect to github.com port 443 after {ms} ms: Couldn't connect to server",
    ],
    "registry": [
        "npm error code ECONNRESET\nnpm error network aborted",
        "ERROR: failed to solve: failed to fetch oauth token: unexpected status from GET request to https://ghcr.io/token: 503 Service Unavailable",
        "pip._vendor.urllib3.exceptions.ReadTimeoutError: HTTPSConnectionPool(host='files.pythonhosted.org', port=443): Read timed out.",
    ],
    "disk": [
        "System.IO.IOException: No space left on device : '/home/runner/runners/2.{ms}.0/_diag/Worker_{ms}.log'",
        "Error: ENOSPC: no space left on device, write",
    ],
    "service": [
        "##[error]Failed to initialize container postgres:16\n##[error]One or more containers failed to start.",
    ],
}


def infra_log(kind: str, rand: random.Random) -> str:
    text = rand.choice(INFRA[kind]).replace("{ms}", str(rand.randint(100, 99999)))
    lines = [f"Current runner version: '2.32{rand.randint(0, 9)}.0'", *text.split("\n")]
    return "\n".join(lines) + "\n"
