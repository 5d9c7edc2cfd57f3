"""How long a build waits when the broker is down: ``TheowClient().submit`` until the failure is spooled.

    .venv/bin/python benchmarks/offline_spool.py            # 20 runs, the median and the slowest
    .venv/bin/python benchmarks/offline_spool.py --json     # one JSON object on stdout

Two brokers that are down: a closed port (connection refused) and one that takes
the connection and closes it at once. Each run submits a 200,000-character log
(cut and masked before it is spooled) to a fresh spool directory. The target is
under 3 s (a build agent's step must not hang on Theow); the exit code is 1 when
the slowest run misses it. The test suite checks that the client spools after a
single connection attempt (tests/unit/test_client_spool.py); the seconds are here.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time

TARGET = 3.0


def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"redis://127.0.0.1:{sock.getsockname()[1]}/0"


def hanging_up() -> tuple[str, socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"redis://127.0.0.1:{server.getsockname()[1]}/0", server


def seconds_to_spool(url: str) -> float:
    from theow_client.client import TheowClient

    with tempfile.TemporaryDirectory() as spool:
        started = time.perf_counter()
        client = TheowClient(redis_url=url, spool_dir=spool, token=None)
        ticket = client.submit({"stderr": "x" * 200_000, "step": "go build"})
        elapsed = time.perf_counter() - started
        client.close()
    if not ticket.spooled:
        raise SystemExit(f"{url}: the failure was not spooled")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.pop("THEOW_AGENT_TOKEN", None)
    os.environ["THEOW_CLIENT_ENV"] = os.devnull  # no machine's client.env
    hung_url, server = hanging_up()
    try:
        figures = {}
        for name, url in (("refused", closed_port()), ("hung_up", hung_url)):
            runs = [seconds_to_spool(url) for _ in range(args.runs)]
            figures[name] = {"median_s": statistics.median(runs), "max_s": max(runs)}
    finally:
        server.close()
    missed = [n for n, f in figures.items() if f["max_s"] >= TARGET]
    if args.json:
        print(json.dumps({"runs": args.runs, "target_s": TARGET, **figures}))
    else:
        for name, f in figures.items():
            print(f"{name:8} median {f['median_s']:.3f} s, slowest {f['max_s']:.3f} s")
        print(
            f"target: every run under {TARGET:g} s: {'missed by ' + ', '.join(missed) if missed else 'met'}"
        )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
