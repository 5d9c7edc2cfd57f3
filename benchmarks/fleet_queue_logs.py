"""What the ``queue`` fleet style's runners print: written apart from ``fleet_logs.py`` and
``fleet_suites.py``, with other runners, other names and other messages.

A test job prints in its runner's own format (pytest, unittest, jest, mocha, go
test, Gradle, Maven Surefire, RSpec, cargo test, dotnet test); a build or lint
job prints a compiler's or linter's diagnostics. Flaky tests fail in several
ways and not only with timeouts: an assertion on values that differ, a set-up
error, an ordering; a break fails with fixed values and, now and then, with a
timeout (a loop that never ends). Infrastructure prints what GitHub Actions,
registries and self-hosted runners print.
"""

from __future__ import annotations

import random

AREAS = [
    "account", "basket", "catalog", "checkout", "consent", "export", "gateway", "import",
    "inventory", "mailer", "pricing", "profile", "receipt", "scheduler", "search", "shipping",
    "signup", "storage", "tax", "upload", "wallet", "warehouse",
]  # fmt: skip
ACTIONS = [
    "applies_discount", "handles_empty", "rejects_expired", "retries_once", "keeps_order",
    "parses_header", "rounds_total", "streams_rows", "survives_restart", "updates_cache",
    "validates_input", "emits_event",
]  # fmt: skip
RUNNERS = {
    "python": ("pytest", "unittest"),
    "node": ("jest", "mocha"),
    "go": ("gotest",),
    "java": ("gradle", "surefire"),
    "ruby": ("rspec",),
    "rust": ("cargo",),
    "dotnet": ("dotnet",),
}
CHECKERS = {
    "python": ("ruff", "mypy"),
    "node": ("eslint", "tsc"),
    "go": ("golangci", "go build"),
    "java": ("checkstyle", "javac"),
    "ruby": ("rubocop", "ruby"),
    "rust": ("clippy", "rustc"),
    "dotnet": ("dotnet format", "csc"),
}


def test_name(runner: str, rand: random.Random) -> str:
    """One test's name as its runner prints it."""
    area, action = rand.choice(AREAS), rand.choice(ACTIONS)
    camel = "".join(p.capitalize() for p in action.split("_"))
    if runner == "pytest":
        cls = rand.choice(["", f"Test{area.capitalize()}::"])
        return f"tests/{rand.choice(['unit', 'integration'])}/test_{area}.py::{cls}test_{action}"
    if runner == "unittest":
        return f"test_{action} (tests.test_{area}.{area.capitalize()}Tests.test_{action})"
    if runner in ("jest", "mocha"):
        return f"{area.capitalize()}Service {action.replace('_', ' ')}"
    if runner == "gotest":
        return f"Test{area.capitalize()}{camel}"
    if runner in ("gradle", "surefire"):
        return f"com.shop.{area}.{area.capitalize()}ServiceTest.{camel[0].lower()}{camel[1:]}"
    if runner == "rspec":
        return f"./spec/{area}_spec.rb:{rand.randint(5, 300)} # {area.capitalize()} {action.replace('_', ' ')}"
    if runner == "cargo":
        return f"{area}::tests::{action}"
    return f"Shop.{area.capitalize()}.Tests.{area.capitalize()}Tests.{camel}"


def flaky_modes(rand: random.Random) -> list[str]:
    """The ways one flaky test fails: one to four, not all of them timeouts."""
    pool = [
        "AssertionError: expected {a} items, got {b}",
        "AssertionError: lists differ: ['{w}', '{x}'] != ['{x}', '{w}']",
        "TimeoutError: condition not met within {s} seconds",
        "ConnectionError: connection to localhost:{port} refused",
        "setup failed: fixture '{w}_db' raised OperationalError: too many clients",
        "AssertionError: expected timestamp {t} to be after {t}",
        "StaleElementReferenceError: element is not attached to the page document",
        "Deadlock found when trying to get lock; try restarting transaction",
        "AssertionError: expected status 200, got {code}",
    ]
    return rand.sample(pool, rand.choice([1, 1, 2, 2, 3, 4]))


