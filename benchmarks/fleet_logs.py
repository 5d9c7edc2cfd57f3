"""What the simulated fleet's tools print when a job fails: the logs of ``fleet_history.py``.

A failure is a list of lines fixed when it is made (the test, the file, the
error code) with volatile parts left as placeholders (``{dur}``, ``{n}``,
``{id}``, ``{port}``, ``{tmp}``) filled in each time a run prints it, around
the tool's own preamble and summary.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

LANGUAGES = ["python", "typescript", "go", "rust", "java", "javascript"]

WORDS = [
    "login",
    "checkout",
    "invoice",
    "cache",
    "retry",
    "session",
    "export",
    "upload",
    "search",
    "billing",
    "profile",
    "webhook",
    "scheduler",
    "parser",
    "router",
    "quota",
    "audit",
    "token",
]
TS_ERRORS = [
    ("TS2322", "Type 'string' is not assignable to type 'number'."),
    (
        "TS2345",
        "Argument of type 'string | undefined' is not assignable to parameter of type 'string'.",
    ),
    ("TS2339", "Property '{w}Id' does not exist on type '{W}Props'."),
    ("TS2554", "Expected 2 arguments, but got 1."),
    ("TS7006", "Parameter '{w}' implicitly has an 'any' type."),
]
RUST_ERRORS = [
    ("E0308", "mismatched types"),
    ("E0425", "cannot find value `{w}_count` in this scope"),
    ("E0599", "no method named `{w}` found for struct `{W}` in the current scope"),
    ("E0382", "borrow of moved value: `{w}`"),
]


def _fill(text: str, word: str) -> str:
    return text.replace("{w}", word).replace("{W}", word.capitalize())


def volatile(text: str, rand: random.Random, repo: str) -> str:
    """The placeholders of a line filled as one run prints them."""
    return (
        text.replace("{dur}", f"{rand.uniform(0.01, 40):.2f}")
        .replace("{ms}", str(rand.randint(3, 9000)))
        .replace("{n}", str(rand.randint(2, 400)))
        .replace("{id}", f"{rand.getrandbits(48):012x}")
        .replace("{port}", str(rand.randint(30000, 60000)))
        .replace(
            "{tmp}",
            f"/tmp/pytest-of-runner/pytest-{rand.randint(1, 99)}/tmp{rand.getrandbits(24):x}",
        )
        .replace("{home}", f"/home/runner/work/{repo.split('/')[-1]}/{repo.split('/')[-1]}")
        .replace("{ip}", f"10.{rand.randint(0, 255)}.{rand.randint(0, 255)}.{rand.randint(1, 254)}")
    )


@dataclass
class Tool:
    """One job's tool: how it prints a regression, a change's failure, a flaky test."""

    kind: str  # pytest, jest, gotest, tsc, cargo, cargotest, maven, eslint, ruff
    repo: str

    def render(self, lines: str, rand: random.Random) -> str:
        head = [volatile(line, rand, self.repo) for line in PREAMBLE.get(self.kind, [])]
        body = [volatile(line, rand, self.repo) for line in lines.split("\n")]
        tail = [volatile(line, rand, self.repo) for line in SUMMARY.get(self.kind, [])]
        stamp = f"2026-01-{rand.randint(1, 28):02d}T{rand.randint(0, 23):02d}:{rand.randint(0, 59):02d}:{rand.randint(0, 59):02d}.{rand.randint(0, 9999999):07d}Z "
        prefix = stamp if rand.random() < 0.5 else ""
        return "\n".join(prefix + line for line in head + body + tail + [EXIT]) + "\n"

    def regression(self, rand: random.Random) -> str:
        return self._failure(rand, deterministic=True)

    def change_failure(self, rand: random.Random) -> str:
        return self._failure(rand, deterministic=True)

    def flaky_failure(self, rand: random.Random) -> str:
        return self._failure(rand, deterministic=False)

    def _failure(self, rand: random.Random, *, deterministic: bool) -> str:
        w = rand.choice(WORDS)
        mod = rand.choice(WORDS)
        test = f"test_{w}_{rand.choice(['works', 'retries', 'rejects_invalid', 'roundtrip', 'paginates'])}"
        line = rand.randint(12, 480)
        if self.kind == "pytest":
            if deterministic:
                what = rand.choice(
                    [
                        f"E       assert {rand.randint(200, 500)} == 200",
                        f"E       KeyError: '{w}_id'",
                        f"E       AttributeError: 'NoneType' object has no attribute '{w}'",
                        f"E       TypeError: {w}() missing 1 required positional argument: '{mod}'",
                    ]
                )
            else:
                what = rand.choice(
                    [
                        "E       TimeoutError: timed out after {dur}s waiting for worker",
                        f"E       AssertionError: assert {{n}} == {rand.randint(2, 9)}",
                        "E       ConnectionRefusedError: [Errno 111] Connection refused",
                        "E       sqlite3.OperationalError: database is locked",
                    ]
                )
            name = what.split(":")[0].split()[-1] if ":" in what else "AssertionError"
            return "\n".join(
                [
                    f"__________________________ {test} __________________________",
                    f"    def {test}({mod}_client):",
                    f">       result = {mod}_client.{w}()",
                    what,
                    f"tests/test_{mod}.py:{line}: {name}",
                    "=========================== short test summary info ============================",
                    f"FAILED tests/test_{mod}.py::{test} - {what[8:]}",
                ]
            )
        if self.kind == "jest":
            comp = w.capitalize() + rand.choice(["Form", "List", "Page", "Button"])
            if deterministic:
                what = rand.choice(
                    [
                        [
                            "expect(received).toBe(expected) // Object.is equality",
                            "",
                            f'Expected: "{w}"',
                            f'Received: "{mod}"',
                        ],
                        [f"TypeError: Cannot read properties of undefined (reading '{w}')"],
                        [
                            "expect(received).toHaveLength(expected)",
                            "",
                            f"Expected length: {rand.randint(2, 9)}",
                            "Received length: 0",
                        ],
                    ]
                )
            else:
                what = rand.choice(
                    [
                        [
                            'thrown: "Exceeded timeout of 5000 ms for a test.',
                            'Add a timeout value to this test to increase the timeout"',
                        ],
                        [
                            "TestingLibraryElementError: Unable to find an element with the text: Loading..."
                        ],
                        [
                            "expect(jest.fn()).toHaveBeenCalledTimes(expected)",
                            "",
                            "Expected number of calls: 1",
                            "Received number of calls: {n}",
                        ],
                    ]
                )
            return "\n".join(
                [
                    f"FAIL src/components/{comp}.test.tsx ({{dur}} s)",
                    f"  ● {comp} \u203a {w} {rand.choice(['renders', 'updates', 'submits'])}",
                    "",
                    *["    " + x for x in what],
                    "",
                    f"      at Object.<anonymous> (src/components/{comp}.test.tsx:{line}:{rand.randint(3, 40)})",
                ]
            )
        if self.kind == "gotest":
            fn = "Test" + w.capitalize() + mod.capitalize()
            if deterministic:
                what = rand.choice(
                    [
                        f"    {mod}_test.go:{line}: expected {w} to be {rand.randint(1, 9)}, got {rand.randint(10, 99)}",
                        f"    {mod}_test.go:{line}: unexpected error: {w}: invalid argument",
                    ]
                )
                return "\n".join(
                    [
                        f"--- FAIL: {fn} ({{dur}}s)",
                        what,
                        "FAIL",
                        f"FAIL\tgithub.com/{self.repo}/internal/{mod}\t{{dur}}s",
                    ]
                )
            what = rand.choice(
                [
                    f"    {mod}_test.go:{line}: context deadline exceeded after {{dur}}s",
                    f"    {mod}_test.go:{line}: got {{n}} events, want {rand.randint(2, 9)}",
                    "WARNING: DATA RACE",
                ]
            )
            return "\n".join(
                [
                    f"--- FAIL: {fn} ({{dur}}s)",
                    what,
                    "FAIL",
                    f"FAIL\tgithub.com/{self.repo}/internal/{mod}\t{{dur}}s",
                ]
            )
        if self.kind == "tsc":
            code, message = rand.choice(TS_ERRORS)
            return (
                f"src/{mod}/{w}.ts({line},{rand.randint(3, 40)}): error {code}: {_fill(message, w)}"
            )
        if self.kind in ("cargo", "cargotest"):
            if self.kind == "cargotest":
                if deterministic:
                    return "\n".join(
                        [
                            f"thread 'tests::{test}' panicked at src/{mod}.rs:{line}:{rand.randint(5, 30)}:",
                            "assertion `left == right` failed",
                            f"  left: {rand.randint(0, 9)}",
                            f" right: {rand.randint(10, 99)}",
                            "failures:",
                            f"    tests::{test}",
                            "test result: FAILED. {n} passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in {dur}s",
                            "error: test failed, to rerun pass `--lib`",
                        ]
                    )
                return "\n".join(
                    [
                        f"thread 'tests::{test}' panicked at src/{mod}.rs:{line}:{rand.randint(5, 30)}:",
                        rand.choice(
                            [
                                "called `Result::unwrap()` on an `Err` value: Elapsed(())",
                                "channel closed before {n} messages",
                            ]
                        ),
                        "failures:",
                        f"    tests::{test}",
                        "error: test failed, to rerun pass `--lib`",
                    ]
                )
            code, message = rand.choice(RUST_ERRORS)
            return "\n".join(
                [
                    f"error[{code}]: {_fill(message, w)}",
                    f"  --> src/{mod}.rs:{line}:{rand.randint(5, 30)}",
                    "   |",
                    f"error: could not compile `{self.repo.split('/')[-1]}` (lib) due to 1 previous error",
                ]
            )
        if self.kind == "maven":
            cls = w.capitalize() + "ServiceTest"
            if deterministic:
                what = rand.choice(
                    [
                        f"org.opentest4j.AssertionFailedError: expected: <{rand.randint(1, 9)}> but was: <{rand.randint(10, 99)}>",
                        f'java.lang.NullPointerException: Cannot invoke "com.acme.{mod.capitalize()}.get{w.capitalize()}()" because "{w}" is null',
                    ]
                )
            else:
                what = rand.choice(
                    [
                        "org.awaitility.core.ConditionTimeoutException: Condition was not fulfilled within 10 seconds.",
                        "java.net.SocketTimeoutException: Read timed out waiting for localhost:{port}",
                    ]
                )
            return "\n".join(
                [
                    f"[ERROR] Tests run: {{n}}, Failures: 1, Errors: 0, Skipped: 0, Time elapsed: {{dur}} s <<< FAILURE! - in com.acme.{cls}",
                    f"[ERROR] {w}{rand.choice(['Works', 'Rejects', 'Retries'])}(com.acme.{cls})  Time elapsed: {{dur}} s  <<< FAILURE!",
                    what,
                    f"\tat com.acme.{cls}.{w}({cls}.java:{line})",
                    "[ERROR] Failed to execute goal org.apache.maven.plugins:maven-surefire-plugin:3.2.5:test (default-test) on project app: There are test failures.",
                ]
            )
        if self.kind == "javac":
            return "\n".join(
                [
                    f"[ERROR] {{home}}/src/main/java/com/acme/{w.capitalize()}.java:[{line},{rand.randint(5, 40)}] cannot find symbol",
                    f"[ERROR]   symbol:   method {mod}()",
                    "[ERROR] Failed to execute goal org.apache.maven.plugins:maven-compiler-plugin:3.13.0:compile (default-compile) on project app: Compilation failure",
                ]
            )
        if self.kind == "eslint":
            rule = rand.choice(
                [
                    "no-unused-vars",
                    "@typescript-eslint/no-explicit-any",
                    "react-hooks/exhaustive-deps",
                    "eqeqeq",
                ]
            )
            return "\n".join(
                [
                    f"{{home}}/src/{mod}/{w}.ts",
                    f"  {line}:{rand.randint(3, 40)}  error  '{w}' is defined but never used  {rule}",
                    "",
                    "✖ 1 problem (1 error, 0 warnings)",
                ]
            )
        if self.kind == "ruff":
            code = rand.choice(["F401", "E501", "F841", "B006", "UP007"])
            return "\n".join(
                [
                    f"src/{mod}/{w}.py:{line}:{rand.randint(1, 80)}: {code} `{w}` imported but unused",
                    "Found 1 error.",
                ]
            )
        if self.kind == "golint":
            return "\n".join(
                [
                    f"internal/{mod}/{w}.go:{line}:{rand.randint(2, 40)}: Error return value of `{w}.Close` is not checked (errcheck)",
                    'level=error msg="issues found"',
                ]
            )
        if self.kind == "gobuild":
            return "\n".join(
                [
                    f"# github.com/{self.repo}/internal/{mod}",
                    f"internal/{mod}/{w}.go:{line}:{rand.randint(2, 40)}: undefined: {w.capitalize()}Config",
                ]
            )
        # npm / webpack build
        return "\n".join(
            [
                f"ERROR in ./src/{mod}/{w}.js {line}:{rand.randint(2, 40)}",
                f"Module not found: Error: Can't resolve './{mod}-{w}' in '{{home}}/src/{mod}'",
                "webpack compiled with 1 error",
                "npm ERR! code ELIFECYCLE",
                "npm ERR! errno 1",
            ]
        )


EXIT = "##[error]Process completed with exit code 1."
PREAMBLE = {
    "pytest": [
        "============================= test session starts ==============================",
        "platform linux -- Python 3.11.9, pytest-8.3.2, pluggy-1.5.0",
        "rootdir: {home}",
        "collected {n} items",
        "tests/test_api.py .................                                      [ 40%]",
        "=================================== FAILURES ===================================",
    ],
    "jest": ["> jest --ci", "PASS src/utils/format.test.ts ({dur} s)"],
    "gotest": [
        "go: downloading github.com/stretchr/testify v1.9.0",
        "=== RUN   TestHealth",
        "--- PASS: TestHealth ({dur}s)",
    ],
    "tsc": ["> tsc --noEmit -p tsconfig.json"],
    "cargo": [
        "    Updating crates.io index",
        "   Compiling serde v1.0.203",
        "   Compiling app v0.1.0 ({home})",
    ],
    "cargotest": [
        "   Compiling app v0.1.0 ({home})",
        "    Finished `test` profile [unoptimized + debuginfo] target(s) in {dur}s",
        "running {n} tests",
    ],
    "maven": [
        "[INFO] Scanning for projects...",
        "[INFO] -------------------------------------------------------",
        "[INFO]  T E S T S",
    ],
    "javac": [
        "[INFO] Scanning for projects...",
        "[INFO] --- compiler:3.13.0:compile (default-compile) @ app ---",
    ],
    "eslint": ["> eslint . --max-warnings 0"],
    "ruff": ["ruff check ."],
    "golint": ["Running golangci-lint run --timeout 5m"],
    "gobuild": ["go build ./..."],
    "npm": ["> webpack --mode production", "asset main.js {n} KiB [emitted] (name: main)"],
}
SUMMARY = {
    "pytest": [
        "========================= 1 failed, {n} passed in {dur}s ========================="
    ],
    "jest": ["Tests:       1 failed, {n} passed, {n} total", "Time:        {dur} s"],
    "gotest": [],
    "tsc": [],
    "maven": ["[INFO] BUILD FAILURE", "[INFO] Total time:  {dur} s"],
    "javac": ["[INFO] BUILD FAILURE"],
}

TOOLS = {
    ("python", "build"): "ruff",
    ("python", "test"): "pytest",
    ("python", "lint"): "ruff",
    ("python", "integration"): "pytest",
    ("typescript", "build"): "tsc",
    ("typescript", "test"): "jest",
    ("typescript", "lint"): "eslint",
    ("typescript", "integration"): "jest",
    ("javascript", "build"): "npm",
    ("javascript", "test"): "jest",
    ("javascript", "lint"): "eslint",
    ("javascript", "integration"): "jest",
    ("go", "build"): "gobuild",
    ("go", "test"): "gotest",
    ("go", "lint"): "golint",
    ("go", "integration"): "gotest",
    ("rust", "build"): "cargo",
    ("rust", "test"): "cargotest",
    ("rust", "lint"): "cargo",
    ("rust", "integration"): "cargotest",
    ("java", "build"): "javac",
    ("java", "test"): "maven",
    ("java", "lint"): "javac",
    ("java", "integration"): "maven",
}


def tool_for(language: str, job: str, rand: random.Random, repo: str) -> Tool:
    return Tool(TOOLS[(language, job)], repo)


def infra_log(kind: str, tool: Tool, repo: str, rand: random.Random) -> str:
    """A job failed by the infrastructure: the network, a registry, the runner."""
    package = rand.choice(WORDS)
    lines = {
        "dns": [
            f"fatal: unable to access 'https://github.com/acme/{package}-shared.git/': Could not resolve host: github.com",
        ],
        "registry": {
            "pytest": [
                "WARNING: Retrying (Retry(total=0, connect=None, read=None, redirect=None, status=None)) after connection broken by 'ReadTimeoutError(\"HTTPSConnectionPool(host='pypi.org', port=443): Read timed out. (read timeout=15)\")'",
                f"ERROR: Could not find a version that satisfies the requirement {package}-client==2.{{n}}.0",
            ],
            "gotest": [
                f'go: github.com/acme/{package}@v1.{{n}}.0: Get "https://proxy.golang.org/github.com/acme/{package}/@v/v1.{{n}}.0.mod": dial tcp {{ip}}:443: i/o timeout'
            ],
            "maven": [
                f"[ERROR] Failed to execute goal on project app: Could not resolve dependencies: Could not transfer artifact com.acme:{package}:pom:1.{{n}} from/to central (https://repo.maven.apache.org/maven2): Connection reset"
            ],
        }.get(
            tool.kind,
            [
                f"npm ERR! network request to https://registry.npmjs.org/{package} failed, reason: getaddrinfo EAI_AGAIN registry.npmjs.org"
            ],
        ),
        "proxy": [
            "error: RPC failed; curl 92 HTTP/2 stream 5 was not closed cleanly: CANCEL (err 8)",
            "fatal: early EOF",
            "fatal: fetch-pack: invalid index-pack output",
        ],
        "docker": [
            "Unable to find image 'ghcr.io/acme/ci-base:latest' locally",
            'docker: Error response from daemon: Get "https://ghcr.io/v2/": net/http: request canceled while waiting for connection (Client.Timeout exceeded while awaiting headers).',
        ],
        "runner": [
            "##[error]The runner has received a shutdown signal. This can happen when the runner service is stopped, or a manually started runner is canceled.",
            "##[error]The operation was canceled.",
        ],
        "disk": [
            f"OSError: [Errno 28] No space left on device: '{{tmp}}/{package}'",
            "Error: write /var/lib/docker/tmp/GetImageBlob{n}: no space left on device",
        ],
        "oom": ["Killed", "##[error]Process completed with exit code 137."],
    }[kind]
    body = "\n".join(volatile(line, rand, repo) for line in lines)
    return f"Run actions/checkout@v4\nSyncing repository: {repo}\n{body}\n"
