"""Teaching in bulk: ``theow teach --from`` with labelled examples from real CI logs.

    .venv/bin/python benchmarks/teach.py                 # 100 examples, 3 runs
    .venv/bin/python benchmarks/teach.py --json --runs 1 # one JSON object on stdout
    .venv/bin/python benchmarks/teach.py --examples 40   # a quicker run

The examples are the first ``--examples`` labelled failures of
``shared/corpus/logchunks-dev`` (real Travis CI logs, in build order per
project), each given as ``{"facts": ..., "chunk": its label}``: a team's
known-issues list as the command reads it. Each run is the real command
(``python -m theow_workers.cli teach --from FILE --json``) in a fresh
temporary home over SQLite, the shipped rules as the library, the corpus's
280 failures stored first as the history every taught rule is tested on; no
Redis (the job's normal is said to be unknown, as in CI). A run with an
empty file measures the command's fixed cost (start-up, loading the
library), taken off to give the teaching rate.

Reported per run: proposals filed, examples found to be a rule filed
already, examples refused (and why, counted), the seconds, proposals per
second and examples per second, with and without the fixed cost. Not a
timed test: a figure to compare between versions on one machine.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus" / "logchunks-dev"
if not CORPUS.is_dir():
    CORPUS = Path("/work/shared/corpus/logchunks-dev")


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def examples(count: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the corpus's failures, the first ``count`` labelled ones as teaching examples)."""
    failures = _jsonl(CORPUS / "failures.jsonl.gz")
    labels = {row["id"]: row.get("chunk") or "" for row in _jsonl(CORPUS / "labels.jsonl.gz")}
    chosen = []
    for failure in failures:
        chunk = labels.get(failure["id"], "")
        if chunk.strip():
            facts = {k: v for k, v in failure.items() if k != "id"}
            chosen.append({"facts": facts, "chunk": chunk})
        if len(chosen) == count:
            break
    return failures, chosen


def _home(tmp: Path, failures: list[dict[str, Any]]) -> dict[str, str]:
    from theow_client.facts import bound_facts
    from theow_workers.core.ports import FailureRecord
    from theow_workers.store.results import SqlStore
    from theow_workers.store.schema import migrate

    (tmp / "rules").mkdir()
    (tmp / "actions").mkdir()
    url = f"sqlite:///{tmp / 'theow.db'}"
    migrate(url)
    store = SqlStore(url)
    for failure in failures:
        facts, _ = bound_facts({k: v for k, v in failure.items() if k != "id"})
        store.add_failure(FailureRecord(failure["id"], failure["id"], facts, "build_failure",
                                        "history", datetime.now(UTC)))  # fmt: skip
    store.dispose()
    env = dict(os.environ)
    env.update(
        THEOW_DATABASE_URL=url, THEOW_HOME=str(tmp / "home"), THEOW_REVIEWER="bench",
        THEOW_REDIS_URL="redis://127.0.0.1:1/0", THEOW_RULES_DIRS=str(tmp / "rules"),
        THEOW_ACTIONS_DIRS=str(tmp / "actions"), PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1",
    )  # fmt: skip
    return env


def _teach(env: dict[str, str], path: Path, cwd: Path) -> tuple[float, dict[str, Any]]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "theow_workers.cli", "teach", "--from", str(path), "--json"],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=3600,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"theow teach --from failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout)


def _kind(problem: str) -> str:
    """A refusal's kind: its message after ``FILE:LINE:``, numbers and quotes aside."""
    message = problem.split(".jsonl:", 1)[-1].split(": ", 1)[-1]
    message = re.sub(r"'[^']*'|\"[^\"]*\"", "…", message)
    return re.sub(r"\d+", "N", message)[:80]


def one_run(failures: list[dict[str, Any]], chosen: list[dict[str, Any]]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="theow-bench-teach-") as scratch:
        tmp = Path(scratch)
        env = _home(tmp, failures)
        empty, given = tmp / "empty.jsonl", tmp / "examples.jsonl"
        empty.write_text("")
        given.write_text("".join(json.dumps(e) + "\n" for e in chosen))
        fixed, _ = _teach(env, empty, tmp)
        seconds, report = _teach(env, given, tmp)
    filed = len(report["filed"])
    teaching = max(seconds - fixed, 1e-9)
    why = Counter(_kind(p) for p in report["problems"])
    return {
        "examples": len(chosen),
        "filed": filed,
        "same_rule": len(report["same_rule"]),
        "refused": len(report["problems"]),
        "refused_why": dict(why.most_common(5)),
        "seconds": round(seconds, 3),
        "fixed_seconds": round(fixed, 3),
        "proposals_per_s": round(filed / seconds, 2),
        "proposals_per_s_teaching": round(filed / teaching, 2),
        "examples_per_s_teaching": round(len(chosen) / teaching, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=100, help="labelled examples to teach")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args()
    failures, chosen = examples(args.examples)
    runs = []
    for run in range(args.runs):
        result = one_run(failures, chosen)
        runs.append(result)
        print(f"run {run + 1}: {result}", file=sys.stderr)
    summary = {
        "corpus": str(CORPUS),
        "stored_failures": len(failures),
        "runs": runs,
        "median_proposals_per_s": statistics.median(r["proposals_per_s"] for r in runs),
        "median_proposals_per_s_teaching": statistics.median(
            r["proposals_per_s_teaching"] for r in runs
        ),
    }
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        last = runs[-1]
        print(f"{last['examples']} examples: {last['filed']} proposals filed, "
              f"{last['same_rule']} of a rule filed already, {last['refused']} refused")  # fmt: skip
        print(f"proposals/s: {summary['median_proposals_per_s']} with start-up, "
              f"{summary['median_proposals_per_s_teaching']} teaching alone (median of {args.runs})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