def break_message(rand: random.Random) -> str:
    """What a break (a pull request's, or one on the default branch) makes a test print."""
    area, other = rand.sample(AREAS, 2)
    pool = [
        f"AssertionError: expected '{area}' to equal '{other}'",
        f"KeyError: '{area}_id'",
        f"TypeError: {area}() takes 2 positional arguments but 3 were given",
        f"NullPointerException: {area.capitalize()}.{other}() is null",
        f"AssertionError: expected total {rand.randint(10, 99)}.00, got {rand.randint(100, 999)}.00",
        f"TimeoutError: {area} worker never finished (waited {rand.randint(30, 90)} seconds)",
    ]
    return rand.choices(pool, weights=[3, 2, 2, 2, 2, 1])[0]


def checker_line(checker: str, rand: random.Random) -> str:
    """One diagnostic a build or lint job prints (fixed when the break is made)."""
    area, other = rand.sample(AREAS, 2)
    line, col = rand.randint(3, 400), rand.randint(1, 80)
    return {
        "ruff": f"src/{area}/{other}.py:{line}:{col}: F401 [*] `{other}.utils` imported but unused",
        "mypy": f'src/{area}/api.py:{line}: error: Argument 1 to "{other}" has incompatible type "str"; expected "int"  [arg-type]',
        "eslint": f"/home/runner/work/shop/shop/src/{area}/{other}.js\n  {line}:{col}  error  '{other}' is not defined  no-undef",
        "tsc": f"src/{area}/{other}.ts({line},{col}): error TS2551: Property '{other}Id' does not exist on type '{area.capitalize()}'.",
        "golangci": f"internal/{area}/{other}.go:{line}:{col}: Error return value of `{other}.Close` is not checked (errcheck)",
        "go build": f"internal/{area}/{other}.go:{line}:{col}: undefined: {other}.New{area.capitalize()}",
        "checkstyle": f"[ERROR] src/main/java/com/shop/{area}/{other.capitalize()}.java:[{line},{col}] (imports) UnusedImports: Unused import",
        "javac": f"[ERROR] /home/runner/work/shop/shop/src/main/java/com/shop/{area}/{other.capitalize()}.java:[{line},{col}] cannot find symbol",
        "rubocop": f"app/{area}/{other}.rb:{line}:{col}: C: Style/StringLiterals: Prefer single-quoted strings.",
        "ruby": f"app/{area}/{other}.rb:{line}: syntax error, unexpected end-of-input",
        "clippy": f"error: this `if` has identical blocks\n  --> src/{area}/{other}.rs:{line}:{col}",
        "rustc": f"error[E0433]: failed to resolve: use of undeclared type `{other.capitalize()}`\n  --> src/{area}.rs:{line}:{col}",
        "dotnet format": f"src/{area.capitalize()}/{other.capitalize()}.cs({line},{col}): error WHITESPACE: Fix whitespace formatting.",
        "csc": f"src/{area.capitalize()}/{other.capitalize()}.cs({line},{col}): error CS0103: The name '{other}' does not exist in the current context",
    }[checker]


def fill(text: str, rand: random.Random) -> str:
    """A flaky message as one run prints it: its values differ each time."""
    a = rand.randint(1, 40)
    return (
        text.replace("{a}", str(a))
        .replace("{b}", str(a + rand.choice([-2, -1, 1, 3])))
        .replace("{s}", str(rand.choice([5, 10, 15, 30])))
        .replace("{port}", str(rand.randint(30000, 61000)))
        .replace("{w}", rand.choice(AREAS))
        .replace("{x}", rand.choice(AREAS))
        .replace("{t}", f"2026-03-{rand.randint(1, 28):02d}T{rand.randint(0, 23):02d}:{rand.randint(0, 59):02d}:00Z")
        .replace("{code}", str(rand.choice([500, 502, 404, 409])))
    )  # fmt: skip


