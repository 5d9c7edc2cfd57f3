"""Does a page of the JSON API cost the same on the last page as on the first?

    .venv/bin/python benchmarks/api_pages.py                 # 20,000 failures, limit=200
    .venv/bin/python benchmarks/api_pages.py --failures 100000 --limit 100

Stores ``--failures`` failures in a fresh SQLite database (three per second of
receipt time, so many share a second), serves the real app under uvicorn on
a loopback port, and walks ``GET /api/v1/failures`` from the first page to the
last with an api-read token. Prints one JSON object: pages, failures seen
and how many distinct (both must equal the stored count: keyset pagination
on ``(received_at, id)`` neither repeats nor skips), and the first, median
and last page's time. Keyset pages cost the same wherever they are; an
offset would grow with the page number.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import tempfile
import threading
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import uvicorn
from sqlalchemy import insert

from theow_workers.config import Settings
from theow_workers.store.schema import FailureRow, VerdictRow, make_engine, migrate
from theow_workers.store.tokens import TokenStore
from theow_workers.web.app import create_app

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A free loopback port for the server (closed before uvicorn binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def store(url: str, count: int) -> None:
    engine = make_engine(url)
    now = datetime.now(UTC)
    with engine.begin() as conn:
        conn.execute(insert(FailureRow), [
            {"id": f"f{n:07d}", "fingerprint": "fp", "facts": {"job": f"j{n % 5}", "repo": "r"},
             "problem_type": None, "source": "ci", "received_at": now - timedelta(seconds=n // 3),
             "explore": False, "notes": {}}
            for n in range(count)
        ])  # fmt: skip
        conn.execute(insert(VerdictRow), [
            {"failure_id": f"f{n:07d}", "status": "unmatched", "rule": None, "mode": None,
             "actions": [], "outputs": [], "reason": "", "attempts": 0, "decided_at": now}
            for n in range(count)
        ])  # fmt: skip
    engine.dispose()


def get(url: str, token: str) -> dict:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failures", type=int, default=20_000)
    parser.add_argument("--limit", type=int, default=200)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="theow-api-bench-"))
    try:
        url = f"sqlite:///{home / 'theow.db'}"
        migrate(url)
        store(url, args.failures)
        engine = make_engine(url)
        token = str(TokenStore(engine).add("bench", "api-read"))
        engine.dispose()
        settings = Settings.load(env={
            "THEOW_HOME": str(home), "THEOW_DATABASE_URL": url,
            "THEOW_RULES_DIR": str(ROOT / "rules"), "THEOW_ACTIONS_DIR": str(ROOT / "actions"),
            "THEOW_WEB_PASSWORD": "a-benchmark-console-secret",
            "THEOW_API_REQUESTS_PER_MINUTE": "1000000",
        })  # fmt: skip
        port = free_port()
        server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1",
                                               port=port, log_level="warning"))  # fmt: skip
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}/api/v1/failures?limit={args.limit}&cursor="
        cursor, times, seen = "", [], []
        start = time.perf_counter()
        while True:
            began = time.perf_counter()
            page = get(base + cursor, token)
            times.append(time.perf_counter() - began)
            seen += [f["id"] for f in page["failures"]]
            cursor = page["next"]
            if not cursor:
                break
        walk = time.perf_counter() - start
        server.should_exit = True
        thread.join(timeout=15)
        ordered = sorted(times)
        print(json.dumps({
            "failures": args.failures, "limit": args.limit, "pages": len(times),
            "seen": len(seen), "distinct": len(set(seen)),
            "first_page_ms": round(times[0] * 1000, 1),
            "median_page_ms": round(ordered[len(ordered) // 2] * 1000, 1),
            "last_page_ms": round(times[-1] * 1000, 1), "walk_s": round(walk, 2),
        }))  # fmt: skip
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
