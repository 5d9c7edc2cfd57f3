"""How long a new rule takes to answer: from its file written to its first matching verdict.

    .venv/bin/python benchmarks/rule_live.py                      # 1,000 rules, 5 new rules
    .venv/bin/python benchmarks/rule_live.py --rules 10000 --json

It builds the library ``benchmarks/resolve.py`` builds, starts the embedded
stack (Valkey, Milvus Lite, SQLite) on free ports in a temporary home and one
resolver worker (two processes), warms both processes, then ``--new`` times:
writes one new rule file into the rules directory, and right after sends a
failure its pattern matches, again and again (each waits for its verdict),
until a verdict names the new rule. The figure is the time from the file
written to that verdict in the client's hands; ``loading_notes`` counts the
unmatched verdicts meanwhile that said the rules were reloading. The target
is a median of at most 2 s; the exit code is 1 when it is missed.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from resolve import free_port, synth_rules, wait_for_worker
from rich.console import Console

from theow_client import TheowClient
from theow_workers.config import Settings
from theow_workers.runtime import Runtime
from theow_workers.stack import EmbeddedStack
from theow_workers.store.tokens import TokenStore

TARGET_S = 2.0
RULE = """name: {name}
description: A component of the live benchmark fails its {n}th self-check.
mode: track
when:
  - fact: log
    regex: 'LIVE{n}-{nonce} self-check exploded: (?P<what>\\w+)'
    examples:
      - "LIVE{n}-{nonce} self-check exploded: gearbox"
"""


def failure(n: int, nonce: str) -> dict:
    noise = [f"step {i}: compiling module m{i}" for i in range(300)]
    tail = [f"LIVE{n}-{nonce} self-check exploded: gearbox", "make: *** [ci] Error 1"]
    return {"command": "make ci", "exit_code": 2, "log": "\n".join(noise + tail)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rules", type=int, default=1000)
    ap.add_argument("--new", type=int, default=5, help="new rules written, one after another")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120, help="seconds to wait for one rule")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args()
    console, t0 = Console(stderr=True), time.monotonic()

    def say(text: str) -> None:
        console.print(f"[dim]{time.monotonic() - t0:6.1f}s[/dim] {text}")

    tmp = Path(tempfile.mkdtemp(prefix="theow-live-"))
    settings = Settings(
        home=tmp / "home", redis_url=f"redis://127.0.0.1:{free_port()}/0",
        milvus_uri=f"http://127.0.0.1:{free_port()}", rules_dir=tmp / "rules",
        actions_dir=tmp / "actions",
    )  # fmt: skip
    synth_rules(args.rules, settings.rules_dir, settings.actions_dir, random.Random(7))
    stack, client, rt = EmbeddedStack(settings), None, None
    result: dict = {
        "config": {"rules": args.rules, "new": args.new, "concurrency": args.concurrency}
    }
    try:
        say(f"starting the stack in {tmp} …")
        stack.start()
        settings = stack.settings
        rt = Runtime(settings)
        from theow_workers.adapters.embedder import MiniLMEmbedder

        rt._embedder = MiniLMEmbedder()  # the rules' vectors from the disk cache, as resolve.py
        rt.knowledge()  # loads the rules and syncs the index
        rt.index.close()
        stack.start_worker(["resolve"], concurrency=args.concurrency)
        wait_for_worker(settings.redis_url, "resolver")
        tokens = TokenStore.at(settings.store_url)
        token = str(tokens.add("live", "agent"))
        tokens.close()
        client = TheowClient(redis_url=settings.redis_url, spool_dir=tmp / "spool", token=token)
        warm = [client.submit(failure(0, "warm")) for _ in range(8)]
        for ticket in warm:
            ticket.wait(300)
        say("worker warmed")
        times, notes, tries = [], [], []
        for n in range(1, args.new + 1):
            nonce = f"{random.getrandbits(32):08x}"
            name = f"live_rule_{n}_{nonce}"
            path = settings.rules_dir / f"{name}.rule.yaml"
            path.write_text(RULE.format(name=name, n=n, nonce=nonce))
            written = time.perf_counter()
            loading, sent = 0, 0
            while True:
                verdict = client.submit(failure(n, nonce)).wait(args.timeout)
                sent += 1
                if verdict.rule == name:
                    break
                loading += bool(verdict.extra.get("rules_loading"))
                if time.perf_counter() - written > args.timeout:
                    raise TimeoutError(f"rule {name} never matched within {args.timeout:g}s")
            times.append(time.perf_counter() - written)
            notes.append(loading)
            tries.append(sent)
            say(f"rule {n}: first match {times[-1]:.2f}s after its file was written "
                f"({sent} failures sent, {loading} said the rules were reloading)")  # fmt: skip
            time.sleep(1.0)  # a quiet second between changes, as a person makes them
        log = (settings.home / "worker-resolver.log").read_text(errors="replace")
        result.update(
            seconds_to_first_match=times, median_s=statistics.median(times),
            loading_notes=notes, failures_sent=tries, target_s=TARGET_S,
            scanner_builds=[line.split("] ", 1)[-1][:160] for line in log.splitlines() if "part(s)" in line][-4:],
        )  # fmt: skip
        result["pass"] = result["median_s"] <= TARGET_S
    finally:
        if client is not None:
            client.close()
        if rt is not None:
            rt.index.close()
        stack.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        console.print(result)
    return 0 if result.get("pass") else 1


if __name__ == "__main__":
    sys.exit(main())