def test_log(runner: str, failures: list[tuple[str, str]], rand: random.Random) -> str:
    """A test job's log naming ``failures`` (test, message) in ``runner``'s format."""
    total, secs = rand.randint(150, 2400), f"{rand.uniform(8, 900):.2f}"
    out: list[str] = []
    if runner == "pytest":
        out.append(f"collected {total} items")
        for name, msg in failures:
            out += [f"____ {name.rsplit('::', 1)[1]} ____", f"E       {msg}", ""]
        out.append(
            "=========================== short test summary info ==========================="
        )
        for name, msg in failures:
            word = "ERROR" if msg.startswith("setup failed") else "FAILED"
            out.append(f"{word} {name} - {msg[:70]}")
        out.append(f"==== {len(failures)} failed, {total - len(failures)} passed in {secs}s ====")
    elif runner == "unittest":
        for name, msg in failures:
            out += ["=" * 70, f"FAIL: {name}", "-" * 70, "Traceback (most recent call last):"]
            out += [
                f'  File "/home/runner/work/shop/shop/tests/x.py", line {rand.randint(9, 300)}',
                msg,
            ]
        out += ["-" * 70, f"Ran {total} tests in {secs}s", "", f"FAILED (failures={len(failures)})"]
    elif runner == "jest":
        for name, msg in failures:
            suite, title = name.split(" ", 1)
            out += [f"  \u25cf {suite} \u203a {title}", "", f"    {msg}", ""]
        out.append(f"Tests:       {len(failures)} failed, {total} total")
    elif runner == "mocha":
        out.append(f"  {total - len(failures)} passing ({rand.randint(2, 90)}s)")
        out.append(f"  {len(failures)} failing")
        for i, (name, msg) in enumerate(failures, 1):
            suite, title = name.split(" ", 1)
            out += ["", f"  {i}) {suite}", f"       {title}:", f"     {msg}"]
    elif runner == "gotest":
        for name, msg in failures:
            out += [
                f"=== RUN   {name}",
                f"    {name.lower()}_test.go:{rand.randint(9, 300)}: {msg}",
            ]
            out.append(f"--- FAIL: {name} ({rand.uniform(0, 30):.2f}s)")
        out += ["FAIL", f"FAIL\tgithub.com/shop/app/internal\t{secs}s"]
    elif runner == "gradle":
        for name, msg in failures:
            cls, method = name.rsplit(".", 1)
            out += [f"{cls.rsplit('.', 1)[1]} > {method}() FAILED", f"    {msg}"]
        out += [f"{total} tests completed, {len(failures)} failed", "> Task :test FAILED"]
    elif runner == "surefire":
        for name, msg in failures:
            out += [f"[ERROR] {name} -- Time elapsed: {rand.uniform(0, 9):.3f} s <<< FAILURE!", msg]
        out.append(f"[ERROR] Tests run: {total}, Failures: {len(failures)}, Errors: 0, Skipped: 0")
    elif runner == "rspec":
        out += ["Failures:", ""]
        for i, (name, msg) in enumerate(failures, 1):
            where, title = name.split(" # ", 1)
            out += [
                f"  {i}) {title}",
                "     Failure/Error: expect(subject).to be_valid",
                f"       {msg}",
            ]
            out += [f"     # {where}:in `block (2 levels) in <top (required)>'", ""]
        out.append(
            f"Finished in {secs} seconds (files took {rand.uniform(0.5, 4):.2f} seconds to load)"
        )
        out += [f"{total} examples, {len(failures)} failures", "", "Failed examples:", ""]
        out += [f"rspec {name}" for name, _ in failures]
    elif runner == "cargo":
        for name, msg in failures:
            out += [
                f"---- {name} stdout ----",
                f"thread '{name}' panicked at src/lib.rs:{rand.randint(5, 400)}:{rand.randint(1, 60)}:",
                msg,
            ]
        out += ["failures:", *[f"    {n}" for n, _ in failures]]
        out.append(
            f"test result: FAILED. {total} passed; {len(failures)} failed; finished in {secs}s"
        )
    else:
        for name, msg in failures:
            out += [
                f"  Failed {name} [{rand.randint(1, 900)} ms]",
                "  Error Message:",
                f"   {msg}",
            ]
        out.append(
            f"Failed!  - Failed: {len(failures)}, Passed: {total}, Skipped: 0, Total: {total}"
        )
    code = len(failures) if runner == "mocha" else EXIT.get(runner, 1)
    return framed(out, rand, code)


