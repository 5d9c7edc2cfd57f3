"""Resolver benchmark: latency, throughput and recall on the embedded stack.

    .venv/bin/python benchmarks/resolve.py                  # 200 rules, 2,000 failures, 3 runs
    .venv/bin/python benchmarks/resolve.py --quick          # smoke run, under a minute
    .venv/bin/python benchmarks/resolve.py --json --runs 5  # one JSON object on stdout
    .venv/bin/python benchmarks/resolve.py --profile        # plus an in-process time breakdown
                                                            # and SQL statements/round trips per failure
    .venv/bin/python benchmarks/resolve.py --database-url postgresql+psycopg://localhost/theow
                                                            # the store on PostgreSQL (migrated first)
    .venv/bin/python benchmarks/resolve.py --ledger         # each failure with where it ran (job and
                                                            # run facts): its run recorded, its origin decided

It builds 200 rules (the shipped ones, at most half, plus generated ones across
ecosystems) and CI logs of tens of KB in a fleet-like mix (most failures exact repeats of
a hot set, about a fifth matching no rule, some validating two rules), starts
Valkey, Milvus Lite and SQLite (or ``--database-url``) on free ports in a temporary home, syncs the
index once, starts one resolver worker (concurrency 2) and warms it. Each run:

* floor: a plain in-process loop trying every rule's conditions with Python
  ``re``, first rule that validates wins. It is also the ground truth: every
  verdict must name a rule the floor found valid (missed = 0).
* latency: single failures submitted one at a time with ``theow_client``,
  submit to verdict, p50/p99.
* throughput: every failure submitted at once, failures/s from the first
  submit to the last verdict, and its ratio to the floor of the same run.

Figures are medians over runs; ratios to the floor make runs on a shared,
noisy machine comparable. Targets (2 cores, issue 15): p50 <= 15 ms, p99 <= 60 ms,
>= 150 failures/s, zero missed validating rules; with --profile, at most 0.2
failures in 1 embedded by the model (a repeat's vector comes from the process or
from Redis, shared by the fleet).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import shutil
import socket
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any
from unittest import mock

import regex
import resolve_stages
import yaml
from rich.console import Console
from rich.table import Table
from sqlalchemy.engine import make_url

from theow_client import TheowClient, Verdict, names
from theow_client.client import build_payload
from theow_client.messages import SubmitRequest
from theow_workers import runtime as runtime_mod
from theow_workers.config import Settings
from theow_workers.core.resolve import plan as resolver_mod
from theow_workers.core.resolve import service as service_mod
from theow_workers.core.rules.operators import Operand, Operator
from theow_workers.core.rules.scanner import Scanner
from theow_workers.core.rules.schema import FactCondition, Rule, as_text
from theow_workers.runtime import Runtime
from theow_workers.stack import EmbeddedStack
from theow_workers.store.tokens import TokenStore

ROOT = Path(__file__).resolve().parent.parent
# A network blip in a log with a real error: its examples make two rules validate.
FLAKE = ROOT / "rules" / "network_flake.rule.yaml"
TARGETS = {"latency_p50_ms": 15.0, "latency_p99_ms": 60.0, "throughput_fps": 150.0, "missed": 0}
EMBEDDINGS_TARGET = 0.2  # model calls per failure, in the profile
A = "auth billing cart checkout search ledger media notify profile quota report shipping".split()  # noqa: SIM905
B = ["api", "worker", "gateway", "scheduler", "indexer", "exporter", "proxy", "store"]
UNKNOWN = ["legacy", "shadow", "canary", "sandbox", "orphan"]  # keys no rule knows
ACTIONS = '''"""Benchmark actions: instant, one per side."""
from theow_workers import action


@action("bench_note")
def bench_note(detail: str) -> dict:
    """Record what a benchmark rule extracted (worker-side)."""
    return {"status": "ok", "detail": detail}


@action("bench_patch", client_side=True)
def bench_patch(workspace: str, target: str) -> dict:
    """Pretend to patch the build workspace (runs on the build agent)."""
    return {"status": "ok", "patched": target}
'''
# language, problem_type, key style, regex ({k} = rule key), signature, description, contains
TEMPLATES = [
    ("go", "dependency_resolution", "-", r"go: (?P<module>example\.com/{k}(?:/v\d+)?)@(?P<version>v[\d.]+): reading \S+: 410 Gone",
     "go: example.com/{k}/v2@v1.{n}.0: reading https://proxy.golang.org/example.com/{k}/v2/@v/v1.{n}.0.mod: 410 Gone",
     "The Go module proxy no longer serves example.com/{k}: the pinned version was retracted.", None),
    ("python", "import_error", "_", r"ImportError: cannot import name '(?P<name>\w+)' from '{k}'",
     "ImportError: cannot import name '{w}' from '{k}' (/opt/venv/lib/python3.11/site-packages/{k}/__init__.py)",
     "A new release of {k} removed a name the code imports; pin the previous release.", None),
    ("node", "dependency_resolution", "-", r"npm (?:ERR!|error) 404 Not Found - GET https://registry\.npmjs\.org/(?P<package>@acme/{k})\b",
     "npm error 404 Not Found - GET https://registry.npmjs.org/@acme/{k} - Not found",
     "The private npm package @acme/{k} is not published to the registry this build uses.", None),
    ("java", "build_failure", "-", r"Execution failed for task ':{k}:(?P<task>\w+)'\.",
     "* What went wrong:\nExecution failed for task ':{k}:{w}'.\n> Compilation failed; see the compiler error output for details.",
     "The Gradle subproject {k} stops compiling after a shared dependency bump.", None),
    ("java", "dependency_resolution", "_", r"Failed to execute goal (?P<plugin>com\.acme\.{k}:[\w.-]+):(?P<version>[\d.]+):\w+",
     "[ERROR] Failed to execute goal com.acme.{k}:{w}-maven-plugin:3.{n}.1:generate (default) on project app: Execution failed",
     "The in-house Maven plugin for {k} fails code generation; it needs the schema registry.", None),
    ("rust", "compile_error", "_", r"error\[E0(?P<code>[5-9]\d\d)\]: [^\n]*\n\s+--> (?P<file>crates/{k}/src/\S+)",
     "error[E0{c}]: mismatched types\n   --> crates/{k}/src/lib.rs:{n}:17",
     "The crate {k} no longer type-checks against the workspace's pinned dependencies.", None),
    ("c", "compile_error", "_", r"{k}\.c:(?P<line>\d+):\d+: error: implicit declaration of function '(?P<func>\w+)'",
     "src/{k}.c:{n}:5: error: implicit declaration of function '{w}_init' [-Werror=implicit-function-declaration]",
     "The C sources of {k} call a function whose header is missing with newer toolchains.", None),
    ("docker", "image_pull", "-", r"failed to solve: (?P<image>registry\.acme\.dev/{k}):(?P<tag>[\w.-]+): not found",
     "ERROR: failed to solve: registry.acme.dev/{k}:1.{n}.3: not found",
     "The base image registry.acme.dev/{k} tag was garbage-collected from the registry.", None),
    ("helm", "deploy_failure", "-", r"UPGRADE FAILED: release (?P<release>{k}-\w+) failed",
     "Error: UPGRADE FAILED: release {k}-{w} failed, and has been rolled back due to atomic being set",
     "Helm upgrades of {k} roll back when its readiness probe is slower than the timeout.", None),
    ("python", "test_failure", "_", r"FAILED tests/test_{k}\.py::(?P<test>\w+) - (?P<exc>\w+(?:Error|Exception))",
     "FAILED tests/test_{k}.py::test_{w} - AssertionError: assert {n} == {c}",
     "A flaky test module of {k} compares wall-clock values.", None),
    ("internal", "build_failure", "-", r"E(?P<code>\d{4}): component {k} failed: (?P<detail>\S+)",
     "E{c}0: component {k} failed: {w}_{h}", "The internal build step for component {k} fails.", None),
    ("infra", "infra", "-", r"(?i){k} health ?check failed after (?P<attempts>\d+) attempts",
     "deploy: {K} HEALTH CHECK FAILED after {n} attempts", "Smoke tests of {k} give up before the service is ready.", None),
    ("terraform", "infra", "-", r"Error: creating (?P<resource>[\w ]+) \((?P<id>{k}-[\w-]+)\): operation error",
     "Error: creating IAM Role ({k}-{w}): operation error IAM: CreateRole, https response error StatusCode: 409",
     "Terraform tries to recreate an IAM role of {k} that already exists.", None),
    ("python", "test_failure", "camel", r"(?P<exc>{k}Error): (?P<message>[^\n]+)",
     'Traceback (most recent call last):\n  File "/app/svc/main.py", line {n}, in run\n    raise {k}Error(msg)\n{k}Error: {w} rejected request {h}',
     "The {k} client raises its own error when the upstream rejects a request.", "Traceback (most recent call last)"),
]  # fmt: skip
NOISE = [
    "Downloading {w}-{n}.{c}.tar.gz ({n} kB)", "   Compiling {w} v0.{n}.{c}", "ok  \tgithub.com/acme/{w}\t0.{n}s",
    "[{n}%] Building CXX object src/CMakeFiles/{w}.dir/{w}_{h}.cpp.o", "PASSED tests/test_{w}.py::test_{w}_{n}",
    "npm http fetch GET 200 https://registry.npmjs.org/{w} {n}ms (cache hit)", "Step {n}/{c} : RUN make {w}",
    "[INFO] --- maven-compiler-plugin:3.11.0:compile (default-compile) @ {w} ---", "##[group]Run make {w}",
    "warning: unused variable `{w}_{n}`", "Collecting {w}>={n}.0", "  Using cached {w}-{n}.{c}-py3-none-any.whl",
]  # fmt: skip
WORDS = ["alpha", "bravo", "delta", "echo", "kilo", "lima", "oscar", "tango", "victor", "zulu"]


# A middle word makes keys past the first len(A) * len(B) unique: without it a library
# of 10,000 rules held each generated rule about seven times, and a failure validated
# every copy of its rule on the same line. The word sits in the middle so that no
# key's pattern matches inside another's text ("auth-api" is not in "auth-core-api").
C = "core edge batch stream admin sync cron mobile desk infra".split()  # noqa: SIM905


def key_for(i: int, style: str, pool: list[str] = A, unique: bool = True) -> str:
    """The i-th key of a template: ``auth-api`` up to len(pool) * len(B), then ``auth-core-api``.

    ``unique=False`` is the earlier generator, whose keys cycled after that.
    """
    a, b = pool[i % len(pool)], B[(i // len(pool)) % len(B)]
    middle = (i // (len(pool) * len(B))) % (len(C) + 1) if unique else 0
    words = [a, C[middle - 1], b] if middle else [a, b]
    joined = {"-": "-".join(words), "_": "_".join(words)}
    return joined.get(style) or "".join(map(str.title, words))


def fill(text: str, key: str, rng: random.Random) -> str:
    w, h = rng.choice(WORDS), f"{rng.getrandbits(28):07x}"
    return text.format(
        k=key, K=key.upper(), w=w, h=h, n=rng.randint(2, 99), c=rng.randint(500, 999)
    )


def synth_rules(
    n_rules: int, rules_dir: Path, actions_dir: Path, rng: random.Random, unique: bool = True
) -> dict:
    """Write the shipped rules plus generated ones; return name -> how to make its failure."""
    shutil.copytree(ROOT / "rules", rules_dir)
    shutil.copytree(ROOT / "actions", actions_dir)
    (actions_dir / "bench_actions.py").write_text(ACTIONS)
    makers: dict[str, Any] = {}
    shipped = sorted(rules_dir.glob("*.rule.yaml"))
    keep = {p.name for p in shipped[: n_rules // 2 - 1]} | {FLAKE.name}  # at most half shipped
    for path in shipped:
        if path.name in keep:
            rule = Rule.model_validate(yaml.safe_load(path.read_text()))
            makers[rule.name] = ("shipped", rule)
        else:
            path.unlink()
    for i in range(n_rules - len(makers)):
        t = TEMPLATES[i % len(TEMPLATES)]
        key = key_for(i // len(TEMPLATES), t[2], unique=unique)
        pattern = t[3].replace("{k}", key)
        pinned, mode = i % 3 == 0, "retry" if i % 9 == 4 else "track" if i % 6 == 5 else "fix"
        group = min(re.compile(pattern).groupindex.items(), key=lambda kv: kv[1])[0]
        stderr: dict[str, Any] = {"fact": "stderr", **({"contains": t[6]} if t[6] else {})}
        stderr.update(regex=pattern, examples=[fill(t[4], key, rng) for _ in range(2)])
        when = [{"fact": "problem_type", "equals": t[1]}] * pinned + [stderr]
        rule: dict[str, Any] = {"name": f"{t[0]}_{key.lower().replace('-', '_')}_{i}", "description": t[5].format(k=key),
                                "tags": [t[0], t[1]], "mode": mode, "when": when}  # fmt: skip
        if mode == "fix":
            action = ("bench_patch", "target") if i % 4 == 1 else ("bench_note", "detail")
            rule["then"] = [{"action": action[0], "params": {action[1]: f"{{extract.{group}}}"}}]
        (rules_dir / f"{rule['name']}.rule.yaml").write_text(yaml.safe_dump(rule, sort_keys=False))
        makers[rule["name"]] = ("synth", (t, key, pinned))
    return makers


def make_failure(rng: random.Random, makers: dict, flake: list[str], pool: list[str]) -> dict:
    """One CI failure: tens of KB of noise, an error signature near the end."""
    facts: dict[str, Any] = {"command": "make ci", "exit_code": rng.choice([1, 2, 137])}
    roll = rng.random()
    if roll < 0.2:  # about a fifth match no rule
        t = rng.choice(TEMPLATES)
        facts.update(language=t[0], problem_type="unknown")
        if roll < 0.12:  # a component no rule knows
            signature = fill(t[4], key_for(rng.randrange(40), t[2], UNKNOWN), rng)
        elif roll < 0.17:  # a known signature, but its rule pins another problem_type
            t, key, _ = rng.choice([m for kind, m in makers.values() if kind == "synth" and m[2]])
            signature = fill(t[4], key, rng)
        else:  # nothing recognisable
            signature = ""
    else:
        kind, spec = makers[rng.choice(sorted(makers))]
        if kind == "shipped":
            for c in spec.when:
                if c.equals is not None or c.one_of:
                    facts[c.fact] = as_text(c.equals if c.equals is not None else c.one_of[0])
            signature = rng.choice([e for c in spec.when for e in c.examples]).rstrip()
        else:
            t, key, _ = spec
            facts.update(language=t[0], problem_type=t[1])
            signature = fill(t[4], key, rng)
        if rng.random() < 0.15:  # a network blip in the same log: two rules validate
            signature = rng.choice(flake).rstrip() + "\n" + signature
    lines = rng.choices(pool, k=rng.randint(100, 600))
    stamp = "2025-06-01T10:{:02d}:{:02d}.{:07d}Z "
    body = [stamp.format(j // 60 % 60, j % 60, j * 7919 % 10**7) + ln for j, ln in enumerate(lines)]
    tail = ["make: *** [Makefile:42: ci] Error 1", "##[error]Process completed with exit code 2."]
    facts["stderr"] = "\n".join([*body, signature, *tail])
    assert len(facts["stderr"]) < 60_000  # the worker keeps facts up to 64 KB whole
    return facts


class Floor:
    """Every rule's conditions with Python ``re``, in file order.

    Rules may use syntax only the ``regex`` module knows (the schema compiles
    with it: a group name repeated across alternatives, a variable-width
    look-behind); those patterns use it. The facts are those rules see (a
    ``log`` joined from the streams, without time stamps): without it no
    shipped rule on ``log`` was ever valid here, and ``missed`` guarded only
    the generated rules.
    """

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        def rx(p: str) -> re.Pattern[str]:
            try:
                return re.compile(p)
            except re.error:
                return regex.compile(p)  # type: ignore[no-any-return]

        # Each condition's operators, as the rules' table (core.rules.operators) checks them.
        self.rules = [(r.name, [(c, c.active()) for c in r.when]) for r in rules]
        self.patterns = {
            operand: rx(operand)
            for _, conds in self.rules
            for _, ops in conds
            for op, operand in ops
            if op.pattern and isinstance(operand, str)
        }

    def search(self, pattern: str, text: str) -> re.Match[str] | None:
        return self.patterns[pattern].search(text)

    def holds(self, c: FactCondition, ops: list[tuple[Operator, Operand]], facts: dict) -> bool:
        if facts.get(c.fact) is None:
            return False
        text = as_text(facts[c.fact])
        return all(op.holds(text, operand, self.search) for op, operand in ops)

    def valid(self, facts: dict, first: bool = False) -> list[str]:
        facts = resolver_mod.matching_facts(facts)  # the `log` the shipped rules are written for
        found = []
        for name, conds in self.rules:
            if all(self.holds(c, ops, facts) for c, ops in conds):
                found.append(name)
                if first:
                    break
        return found


def corpus(n: int, seed: int, run: int, makers: dict, flake: list[str]) -> list[dict]:
    """A fleet's day: 60% exact repeats of a hot set (fixed across runs), 40% fresh."""
    rng = random.Random(seed)
    pool = [fill(rng.choice(NOISE), rng.choice(WORDS), rng) for _ in range(4000)]
    hot = [make_failure(rng, makers, flake, pool) for _ in range(max(20, n // 20))]
    rng = random.Random(seed * 1000 + run + 1)
    weights = [1 / (i + 1) for i in range(len(hot))]
    return [rng.choices(hot, weights)[0] if rng.random() < 0.6 else make_failure(rng, makers, flake, pool) for _ in range(n)]  # fmt: skip


def check(verdicts: list[Verdict | None], truth: list[list[str]]) -> dict:
    """Missed: the floor found valid rules and the verdict names none of them."""
    out: Counter[str] = Counter()
    for verdict, valid in zip(verdicts, truth, strict=True):
        if verdict is None:
            out["no_verdict"] += 1
            continue
        out[str(verdict.status)] += 1
        named = verdict.rule or verdict.wrapper  # unexplained: only a wrapper validated
        named = named or next((r for r in valid if r in (verdict.reason or "")), None)
        if valid and named not in valid:
            out["missed"] += 1
        elif not valid and verdict.rule:
            out["false_positives"] += 1
    return {"missed": 0, "false_positives": 0, **out}


def wait_verdicts(tickets: list[Any], timeout: float) -> list[Verdict | None]:
    out: list[Verdict | None] = []
    for ticket in tickets:
        try:
            out.append(None if ticket.spooled else ticket.wait(timeout))
        except TimeoutError:
            out.append(None)
    return out


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


class Timed:
    """Proxy adding each method call's wall time to ``acc[name]``."""

    def __init__(self, target: Any, name: str, acc: dict) -> None:
        self._target, self._name, self._acc = target, name, acc

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._target, attr)
        return timed(value, self._name, self._acc) if callable(value) else value


def timed(func: Any, name: str, acc: dict) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            acc[name] += time.perf_counter() - start
            acc[name + "#calls"] += 1

    return wrapper


class TimedRuntime(Runtime):
    """The worker's Runtime, with SQL, Milvus and MiniLM calls timed."""

    acc: defaultdict[str, float] = defaultdict(float)

    @property
    def store(self) -> Any:
        return Timed(super().store, "sql", self.acc)

    @property
    def index(self) -> Any:
        return Timed(super().index, "milvus", self.acc)

    @property
    def embedder(self) -> Any:
        return Timed(super().embedder, "embed", self.acc)


def profile(rt: TimedRuntime, failures: list[dict]) -> dict:
    """Resolve in-process, exactly as a worker process does, and say where time went.

    The rules' scanner is built first and reported apart (``scanner_build_s``): compiling
    it is once per rules version and machine (seconds when the disk cache is cold, as
    after any rule edit), not a cost of each failure.
    """
    acc = rt.acc
    acc.clear()
    started = time.perf_counter()
    scanner = rt.knowledge().book.scanner
    build_s = time.perf_counter() - started
    svc, qv = rt.service, rt.query_vectors
    patches = [mock.patch.object(service_mod, n, timed(getattr(service_mod, n), n, acc))
               for n in ("bound_facts", "redact", "fingerprint", "_plan_key", "plan", "call_action")]  # fmt: skip
    patches.append(
        mock.patch.object(
            runtime_mod, "similarity_text", timed(runtime_mod.similarity_text, "query_text", acc)
        )
    )
    # Inside plan: the log as rules see it, the one Hyperscan pass, the candidates checked in full.
    patches += [mock.patch.object(resolver_mod, n, timed(getattr(resolver_mod, n), n, acc))
                for n in ("matching_facts", "evaluate")]  # fmt: skip
    patches.append(mock.patch.object(Scanner, "scan", timed(Scanner.scan, "scan", acc)))
    payloads = []
    for facts in failures:
        fid = str(uuid.uuid4())
        payloads.append((build_payload(facts, failure_id=fid), fid))
    sql = SqlCounter(rt.store.engine)
    for p in patches:
        p.start()
    try:
        start = time.perf_counter()
        for payload, fid in payloads:
            svc.resolve(SubmitRequest.from_wire(payload), fid)
        total = time.perf_counter() - start
    finally:
        for p in patches:
            p.stop()
        sql.stop()
    inner = acc["embed"] + acc["milvus"] + acc["query_text"]
    parts = {
        "parse + redact": acc["bound_facts"] + acc["redact"], "fingerprint": acc["fingerprint"],
        "plan cache key": acc["_plan_key"], "rule matching (regex, binding)": acc["plan"] - inner,
        "query text": acc["query_text"], "embedding (MiniLM)": acc["embed"], "Milvus search": acc["milvus"],
        "SQL": acc["sql"], "actions": acc["call_action"],
    }  # fmt: skip
    parts["other"] = total - sum(parts.values())
    n = len(failures)
    matching = {
        "log prep (time stamps)": acc["matching_facts"], "scan (Hyperscan)": acc["scan"],
        "rules checked in full (regex, binding)": acc["evaluate"],
    }  # fmt: skip
    matching["ranking, other"] = parts["rule matching (regex, binding)"] - sum(matching.values())
    return {
        "failures": n, "fps": n / total,
        "scanner_build_s": build_s, "scanner_from_disk": scanner.loaded,
        "ms_per_failure": {k: 1000 * v / n for k, v in parts.items()},
        "rule_matching_ms_per_failure": {k: 1000 * v / n for k, v in matching.items()},
        "rule_matching_ms_per_plan": {k: 1000 * v / max(1, acc["plan#calls"]) for k, v in matching.items()},
        "share": {k: v / total for k, v in parts.items()},
        "calls": {k: int(acc[k + "#calls"]) for k in ("plan", "embed", "milvus", "sql")},
        # Failures' query vectors: from the process, from Redis (another worker's), or the model.
        "query_vectors": {"local": qv.hits_local, "shared": qv.hits_shared, "embedded": qv.embedded},
        "embeddings_per_failure": qv.embedded / n,
        "sql_per_failure": {k: v / n for k, v in sql.counts.items()},
    }  # fmt: skip


class SqlCounter:
    """Counts what reaches the database: statements, transactions, commits and round trips.

    A transaction is a ``with engine.begin()`` (or an autocommit connection's
    implicit one); statements are the queries sent. A round trip is a request
    the client sends and then waits on: each statement, the BEGIN a driver
    sends before a transaction's first statement (psycopg and sqlite3 both do,
    unless in autocommit), the COMMIT or ROLLBACK of a transaction that began,
    and a ping on checkout. On SQLite these are calls into the library in
    process; on PostgreSQL they are network round trips, and libpq's own trace
    of each connection counts them again from the wire (``wire_round_trips``:
    every Query and Sync message sent, each answered by one ReadyForQuery).
    """

    def __init__(self, engine: Any) -> None:
        from sqlalchemy import event

        self.engine, self.event = engine, event
        self.postgres = engine.dialect.name == "postgresql"
        self.counts = {"statements": 0, "transactions": 0, "commits": 0, "round_trips": 0}
        self.traces: dict[Any, Any] = {}  # psycopg connection -> its trace file
        self.hooks = {
            "before_cursor_execute": self.on_statement,
            "begin": lambda *_: self.bump("transactions"),
            "commit": lambda conn: self.on_end(conn, "commits"),
            "rollback": lambda conn: self.on_end(conn, None),
        }
        for name, hook in self.hooks.items():
            event.listen(engine, name, hook)
        event.listen(engine.pool, "checkout", self.on_checkout)

    def bump(self, key: str, n: int = 1) -> None:
        self.counts[key] += n

    def in_transaction(self, dbapi: Any) -> bool:
        if self.postgres:
            return bool(dbapi.info.transaction_status != 0)  # 0: IDLE
        return bool(dbapi.in_transaction)

    def on_statement(self, conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        dbapi = conn.connection.dbapi_connection
        if self.postgres:
            begins = not dbapi.autocommit and not self.in_transaction(dbapi)
        else:  # sqlite3 opens a transaction before DML only
            begins = dbapi.isolation_level is not None and not self.in_transaction(dbapi)
            begins = begins and not statement.lstrip().upper().startswith("SELECT")
        self.bump("statements")
        self.bump("round_trips", 1 + begins)

    def on_end(self, conn: Any, key: str | None) -> None:
        if key:
            self.bump(key)
        if self.in_transaction(conn.connection.dbapi_connection):
            self.bump("round_trips")

    def on_checkout(self, dbapi: Any, record: Any, _proxy: Any) -> None:
        if self.engine.pool._pre_ping or record.info.get("pinged"):
            self.bump("round_trips")
        if self.postgres and dbapi not in self.traces:
            from psycopg import pq

            self.traces[dbapi] = trace = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed in stop)
            dbapi.pgconn.trace(trace.fileno())
            dbapi.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)

    def stop(self) -> None:
        for name, hook in self.hooks.items():
            self.event.remove(self.engine, name, hook)
        self.event.remove(self.engine.pool, "checkout", self.on_checkout)
        if not self.postgres:
            return
        sent = 0
        for dbapi, trace in self.traces.items():
            if not dbapi.closed:
                dbapi.pgconn.untrace()  # flushes libpq's buffer
            trace.seek(0)
            frames = (line.rstrip("\n").split("\t", 3)[2:3] for line in trace if line[:2] == "F\t")
            sent += sum(frame in (["Query"], ["Sync"]) for frame in frames)
            trace.close()
        self.counts["wire_round_trips"] = sent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_worker(redis_url: str, name: str, timeout: float = 120) -> None:
    from celery import Celery

    app = Celery(broker=redis_url, backend=redis_url)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if any(name in key for reply in app.control.ping(timeout=0.5) or [] for key in reply):
                return
        raise RuntimeError(f"worker {name} did not answer a ping within {timeout:g}s")
    finally:
        app.close()


class Fleet:
    """Where each failure ran (``--ledger``): a job of one of 10 repositories, on the default
    branch or a pull request, on commits drawn from a few per repository, so each job's
    history grows as the run goes and the origin is decided over it."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.repos = [f"acme/{name}" for name in A[:10]]
        self.shas = {repo: [uuid.UUID(int=self.rng.getrandbits(128)).hex + "0" * 8 for _ in range(8)] for repo in self.repos}  # fmt: skip

    def ran(self, facts: dict) -> dict:
        """The failure's facts with a ``job`` and a ``run`` of their own (a fresh run id)."""
        rng, repo = self.rng, self.rng.choice(self.repos)
        run: dict[str, Any] = {
            "id": uuid.uuid4().hex, "repo": repo, "sha": rng.choice(self.shas[repo]),
            "attempt": 1, "finished_at": time.time(), "provider": "github",
        }  # fmt: skip
        if rng.random() < 0.5:
            run.update(branch="main")
        else:
            pr = rng.randrange(1, 40)
            run.update(branch=f"feature-{pr}", pr=str(pr), base_sha=rng.choice(self.shas[repo]))
        return {**facts, "job": f"github:{repo}/CI/{rng.choice(B[:5])}", "run": run}


def one_run(run: int, args: argparse.Namespace, client: TheowClient, floor: Floor, mk: dict, fl: list) -> dict:  # fmt: skip
    failures = corpus(args.failures, args.seed, run, mk, fl)
    if args.ledger:
        fleet = Fleet(args.seed * 100 + run)
        failures = [fleet.ran(facts) for facts in failures]
    start = time.perf_counter()
    for facts in failures:
        floor.valid(facts, first=True)
    floor_s = time.perf_counter() - start
    memo: dict[int, list[str]] = {}
    for facts in failures:  # ground truth: every valid rule (repeats are the same object)
        if id(facts) not in memo:
            memo[id(facts)] = floor.valid(facts)
    truth = [memo[id(facts)] for facts in failures]
    sample = random.Random(run).sample(range(len(failures)), min(args.latency_n, len(failures)))
    latencies, lat_verdicts = [], []
    for i in sample:
        t0 = time.perf_counter()
        lat_verdicts.append(client.submit(failures[i]).wait(args.timeout))
        latencies.append(1000 * (time.perf_counter() - t0))
    start = time.perf_counter()
    tickets = [client.submit(facts) for facts in failures]
    submit_s = time.perf_counter() - start
    verdicts = wait_verdicts(tickets, args.timeout)
    elapsed = time.perf_counter() - start
    checked = check(verdicts + lat_verdicts, truth + [truth[i] for i in sample])
    fps, floor_fps = len(failures) / elapsed, len(failures) / floor_s
    return {
        "floor_fps": floor_fps, "floor_ms_per_failure": 1000 * floor_s / len(failures),
        "latency_p50_ms": pct(latencies, 50), "latency_p99_ms": pct(latencies, 99),
        "latency_p50_vs_floor": pct(latencies, 50) / (1000 * floor_s / len(failures)),
        "throughput_fps": fps, "throughput_vs_floor": fps / floor_fps, "submit_s": submit_s,
        "floor_valid": sum(bool(t) for t in truth), "floor_multi": sum(len(t) > 1 for t in truth),
        "distinct": len({id(f) for f in failures}), **checked,
    }  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", type=int, default=200)
    ap.add_argument("--failures", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3, help="0 with --profile: the profile alone")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--latency-n", type=int, default=200, help="single submits per run")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--timeout", type=float, default=300, help="seconds to wait for a verdict")
    ap.add_argument("--quick", action="store_true", help="50 rules, 200 failures, 1 run")
    ap.add_argument("--profile", action="store_true", help="in-process time breakdown too")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--keep", action="store_true", help="keep the temporary home (logs, DB)")
    ap.add_argument(
        "--duplicates",
        action="store_true",
        help="the earlier generator: past 1,344 generated rules each is a copy of "
        "an earlier one but for its name and examples, so most failures tie",
    )
    ap.add_argument(
        "--ledger",
        action="store_true",
        help="each failure with where it ran (job and run facts): its run recorded in the "
        "ledger and its origin decided, as a CI agent's are",
    )
    ap.add_argument(
        "--database-url",
        default="",
        help="the store (migrated first); default: SQLite in the temporary home",
    )
    args = ap.parse_args()
    if args.quick:
        args.rules, args.failures, args.runs, args.latency_n = 50, 200, 1, 50
    console, t0 = Console(stderr=True), time.monotonic()

    def say(text: str) -> None:
        console.print(f"[dim]{time.monotonic() - t0:6.1f}s[/dim] {text}")

    tmp = Path(tempfile.mkdtemp(prefix="theow-bench-"))
    settings = Settings(
        home=tmp / "home", redis_url=f"redis://127.0.0.1:{free_port()}/0",
        milvus_uri=f"http://127.0.0.1:{free_port()}", rules_dir=tmp / "rules", actions_dir=tmp / "actions",
        database_url=args.database_url,
    )  # fmt: skip
    makers = synth_rules(
        args.rules, settings.rules_dir, settings.actions_dir, random.Random(args.seed),
        unique=not args.duplicates,
    )  # fmt: skip
    flake = Rule.model_validate(yaml.safe_load(FLAKE.read_text())).when[0].examples
    stack, client, rt = EmbeddedStack(settings), None, None
    result: dict[str, Any] = {"config": {"rules": args.rules, "failures": args.failures, "runs": args.runs,
                              "concurrency": args.concurrency, "latency_n": args.latency_n, "seed": args.seed, "duplicates": args.duplicates, "ledger": args.ledger,
                              "database": make_url(settings.store_url).get_backend_name()}}  # fmt: skip
    try:
        say(f"starting Valkey, Milvus Lite in {tmp}, the store at {settings.store_url} …")
        stack.start()
        settings = stack.settings  # with the broker's generated password
        rt = TimedRuntime(settings)
        # Syncing the index embeds every rule: with the vectors kept on disk by text
        # (THEOW_EMBEDDING_CACHE), only the first run on a machine pays it. The
        # failures are then embedded as a worker does, with no vectors from disk.
        from theow_workers.adapters.embedder import MiniLMEmbedder

        rt._embedder = MiniLMEmbedder()
        book = rt.knowledge().book  # loads the rules and syncs the index
        rt._embedder = None
        shipped = sum(kind == "shipped" for kind, _ in makers.values())
        result["config"].update(shipped_rules=shipped, rules_version=book.version)
        say(f"{len(book.rules)} rules indexed ({shipped} shipped, the rest synthesized)")
        floor = Floor(book.rules)
        # An agent as a build agent is one: a token of its own, every submission signed.
        tokens = TokenStore.at(settings.store_url)
        token = str(tokens.add("bench", "agent"))
        tokens.close()
        if args.profile:
            say("profiling in-process …")
            result["profile"] = profile(
                rt, corpus(args.failures, args.seed, -1, makers, flake)[:500]
            )
            say("one verdict, stage by stage …")
            fresh = corpus(args.failures, args.seed, -3, makers, flake)[:500]
            result["profile"]["stages"] = resolve_stages.stage_profile(rt, fresh, token)
            rt.index.close()  # an idle gRPC channel only draws keepalive complaints
            # The workers start without the profile's query vectors, as a fleet would.
            for key in rt.redis.scan_iter(names.key_query_vector("*", "*")):
                rt.redis.delete(key)
        result["runs_raw"] = []
        if args.runs == 0:  # --profile alone: the in-process breakdown, no worker
            raise _ProfileOnly
        stack.start_worker(["resolve"], concurrency=args.concurrency)
        wait_for_worker(settings.redis_url, "resolver")
        client = TheowClient(redis_url=settings.redis_url, spool_dir=tmp / "spool", token=token)
        warm = corpus(args.failures, args.seed, -2, makers, flake)
        # Two-rule failures make each pool process load MiniLM.
        warm = sorted(warm[:300], key=lambda f: -len(floor.valid(f)))[:20]
        wait_verdicts([client.submit(f) for f in warm], 300)
        say(f"worker warmed with {len(warm)} failures")
        for run in range(args.runs):
            say(f"run {run + 1}/{args.runs} …")
            result["runs_raw"].append(one_run(run, args, client, floor, makers, flake))
    except _ProfileOnly:
        pass
    except KeyboardInterrupt:
        say("interrupted")
        return 130
    except Exception:
        for log in sorted(settings.home.glob("*.log")):
            say(f"--- tail of {log.name}:\n{log.read_text(errors='replace')[-2000:]}")
        raise
    finally:
        if client is not None:
            client.close()
        if rt is not None:
            rt.index.close()  # cheap: only closes a client that was opened
        stack.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    runs = result["runs_raw"]
    if not runs:
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            show_profile(result, Console())
        return 0
    keys = dict.fromkeys(k for r in runs for k in r)
    result["median"] = {k: statistics.median(r.get(k, 0) for r in runs) for k in keys}
    med = result["median"]
    result["targets"] = TARGETS
    result["pass"] = {
        "latency_p50_ms": med["latency_p50_ms"] <= TARGETS["latency_p50_ms"],
        "latency_p99_ms": med["latency_p99_ms"] <= TARGETS["latency_p99_ms"],
        "throughput_fps": med["throughput_fps"] >= TARGETS["throughput_fps"],
        "missed": all(r["missed"] == 0 for r in runs),
    }
    if "profile" in result:
        result["targets"] = {**TARGETS, "embeddings_per_failure": EMBEDDINGS_TARGET}
        embedded = result["profile"]["embeddings_per_failure"]
        result["pass"]["embeddings_per_failure"] = embedded <= EMBEDDINGS_TARGET
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        show(result)
    return 0 if all(result["pass"].values()) else 1


