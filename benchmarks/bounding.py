"""Does bounding keep the cause? Labelled-chunk survival on real CI logs.

    .venv/bin/python benchmarks/bounding.py            # logchunks-dev, table
    .venv/bin/python benchmarks/bounding.py --json     # one JSON object on stdout

Every log of ``shared/corpus/logchunks-dev`` is bounded exactly as
``theow-client`` bounds a fact (:func:`theow_client.facts.bound_facts`, 64 KB).
A labelled chunk *survives* when, after the grading normalization (ANSI codes
removed, whitespace collapsed), its first 2,000 characters are still in the
bounded log, contiguous: the cause and what a person reads first. Chunks
longer than the whole budget cannot survive whole, so the whole-chunk figure
is reported too. Only logs whose chunk is found in the full log count.

The baseline is the old cut, a 25% head and a 75% tail of the same budget,
measured in the same run. Target: survival >= 97%.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from theow_client.facts import CUT_MARKER, DEFAULT_FACT_LIMIT, bound_facts  # noqa: E402
from theow_workers.core.resolve.grading import normalize  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus" / "logchunks-dev"
PREFIX = 2000
TARGET = 0.97


def head_and_tail(text: str, limit: int = DEFAULT_FACT_LIMIT) -> str:
    if len(text) <= limit:
        return text
    head = limit // 4
    omitted = len(text) - limit
    return text[:head] + CUT_MARKER.format(omitted=omitted) + text[-(limit - head) :]


def load(name: str) -> dict[str, dict[str, str]]:
    with gzip.open(CORPUS / name, "rt", encoding="utf-8") as handle:
        return {row["id"]: row for row in map(json.loads, handle)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    failures, labels = load("failures.jsonl.gz"), load("labels.jsonl.gz")
    counted = kept = kept_whole = baseline = over_limit = 0
    missed, times = [], []
    for ident, row in failures.items():
        log = row["stderr"]
        chunk = normalize(labels[ident]["chunk"])
        full = normalize(log)
        if not chunk or chunk[:PREFIX] not in full:
            continue
        counted += 1
        over_limit += len(log) > DEFAULT_FACT_LIMIT
        started = time.perf_counter()
        bounded = bound_facts({"log": log})[0]["log"]
        times.append(time.perf_counter() - started)
        text = normalize(bounded)
        if chunk[:PREFIX] in text:
            kept += 1
        else:
            missed.append(ident)
        kept_whole += chunk in text
        baseline += chunk[:PREFIX] in normalize(head_and_tail(log))
    report = {
        "logs": len(failures),
        "chunk_in_full_log": counted,
        "over_limit": over_limit,
        "survival": round(kept / counted, 4),
        "survival_whole_chunk": round(kept_whole / counted, 4),
        "baseline_head_tail_survival": round(baseline / counted, 4),
        "bound_ms_p50": round(statistics.median(times) * 1000, 2),
        "bound_ms_max": round(max(times) * 1000, 2),
        "missed": missed,
        "target": TARGET,
        "ok": kept / counted >= TARGET,
    }
    if args.json:
        print(json.dumps(report))
    else:
        print(f"chunk in the full log: {counted} of {len(failures)} logs ({over_limit} over 64 KB)")
        print(f"survives bounding:     {kept} ({kept / counted:.1%}), target {TARGET:.0%}")
        print(f"  whole chunk:         {kept_whole} ({kept_whole / counted:.1%})")
        print(f"  head+tail baseline:  {baseline} ({baseline / counted:.1%})")
        print(
            f"bounding time:         p50 {report['bound_ms_p50']} ms, max {report['bound_ms_max']} ms"
        )
        for ident in missed:
            print(f"  missed: {ident}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
