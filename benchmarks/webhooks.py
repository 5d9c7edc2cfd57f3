"""Webhook burst: 1,000 deliveries at once, all accepted, none lost, each failure resolved once.

    .venv/bin/python benchmarks/webhooks.py                    # 1,000 deliveries, table
    .venv/bin/python benchmarks/webhooks.py --deliveries 200 --json

It starts the embedded stack as ``theow up`` does (Valkey, Milvus Lite, SQLite
in a temporary home) with the shipped rules, one resolver worker, a fake GitHub
API on loopback (``tests/fakes/forge_server.py``) serving every job's log, and
the console under uvicorn with ``THEOW_GITHUB_WEBHOOK_SECRET`` set. Then
``--threads`` senders post the deliveries as fast as the server answers: a tenth
of them are GitHub's redeliveries of a job already sent (same job and attempt,
new delivery id), the rest distinct failed jobs, half with a log the shipped
rules know. Pull-request comments are on, ten pull requests share the jobs.

It fails (exit 1) unless all hold: every delivery was answered 202 (new) or
200 (already received) and nothing else; the store holds exactly one failure
and one verdict per distinct job, each under its job's idempotency key; each
pull request has exactly one comment. It reports deliveries/s at the door
(the intake's own rate) and failures/s to the last verdict.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2 as httpx
from sqlalchemy import func, select

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.resolve import free_port, wait_for_worker  # noqa: E402
from tests.fakes.forge_server import FakeForge  # noqa: E402
from theow_workers.config import Settings  # noqa: E402
from theow_workers.stack import EmbeddedStack  # noqa: E402
from theow_workers.store.results import SqlStore  # noqa: E402
from theow_workers.store.schema import FailureRow, VerdictRow  # noqa: E402

SECRET = "benchmark-webhook-secret"
TOKEN = "benchmark-forge-token"
PULLS = 10
KNOWN = "npm ERR! code ERESOLVE\nnpm ERR! ERESOLVE unable to resolve dependency tree"


def event(job_id: int) -> bytes:
    return json.dumps(
        {
            "action": "completed",
            "repository": {"full_name": "bench/app"},
            "workflow_job": {"id": job_id, "run_id": 1, "run_attempt": 1, "name": f"job-{job_id}",
                             "workflow_name": "CI", "conclusion": "failure",
                             "head_sha": f"sha{job_id % PULLS}",
                             "html_url": f"https://github.com/bench/app/job/{job_id}"},
        }
    ).encode()  # fmt: skip


def headers(body: bytes, delivery: str) -> dict[str, str]:
    digest = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature-256": f"sha256={digest}", "X-GitHub-Event": "workflow_job",
            "X-GitHub-Delivery": delivery, "Content-Type": "application/json"}  # fmt: skip


class Console:
    """The real app under uvicorn on a loopback port."""

    def __init__(self, settings: Settings) -> None:
        import uvicorn

        from theow_workers.web.app import create_app

        config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=0,
                                log_level="warning")  # fmt: skip
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.05)
        return f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"

    def __exit__(self, *_: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


def count(store_url: str) -> tuple[int, int, int]:
    store = SqlStore(store_url)
    try:
        with store.session() as s:
            failures = s.execute(select(func.count()).select_from(FailureRow)).scalar_one()
            verdicts = s.execute(select(func.count()).select_from(VerdictRow)).scalar_one()
            keys = s.execute(select(func.count(func.distinct(FailureRow.idempotency_key))))
            return int(failures), int(verdicts), int(keys.scalar_one())
    finally:
        store.dispose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--deliveries", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=32, help="concurrent senders")
    parser.add_argument("--concurrency", type=int, default=2, help="resolver pool processes")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for every verdict")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()

    distinct = args.deliveries - args.deliveries // 10
    plan = [(i, f"d-{i}") for i in range(distinct)]
    plan += [(i * 7 % distinct, f"redelivery-{i}") for i in range(args.deliveries - distinct)]
    tmp = Path(tempfile.mkdtemp(prefix="theow-webhooks-"))
    with FakeForge(token=TOKEN) as fake:
        for i in range(distinct):
            fake.logs[str(i)] = (KNOWN if i % 2 else f"step {i}\nunheard-of failure {i}") + "\n"
        for p in range(PULLS):
            fake.pulls[f"sha{p}"] = [p + 1]
        os.environ.update(
            THEOW_GITHUB_WEBHOOK_SECRET=SECRET, THEOW_GITHUB_TOKEN=TOKEN,
            THEOW_GITHUB_API_URL=fake.url, THEOW_PR_COMMENTS="on",
            THEOW_FORGE_CALLS_PER_MINUTE="1000000",  # the door and the workers, not the limit
        )  # fmt: skip
        settings = Settings.load(
            env={
                **os.environ,
                "THEOW_HOME": str(tmp / "home"),
                "THEOW_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",
                "THEOW_MILVUS_URI": f"http://127.0.0.1:{free_port()}",
                "THEOW_WEB_PASSWORD": "benchmark-console-password",
            },
            path=tmp / "none.yaml",
        )
        stack = EmbeddedStack(settings)
        try:
            stack.start()
            settings = stack.settings
            stack.start_worker(["resolve"], concurrency=args.concurrency)
            wait_for_worker(settings.redis_url, "resolver")
            with Console(settings) as base, httpx.Client(base_url=base, timeout=30) as http:

                def send(item: tuple[int, str]) -> int:
                    body = event(item[0])
                    return http.post("/hooks/github", content=body,
                                     headers=headers(body, item[1])).status_code  # fmt: skip

                started = time.monotonic()
                with ThreadPoolExecutor(args.threads) as pool:
                    answers = Counter(pool.map(send, plan))
                door = time.monotonic() - started
                deadline = started + args.timeout
                while count(settings.store_url)[1] < distinct and time.monotonic() < deadline:
                    time.sleep(0.5)
                resolved = time.monotonic() - started
                time.sleep(2)  # anything late (a duplicate resolved twice) shows up now
            failures, verdicts, keys = count(settings.store_url)
        finally:
            stack.stop(timeout=10)
    comments = {number: len(listed) for number, listed in fake.comments.items()}
    result = {
        "config": {
            "deliveries": args.deliveries,
            "distinct_jobs": distinct,
            "threads": args.threads,
            "concurrency": args.concurrency,
        },
        "answers": {str(k): v for k, v in sorted(answers.items())},
        "failures_in_store": failures,
        "verdicts_in_store": verdicts,
        "deliveries_per_s_at_the_door": round(args.deliveries / door, 1),
        "failures_per_s_to_last_verdict": round(distinct / resolved, 2),
        "comments_per_pull_request": comments,
        "pass": {
            "all_accepted": answers[202] == distinct and answers[200] == args.deliveries - distinct,
            "none_lost": verdicts == distinct,
            "each_resolved_once": failures == distinct and keys == distinct,
            "one_comment_per_pull_request": sorted(comments.values()) == [1] * PULLS,
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0 if all(result["pass"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