class _ProfileOnly(Exception):
    """``--runs 0``: the stack stops after the in-process profile."""


def figure(result: dict, key: str) -> float:
    """A target's figure: the runs' median, or the profile's for embeddings."""
    return float(result["median"].get(key, result.get("profile", {}).get(key, 0)))


def show(result: dict) -> None:
    out = Console()
    runs, med = result["runs_raw"], result["median"]
    cfg = ", ".join(f"{k} {v}" for k, v in result["config"].items())
    table = Table("figure", *(f"run {i + 1}" for i in range(len(runs))), "median", title=cfg)
    for key in med:
        cells = [r.get(key, 0) for r in [*runs, med]]
        table.add_row(key, *(f"{v:.2f}" if isinstance(v, float) else str(v) for v in cells))
    out.print(table)
    for key, ok in result["pass"].items():
        out.print(
            f"{'PASS' if ok else 'FAIL'}  {key} (target {result['targets'][key]}, "
            f"{figure(result, key):.2f})"
        )
    show_profile(result, out)


def show_profile(result: dict, out: Console) -> None:
    if "profile" in result:
        p = result["profile"]
        per = ", ".join(f"{v:.2f} {k}" for k, v in p["sql_per_failure"].items())
        prof = Table("step", "ms/failure", "share", title=f"in-process resolve of {p['failures']} failures: {p['fps']:.0f}/s, calls {p['calls']}; SQL per failure: {per}")  # fmt: skip
        for step, ms in p["ms_per_failure"].items():
            prof.add_row(step, f"{ms:.2f}", f"{p['share'][step]:.0%}")
            if step.startswith("rule matching"):
                for part, part_ms in p["rule_matching_ms_per_failure"].items():
                    prof.add_row(f"  {part}", f"{part_ms:.2f}", "")
        out.print(prof)
        if "stages" in p:
            resolve_stages.show(p["stages"], out)
        source = "loaded from the disk cache" if p["scanner_from_disk"] else "compiled"
        out.print(f"scanner built before the clock: {source} in {p['scanner_build_s']:.2f}s")


if __name__ == "__main__":
    sys.exit(main())
