"""Load benchmark: many agents at once, each with its own token and broker user; nothing lost.

    .venv/bin/python benchmarks/load.py                      # 20 agents x 750 failures = 15,000
    .venv/bin/python benchmarks/load.py --agents 4 --per-agent 100 --json

It starts the embedded stack as ``theow up`` does (Valkey with its generated
password, Milvus Lite, SQLite in a temporary home) with the shipped rules, one
resolver worker, and one agent token per client, each with the broker user
``theow tokens add --scope agent`` makes (the ACL profile: push and read its own
verdicts). Every client thread submits its failures (a mix of logs the shipped
rules know and logs no rule knows, each with an idempotency key) and waits for
each verdict under its own agent's key.

It counts, and fails (exit 1) unless all hold: every failure got exactly one
verdict in the client, the store holds exactly one failure and one verdict per
submission, each recorded under the agent that sent it. It also reports
failures/s and the resolver's resident memory from a tenth of the way in to
the end (flat is the expectation; a figure, not a target).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.resolve import free_port, wait_for_worker  # noqa: E402
from theow_client import TheowClient, Verdict  # noqa: E402
from theow_workers.config import Settings  # noqa: E402
from theow_workers.ops.acl import agent_url, create_agent_user  # noqa: E402
from theow_workers.stack import EmbeddedStack  # noqa: E402
from theow_workers.store.tokens import TokenStore  # noqa: E402

KNOWN = [
    "go: github.com/imdario/mergo@v1.0.0: parsing go.mod:\n"
    "\tmodule declares its path as: dario.cat/mergo\n"
    "\t        but was required as: github.com/imdario/mergo",
    'Traceback (most recent call last):\n  File "app.py", line 1, in <module>\n'
    "ModuleNotFoundError: No module named 'yaml'",
    "npm ERR! code ETIMEDOUT\nnpm ERR! network request to https://registry.npmjs.org/x failed",
]


def facts_for(agent: int, n: int, rng: random.Random) -> dict[str, Any]:
    """One failure's facts: a log a shipped rule knows, or one of the agent's own."""
    if rng.random() < 0.7:
        log = f"step {n}\n" + rng.choice(KNOWN)
    else:
        log = f"step {n}\nERROR: widget {agent}-{n % 37} refused to frobnicate\nexit status 2"
    return {"log": log, "exit_code": 1, "job": f"agent-{agent}/build"}


def resident_kb(pid: int) -> int:
    """The resident memory of ``pid`` and its children (the worker's pool), in KB."""
    total = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if int(fields.get("Pid", "0")) == pid or int(fields.get("PPid", "0").strip()) == pid:
            total += int(fields.get("VmRSS", "0 kB").split()[0])
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--per-agent", type=int, default=750)
    parser.add_argument("--concurrency", type=int, default=2, help="resolver pool processes")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait per verdict")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="theow-load-"))
    settings = Settings.load(
        env={
            "THEOW_HOME": str(tmp / "home"),
            "THEOW_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
            "THEOW_MILVUS_URI": f"http://127.0.0.1:{free_port()}",
        },
        path=tmp / "none.yaml",
    )
    stack = EmbeddedStack(settings)
    try:
        stack.start()
        settings = stack.settings  # the admin URL, with the generated password
        tokens = TokenStore.at(settings.store_url)
        agents = []
        for i in range(args.agents):
            token = str(tokens.add(f"load-{i}", "agent"))
            create_agent_user(settings, f"load-{i}", token)
            agents.append((f"load-{i}", token))
        tokens.close()
        worker = stack.start_worker(["resolve"], concurrency=args.concurrency)
        wait_for_worker(settings.redis_url, "resolver")
        warm = TheowClient(
            redis_url=agent_url(settings.redis_url, *agents[0]),
            spool_dir=tmp / "spool-warm", token=agents[0][1],
        )  # fmt: skip
        warm.submit(facts_for(0, -1, random.Random(0))).wait(args.timeout)  # loads the rules
        warm.close()

        got: dict[str, list[Verdict | None]] = {}
        memory: list[int] = []
        total = args.agents * args.per_agent
        done = Counter[str]()

        def agent_run(i: int, name: str, token: str) -> None:
            rng = random.Random(i)
            client = TheowClient(
                redis_url=agent_url(settings.redis_url, name, token),
                spool_dir=tmp / f"spool-{i}", token=token,
            )  # fmt: skip
            tickets = [
                client.submit(facts_for(i, n, rng), idempotency_key=f"{name}/run-{n}")
                for n in range(args.per_agent)
            ]
            verdicts: list[Verdict | None] = []
            for ticket in tickets:
                try:
                    verdicts.append(None if ticket.spooled else ticket.wait(args.timeout))
                except TimeoutError:
                    verdicts.append(None)
                done[name] += 1
            got[name] = verdicts
            client.close()

        started = time.perf_counter()
        threads = [
            threading.Thread(target=agent_run, args=(i, name, token))
            for i, (name, token) in enumerate(agents)
        ]
        for thread in threads:
            thread.start()
        while any(t.is_alive() for t in threads):
            if sum(done.values()) >= total / 10:
                memory.append(resident_kb(worker.pid))
            time.sleep(1)
        elapsed = time.perf_counter() - started

        from theow_workers.store.schema import FailureRow, VerdictRow, make_engine

        engine = make_engine(settings.store_url)
        with engine.connect() as sql:
            failures = sql.execute(select(func.count()).select_from(FailureRow)).scalar_one()
            verdict_rows = sql.execute(select(func.count()).select_from(VerdictRow)).scalar_one()
            by_agent = dict(
                sql.execute(select(FailureRow.agent, func.count()).group_by(FailureRow.agent)).all()
            )
        engine.dispose()
        answered = sum(v is not None for verdicts in got.values() for v in verdicts)
        statuses = Counter(str(v.status) for verdicts in got.values() for v in verdicts if v)
        expected = {name: args.per_agent for name, _ in agents}
        expected[agents[0][0]] += 1  # the warm-up failure
        result = {
            "config": {
                "agents": args.agents,
                "per_agent": args.per_agent,
                "concurrency": args.concurrency,
            },
            "submitted": total,
            "verdicts_in_clients": answered,
            "failures_in_store": failures - 1,
            "verdicts_in_store": verdict_rows - 1,
            "statuses": dict(statuses),
            "failures_per_s": total / elapsed,
            "resolver_rss_mb": {"first": memory[0] / 1024, "last": memory[-1] / 1024}
            if memory
            else None,
            "pass": {
                "every_failure_one_verdict": answered == total and verdict_rows == failures,
                "store_one_failure_each": failures - 1 == total,
                "each_under_its_agent": by_agent == expected,
            },
        }
    finally:
        stack.stop(timeout=10)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0 if all(result["pass"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