def checker_log(checker: str, lines: list[str], rand: random.Random) -> str:
    tail = f"Found {len(lines)} error{'s' if len(lines) > 1 else ''}."
    return framed([f"$ {checker}", *lines, tail], rand, EXIT.get(checker, 1))


# How each tool exits when something failed (mocha: the number of failing tests).
EXIT = {"cargo": 101, "clippy": 101, "tsc": 2, "dotnet format": 2}


def framed(lines: list[str], rand: random.Random, code: int = 1) -> str:
    """A step's log as a runner keeps it: half the jobs time-stamp each line."""
    body = [*lines, f"##[error]Process completed with exit code {code}."]
    if rand.random() < 0.5:
        return "\n".join(body) + "\n"
    h, m = rand.randint(0, 23), rand.randint(0, 59)
    stamp = f"2026-03-{rand.randint(1, 28):02d}T{h:02d}:{m:02d}:{rand.randint(0, 59):02d}.{rand.randint(0, 9999999):07d}Z"
    return "\n".join(f"{stamp} {x}" for line in body for x in line.split("\n")) + "\n"


# Runner, forge and network trouble. Fleet-wide (the forge, a registry), one runner pool
# (self-hosted or macOS machines, across repositories), one repository (a service container,
# an expired token), and lone blips (a runner lost, a job killed).
INFRA = {
    "forge": [
        "fatal: unable to access 'https://github.com/shop/{repo}/': The requested URL returned error: 502",
        "Error: Failed to download action 'https://api.github.com/repos/actions/checkout/tarball/{sha}'. Error: Response status code does not indicate success: 503 (Service Unavailable).",
    ],
    "registry": [
        "npm ERR! code ETIMEDOUT\nnpm ERR! network request to https://registry.npmjs.org/{pkg} failed, reason: connect ETIMEDOUT 104.16.{n}.35:443",
        "ERROR: Could not install packages due to an OSError: HTTPSConnectionPool(host='pypi.org', port=443): Read timed out. (read timeout={n})",
        "Could not GET 'https://repo.maven.apache.org/maven2/org/{pkg}/{pkg}.pom'. Received status code 503 from server: Service Unavailable",
        "toomanyrequests: You have reached your pull rate limit. You may increase the limit by authenticating and upgrading",
    ],
    "pool": [
        "##[error]The self-hosted runner: {host} lost communication with the server. Verify the machine is running and has a healthy network connection.",
        "##[error]No space left on device : '/opt/actions-runner/_work/_temp/{sha}.sh'",
        "##[error]The job was not acquired by Runner of type self-hosted even after multiple attempts",
    ],
    "service": [
        '##[error]Failed to initialize container postgres:15\nError response from daemon: Get "https://registry-1.docker.io/v2/": net/http: request canceled while waiting for connection',
        "##[error]Failed to initialize container redis:7\n##[error]Docker pull failed with exit code 1",
    ],
    "blip": [
        "##[error]The runner has received a shutdown signal. This can happen when the runner service is stopped, or a manually started runner is canceled.",
        "Killed\n##[error]Process completed with exit code 137.",
        "fatal: early EOF\nfatal: fetch-pack: invalid index-pack output",
    ],
}


def infra_log(kind: str, repo: str, rand: random.Random) -> str:
    text = rand.choice(INFRA[kind])
    text = (
        text.replace("{repo}", repo.split("/")[-1])
        .replace("{sha}", f"{rand.getrandbits(64):016x}")
        .replace("{n}", str(rand.randint(2, 250)))
        .replace("{pkg}", rand.choice(["lodash", "react-dom", "jackson-core", "guava", "left-pad"]))
        .replace("{host}", f"runner-{rand.choice(['a', 'b', 'c'])}{rand.randint(1, 40):02d}")
    )
    return f"Runner name: 'runner-{rand.randint(1, 99)}'\n{text}\n"
